#!/usr/bin/env bash
# Build the reference workload image for real nodes (hack/real-node.sh), and print its archive.
#
#   hack/build-workload-image.sh [--import SOCKET]...
#
# The image, localhost/walras-workload:dev, is Debian bookworm minbase with Debian's python3 and
# python3-numpy (no torch: PyPI's torch wheel would add gigabytes that every fresh machine builds
# and every node's runtime unpacks), plus
#   /app/walras/__init__.py           empty, so that `walras.workload` imports without the rest
#   /app/walras/workload/             a copy of src/walras/workload/ (stdlib only)
#   /app/examples/workloads/          a copy of examples/workloads/
# and PYTHONPATH=/app. Either package may not exist yet; the image then has what there is.
#
# Made without a Dockerfile and without a registry: `debootstrap --variant=minbase
# --include=python3,python3-numpy bookworm`, trimmed like debian:*-slim, kept as a tarball under
# $WALRAS_CACHE/workload-image/ (the slow part, about a minute; once per machine); then `buildah from
# scratch` + the tarball + /app, committed and written as a docker-archive next to it, named after
# the hash of its inputs, so a rerun with unchanged sources builds nothing.
#
# --import SOCKET imports the archive into the containerd listening on SOCKET (namespace k8s.io,
# where the kubelet's CRI looks); may be given several times.
#
# Prints key=value lines on stdout (logs on stderr): image, archive, cached (1 when no build ran).
set -o errexit -o nounset -o pipefail

CACHE="${WALRAS_CACHE:-$HOME/.cache/walras}"
DIR="$CACHE/workload-image"
BASE_TAR="$DIR/bookworm-python3-numpy.tar"
MIRROR="${WALRAS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
IMAGE="localhost/walras-workload:dev"

log() { printf '[build-workload-image] %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

sockets=()
while (($#)); do
	case "$1" in
	--import) sockets+=("${2:?--import needs a containerd socket}") && shift 2 ;;
	-h | --help) sed -n '2,/^set -o/p' "$0" | sed '$d; s/^# \{0,1\}//' && exit 0 ;;
	*)
		log "error: unknown argument $1 (see --help)"
		exit 2
		;;
	esac
done

cd "$(dirname "$0")/.."
((EUID == 0)) || die "building the workload image needs root (debootstrap, buildah's own store)"
for tool in buildah debootstrap; do
	command -v "$tool" >/dev/null || die "$tool not found: run \`make tools\` (hack/install-tools.sh)"
done
mkdir -p "$DIR"
exec 8>"$DIR/.lock"
flock 8

tmp="$(mktemp -d "${TMPDIR:-/tmp}/walras-workload-image.XXXXXX")"
cleanup() {
	if [[ -d "$tmp/rootfs" ]]; then
		# debootstrap may leave /proc or /sys mounted under a root it did not finish.
		umount --recursive --lazy "$tmp/rootfs/proc" "$tmp/rootfs/sys" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

if [[ ! -s "$BASE_TAR" ]]; then
	log "debootstrap --variant=minbase --include=python3,python3-numpy bookworm ($MIRROR)"
	start=$SECONDS
	debootstrap --variant=minbase --include=python3,python3-numpy bookworm "$tmp/rootfs" "$MIRROR" \
		>"$tmp/debootstrap.log" 2>&1 || {
		tail -n 30 "$tmp/debootstrap.log" >&2
		die "debootstrap failed"
	}
	root="$tmp/rootfs"
	# Trimmed the way debian:*-slim is: no documentation, manual pages, locales, apt lists or caches.
	find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
	find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
	rm -rf "$root"/usr/share/{groff,info,linda,lintian/overrides,locale,man}/*
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin
	rm -f "$root"/var/log/{bootstrap.log,alternatives.log,dpkg.log} "$root"/var/log/apt/*.log
	rm -f "$root/etc/hostname" "$root/etc/resolv.conf" "$root"/var/cache/debconf/*-old
	: >"$root/etc/machine-id"
	tar --numeric-owner --xattrs -C "$root" -cf "$tmp/base.tar" .
	mv "$tmp/base.tar" "$BASE_TAR"
	rm -rf "$root"
	log "base root made in $((SECONDS - start)) s: $BASE_TAR"
fi

# The /app tree, then the hash of everything that goes into the image.
mkdir -p "$tmp/app/walras" "$tmp/app/examples"
: >"$tmp/app/walras/__init__.py"
if [[ -d src/walras/workload ]]; then
	cp -r src/walras/workload "$tmp/app/walras/workload"
fi
if [[ -d examples/workloads ]]; then
	cp -r examples/workloads "$tmp/app/examples/workloads"
fi
find "$tmp/app" \( -name __pycache__ -o -name '*.pyc' \) -prune -exec rm -rf {} +
hash="$(
	{
		printf 'image=%s\n' "$IMAGE"
		sha256sum "$BASE_TAR" | cut -d' ' -f1
		(cd "$tmp/app" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
	} | sha256sum | cut -c1-16
)"
archive="$DIR/walras-workload-$hash.tar"

cached=1
if [[ ! -s "$archive" ]]; then
	cached=0
	start=$SECONDS
	# A store of our own (vfs: one layer from scratch, so nothing is copied twice), per boot run root.
	flags=(--root "$DIR/store" --runroot "/run/walras-workload-buildah" --storage-driver vfs)
	ctr="$(buildah "${flags[@]}" from --quiet scratch)"
	mnt="$(buildah "${flags[@]}" mount "$ctr")"
	tar --numeric-owner --xattrs -C "$mnt" -xpf "$BASE_TAR"
	cp -r "$tmp/app" "$mnt/app"
	buildah "${flags[@]}" umount "$ctr" >/dev/null
	buildah "${flags[@]}" config --env PYTHONPATH=/app \
		--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		--workingdir /app --cmd '["python3"]' "$ctr"
	buildah "${flags[@]}" commit --quiet --rm "$ctr" "$IMAGE" >/dev/null
	buildah "${flags[@]}" push --quiet "$IMAGE" "docker-archive:$tmp/image.tar:$IMAGE" >&2
	buildah "${flags[@]}" rmi "$IMAGE" >/dev/null
	mv "$tmp/image.tar" "$archive"
	# Archives of older sources are never used again.
	find "$DIR" -maxdepth 1 -name 'walras-workload-*.tar' ! -path "$archive" -delete
	log "built $IMAGE in $((SECONDS - start)) s: $archive ($(du -m "$archive" | cut -f1) MiB)"
fi

for sock in "${sockets[@]}"; do
	[[ -S "$sock" ]] || die "no containerd socket at $sock"
	ctr --address "$sock" -n k8s.io images import "$archive" >/dev/null ||
		die "ctr images import into $sock failed"
	log "imported into $sock"
done

printf 'image=%s\narchive=%s\ncached=%s\n' "$IMAGE" "$archive" "$cached"
