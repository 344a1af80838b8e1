#!/usr/bin/env bash
# Build the Walras container image from ./Dockerfile (`make image`).
#
#   hack/build-image.sh [--variant cpu|cuda] [--tag NAME] [--archive FILE] [--force]
#
#   --variant  cpu (default: numpy/scipy only) or cuda (adds torch; large)
#   --tag      image name (default walras:dev, or walras:dev-cuda)
#   --archive  also write the image as a docker-archive tarball (for `kind load image-archive`,
#              `docker load`, or `skopeo copy` to a registry)
#   --force    build even when an image of the same inputs exists
#
# WALRAS_IMAGE_ENGINE=docker|buildah picks the builder (default: docker where an engine answers).
# Where a Docker engine answers (`docker info`), this is `docker build`. Elsewhere (this project's
# machines and CI have no engine) it is Debian's buildah, run as root without a daemon:
# `--isolation chroot`, in a store of our own under $WALRAS_CACHE/image-store/<driver>. The storage
# driver is overlay where the kernel mounts overlayfs (probed), else vfs, which works everywhere
# but copies the whole file system at every step (a cold build several times slower, ~10x the
# disk); WALRAS_IMAGE_STORAGE_DRIVER=vfs|overlay forces one.
# The Dockerfile's FROM, debian:bookworm-slim, cannot be pulled here, so the same thing is made
# from Debian's packages: `debootstrap --variant=minbase bookworm`, trimmed the way the official
# slim image is (no docs, man pages or locales; apt lists and caches removed), committed with
# `buildah from scratch` under that name; `buildah bud --pull=never` then builds the unchanged
# Dockerfile. The root filesystem tarball is cached in $WALRAS_CACHE/image-base/.
#
# Build-machine plumbing stays here, not in the Dockerfile: package downloads inside RUN steps go
# through this machine's TLS-intercepting egress, which only the host's CA bundle (the one Debian's
# ca-certificates maintains) trusts. The bundle is bind-mounted read-only on /mnt (a directory the
# base already has, so no mount point is left in any layer) and pip is pointed at it through the
# Dockerfile's PIP_CERT build argument.
#
# No build runs when the image under the tag is the one last built from inputs of the same hash
# (Dockerfile, .dockerignore, pyproject.toml, README.md, src/, locks/, variant, base image); the
# hash and image id are kept in the store's directory (a stamp file rather than a label, since
# under vfs a LABEL step alone costs a full copy of the image). Otherwise the layer cache reuses
# the dependency layer as long as the variant's lock (locks/image-<variant>.txt) is unchanged.
#
# Prints key=value lines on stdout (logs go to stderr): engine, image, id, size_bytes, cached
# (1 when no build ran), build_s, and for buildah the global flags (`buildah_flags`) that reach
# the same store, e.g. `buildah $buildah_flags from --pull=never $image`.
set -o errexit -o nounset -o pipefail

CACHE="${WALRAS_CACHE:-$HOME/.cache/walras}"
BASE_IMAGE="docker.io/library/debian:bookworm-slim"
BASE_DIR="$CACHE/image-base"
BASE_TAR="$BASE_DIR/debian-bookworm-slim.tar"
MIRROR="${WALRAS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
STORE="${WALRAS_IMAGE_STORE:-$CACHE/image-store}"
HOST_CA="${WALRAS_BUILD_CA:-/etc/ssl/certs/ca-certificates.crt}"

variant=cpu
tag=""
archive=""
force=0

log() { printf '[build-image] %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

while (($#)); do
	case "$1" in
	--variant) variant="${2:?--variant needs a value}" && shift 2 ;;
	--tag) tag="${2:?--tag needs a value}" && shift 2 ;;
	--archive) archive="${2:?--archive needs a value}" && shift 2 ;;
	--force) force=1 && shift ;;
	-h | --help) sed -n '2,/^set -o/p' "$0" | sed '$d; s/^# \{0,1\}//' && exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
