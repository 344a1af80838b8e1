#!/usr/bin/env bash
# Write the image's dependency locks, locks/image-<variant>.txt, from pyproject.toml.
#
#   hack/lock.sh [--upgrade] [--out DIR]
#
#   --upgrade  resolve every package afresh at its newest allowed version (default: keep each pin
#              of the existing lock that still satisfies pyproject.toml, change only what must)
#   --out DIR  write the locks there instead of locks/ (hack/verify-lock.sh compares the two)
#
# The Dockerfile installs exactly one of these with `pip install --require-hashes --no-deps
# --only-binary :all:`: every package and the sha256 of every file it may download are fixed, so
# two builds of the same commit get the same wheels. A lock holds the runtime dependencies
# (`[project].dependencies`), the build system (`[build-system].requires`, so walras itself is
# built from locked setuptools without build isolation), and for cuda the `torch` extra; never the
# test or plots extras. Resolved by uv (the test extra installs it) for the image's interpreter:
# Debian bookworm's CPython 3.11 on x86_64 glibc 2.36 (manylinux_2_36). Each pin lists the hashes
# of all of its files on PyPI, so a build on another architecture checks the same pins; it gets
# wheels for the same versions only if the dependency tree there has no platform-only package.
set -o errexit -o nounset -o pipefail

upgrade=0
out=""
while (($#)); do
	case "$1" in
	--upgrade) upgrade=1 && shift ;;
	--out) out="${2:?--out needs a directory}" && shift 2 ;;
	-h | --help) sed -n '2,/^set -o/p' "$0" | sed '$d; s/^# \{0,1\}//' && exit 0 ;;
	*) echo "lock: unknown argument $1 (see --help)" >&2 && exit 2 ;;
	esac
done
[[ -z "$out" || "$out" == /* ]] || out="$PWD/$out" # relative to the caller
cd "$(dirname "$0")/.."
out="${out:-$PWD/locks}"

UV="${UV:-.venv/bin/uv}"
[[ -x "$UV" ]] || UV="$(command -v uv || true)"
[[ -n "$UV" ]] || {
	echo "lock: uv not found: \`make install\` (the test extra installs it) or set UV" >&2
	exit 1
}

tmp="$(mktemp -d "${TMPDIR:-/tmp}/walras-lock.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# The build system's requirements, as a requirements file uv can read next to pyproject.toml.
python3 -c 'import sys, tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))' \
	>"$tmp/build-system.in"

mkdir -p "$out"
for variant in cpu cuda; do
	target="$out/image-$variant.txt"
	extras=()
	[[ "$variant" == cpu ]] || extras=(--extra torch)
	# uv keeps the pins of an existing output file where they still satisfy the inputs; so
	# start from the committed lock unless asked to upgrade.
	if ((upgrade == 0)) && [[ -f "locks/image-$variant.txt" && "$target" != "$PWD/locks/image-$variant.txt" ]]; then
		cp "locks/image-$variant.txt" "$target"
	fi
	upgrade_flag=()
	((upgrade == 0)) || upgrade_flag=(--upgrade)
	"$UV" pip compile --quiet pyproject.toml "$tmp/build-system.in" "${extras[@]}" \
		"${upgrade_flag[@]}" --generate-hashes --python-version 3.11 \
		--python-platform x86_64-manylinux_2_36 --index-url https://pypi.org/simple \
		--custom-compile-command "hack/lock.sh" --output-file "$target"
	# uv names the temporary build-system file in its "# via" notes; name its source instead.
	sed -i "s|$tmp/build-system.in|pyproject.toml (build-system)|g" "$target"
	echo "lock: $target ($(grep -c '^[a-z0-9]' "$target") packages)" >&2
done
