#!/usr/bin/env bash
# Copy the CRDs from their single source, crds/*.yaml, into the Helm chart (charts/walras/crds/).
#
# Usage: hack/sync-crds.sh [DEST]   (DEST defaults to charts/walras/crds)
# Called by `make crds-sync`; hack/verify.sh calls it with a temporary DEST and diffs the result.
# Files in DEST that no longer exist in crds/ are removed, so a deleted CRD leaves the chart too.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

src="crds"
dest="${1:-charts/walras/crds}"

shopt -s nullglob
sources=("$src"/*.yaml)
if ((${#sources[@]} == 0)); then
	echo "sync-crds: no CRDs in $src/" >&2
	exit 1
fi

mkdir -p "$dest"
for stale in "$dest"/*.yaml; do
	[[ -e "$src/$(basename "$stale")" ]] || rm -f -- "$stale"
done
for crd in "${sources[@]}"; do
	cp -- "$crd" "$dest/$(basename "$crd")"
done
echo "sync-crds: ${#sources[@]} CRD(s) -> $dest" >&2