[[ "$variant" == cpu || "$variant" == cuda ]] || die "--variant must be cpu or cuda"
[[ -z "$archive" || "$archive" == /* ]] || archive="$PWD/$archive" # relative to the caller
cd "$(dirname "$0")/.."
if [[ -z "$tag" ]]; then
	tag="walras:dev"
	[[ "$variant" == cpu ]] || tag="walras:dev-$variant"
fi

# sha256 of every input of the image, in a stable order.
inputs_hash() {
	{
		printf 'variant=%s\nbase=%s\n' "$variant" "$1"
		find Dockerfile .dockerignore pyproject.toml README.md src locks -type f \
			! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*' -print0 |
			LC_ALL=C sort -z | xargs -0 sha256sum
	} | sha256sum | cut -d' ' -f1
}

# The stamp of the last build of this engine and tag: "<inputs hash> <image id>".
stamp_file() { printf '%s/stamps/%s-%s' "$STORE" "$1" "${tag//[^A-Za-z0-9._-]/_}"; }
up_to_date() { # engine hash current-image-id
	((force == 0)) && [[ -n "$3" && -f "$(stamp_file "$1")" && "$(cat "$(stamp_file "$1")")" == "$2 $3" ]]
}
write_stamp() { # engine hash image-id
	mkdir -p "$STORE/stamps"
	printf '%s %s\n' "$2" "$3" >"$(stamp_file "$1")"
}

report() { # engine id size cached seconds
	printf 'engine=%s\nimage=%s\nid=%s\nsize_bytes=%s\ncached=%s\nbuild_s=%s\n' \
		"$1" "$tag" "$2" "$3" "$4" "$5"
}

# ------------------------------------------------------------------------------------ docker
engine="${WALRAS_IMAGE_ENGINE:-auto}"
if [[ "$engine" == auto ]]; then
	engine=buildah
	if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
		engine=docker
	fi
fi
[[ "$engine" == docker || "$engine" == buildah ]] || die "WALRAS_IMAGE_ENGINE must be docker or buildah"

if [[ "$engine" == docker ]]; then
	hash="$(inputs_hash "$BASE_IMAGE")"
	start=$SECONDS
	cached=1
	if ! up_to_date docker "$hash" "$(docker image inspect --format '{{.Id}}' "$tag" 2>/dev/null)"; then
		cached=0
		log "docker build $tag (VARIANT=$variant)"
		docker build --build-arg "VARIANT=$variant" --tag "$tag" . >&2
		write_stamp docker "$hash" "$(docker image inspect --format '{{.Id}}' "$tag")"
	fi
	if [[ -n "$archive" ]]; then
		docker save --output "$archive" "$tag"
	fi
	report docker "$(docker image inspect --format '{{.Id}}' "$tag")" \
		"$(docker image inspect --format '{{.Size}}' "$tag")" "$cached" $((SECONDS - start))
	exit 0
fi

# ----------------------------------------------------------------------------------- buildah
for tool in buildah debootstrap; do
	command -v "$tool" >/dev/null || die "$tool not found: run \`make tools\` (hack/install-tools.sh)"
done
((EUID == 0)) || die "buildah without a Docker engine needs root here (chroot isolation, a store of our own)"
[[ -r "$HOST_CA" ]] || die "no CA bundle at $HOST_CA (set WALRAS_BUILD_CA)"

# buildah stores a short name as localhost/NAME; the archive keeps the name as given, which
# docker and kind read as docker.io/library/NAME.
archive_name="$tag"
[[ "$tag" == */* ]] || tag="localhost/$tag"

mkdir -p "$STORE" "$BASE_DIR"

# overlay where the kernel mounts it on the store's file system; vfs otherwise.
overlay_works() {
	local dir status=1
	dir="$(mktemp -d "$STORE/.overlay-probe.XXXXXX")"
	mkdir -p "$dir/lower" "$dir/upper" "$dir/work" "$dir/merged"
	if mount -t overlay overlay -o "lowerdir=$dir/lower,upperdir=$dir/upper,workdir=$dir/work" \
		"$dir/merged" 2>/dev/null; then
		umount "$dir/merged"
		status=0
	fi
	rm -rf "$dir"
	return "$status"
}
driver="${WALRAS_IMAGE_STORAGE_DRIVER:-}"
if [[ -z "$driver" ]]; then
	driver=vfs
	if overlay_works; then
		driver=overlay
	fi
fi
[[ "$driver" == overlay || "$driver" == vfs ]] || die "WALRAS_IMAGE_STORAGE_DRIVER must be overlay or vfs"

# The run root holds only locks and mount state: per boot, like /run/containers/storage.
# One per store: two stores must not share lock and mount state.
runroot="${WALRAS_IMAGE_RUNROOT:-/run/walras-buildah}/$(printf '%s' "$STORE/$driver" | sha256sum | cut -c1-16)"
buildah_flags=(--root "$STORE/$driver" --runroot "$runroot" --storage-driver "$driver")
b() { buildah "${buildah_flags[@]}" "$@"; }

# One build at a time per store (make image and the tests may race).
exec 8>"$STORE/.lock-$driver"
flock 8

