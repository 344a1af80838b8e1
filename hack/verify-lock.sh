#!/usr/bin/env bash
# Fail when locks/image-*.txt no longer match pyproject.toml (`make verify`; CI).
#
# Re-resolves both locks the way hack/lock.sh does, keeping every committed pin that still
# satisfies pyproject.toml, into a temporary directory, and compares. A dependency added, removed
# or re-bounded in pyproject.toml (or in its build system) so that a pin no longer fits changes
# the result; new releases on PyPI alone do not (pins are kept; `hack/lock.sh --upgrade` moves
# them). Needs PyPI's index, as `make install` does.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

tmp="$(mktemp -d "${TMPDIR:-/tmp}/walras-verify-lock.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
bash hack/lock.sh --out "$tmp" 2>"$tmp/lock.log" || {
	cat "$tmp/lock.log" >&2
	exit 1
}
status=0
for variant in cpu cuda; do
	if [[ ! -f "locks/image-$variant.txt" ]]; then
		echo "verify-lock: locks/image-$variant.txt is missing: run hack/lock.sh" >&2
		status=1
	elif ! diff -u "locks/image-$variant.txt" "$tmp/image-$variant.txt" >&2; then
		echo "verify-lock: locks/image-$variant.txt is stale against pyproject.toml: run hack/lock.sh" >&2
		status=1
	fi
done
((status == 0)) && echo "verify-lock: locks/ match pyproject.toml" >&2
exit "$status"