tmp="$(mktemp -d "${TMPDIR:-/tmp}/walras-image.XXXXXX")"
cleanup() {
	if [[ -d "$tmp/rootfs" ]]; then
		# debootstrap may leave /proc or /sys mounted under a rootfs it did not finish.
		umount --recursive --lazy "$tmp/rootfs/proc" "$tmp/rootfs/sys" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

# Trim a debootstrap root filesystem the way debian:bookworm-slim is (debuerreotype's --slim).
slim_rootfs() {
	local root="$1"
	cat >"$root/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
# Like debian:*-slim: no documentation, manual pages or translations (copyrights kept).
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
EOF
	cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
	printf 'Acquire::Languages "none";\n' >"$root/etc/apt/apt.conf.d/docker-no-languages"
	rm -f "$root/etc/apt/sources.list"
	cat >"$root/etc/apt/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
	find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
	find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
	rm -rf "$root"/usr/share/{groff,info,linda,lintian/overrides,locale,man}/*
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin
	rm -f "$root"/var/log/{bootstrap.log,alternatives.log,dpkg.log} "$root"/var/log/apt/*.log
	rm -f "$root/etc/hostname" "$root/etc/resolv.conf" "$root"/var/cache/debconf/*-old
	: >"$root/etc/machine-id" # as in the official image: empty, filled per container if at all
}

base_id() { b inspect --type image --format '{{.FromImageID}}' "$BASE_IMAGE" 2>/dev/null; }

if ! base_id >/dev/null; then
	if [[ ! -s "$BASE_TAR" ]]; then
		log "debootstrap --variant=minbase bookworm ($MIRROR) -> $BASE_TAR"
		start=$SECONDS
		debootstrap --variant=minbase bookworm "$tmp/rootfs" "$MIRROR" >"$tmp/debootstrap.log" 2>&1 ||
			{
				tail -n 30 "$tmp/debootstrap.log" >&2
				die "debootstrap failed"
			}
		slim_rootfs "$tmp/rootfs"
		tar --numeric-owner --xattrs -C "$tmp/rootfs" -cf "$tmp/base.tar" .
		mv "$tmp/base.tar" "$BASE_TAR"
		rm -rf "$tmp/rootfs"
		log "base root filesystem made in $((SECONDS - start)) s"
	fi
	log "commit $BASE_IMAGE from $BASE_TAR"
	ctr="$(b from --quiet scratch)"
	mnt="$(b mount "$ctr")"
	tar --numeric-owner --xattrs -C "$mnt" -xpf "$BASE_TAR"
	b umount "$ctr" >/dev/null
	b config --cmd '["bash"]' --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		--label dev.walras.base="debootstrap --variant=minbase bookworm, slimmed" "$ctr"
	b commit --quiet --rm "$ctr" "$BASE_IMAGE" >/dev/null
fi

hash="$(inputs_hash "$(base_id)")"
image_id() { b inspect --type image --format '{{.FromImageID}}' "$tag" 2>/dev/null; }
start=$SECONDS
cached=1
previous="$(image_id || true)"
if ! up_to_date "buildah-$driver" "$hash" "$previous"; then
	cached=0
	mkdir -p "$tmp/ca"
	cp "$HOST_CA" "$tmp/ca/ca-certificates.crt"
	log "buildah bud $tag (VARIANT=$variant, storage driver $driver)"
	b bud --isolation chroot --pull=never --layers --network host \
		--volume "$tmp/ca:/mnt:ro" --build-arg PIP_CERT=/mnt/ca-certificates.crt \
		--build-arg "VARIANT=$variant" --file Dockerfile --tag "$tag" . >&2
	write_stamp "buildah-$driver" "$hash" "$(image_id)"
	# Housekeeping, so that a store rebuilt after every change does not grow without bound: the
	# stages' working containers bud leaves behind, and the image this tag named before (its large
	# top layer; the layer cache lives in the intermediate images, which stay). Neither is in use:
	# the lock is held, and a container still using the old image keeps it (rmi refuses).
	b containers --format '{{.ContainerName}}' | { grep -- '-working-container$' || true; } |
		while read -r name; do b rm "$name" >/dev/null; done
	if [[ -n "$previous" && "$previous" != "$(image_id)" ]]; then
		b rmi "$previous" >/dev/null 2>&1 || true
	fi
fi
seconds=$((SECONDS - start))

if [[ -n "$archive" ]]; then
	rm -f "$archive"
	b push --quiet "$tag" "docker-archive:$archive:$archive_name" >&2
	log "wrote $archive"
fi

id="$(image_id)"
# Uncompressed size of all layers (what `docker image ls` shows): the local store's manifest lists
# each layer's uncompressed tar size (buildah stores layers uncompressed).
size="$(b inspect --type image --format '{{.Manifest}}' "$tag" |
	python3 -c 'import json, sys; print(sum(layer["size"] for layer in json.load(sys.stdin)["layers"]))')"
report buildah "$id" "$size" "$cached" "$seconds"
printf 'buildah_flags=%s\n' "${buildah_flags[*]}"
