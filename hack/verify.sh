#!/usr/bin/env bash
# `make verify`: fail when a generated artefact differs from its source.
#   1. crds/ must equal what hack/gen_crds.py writes from the pydantic models in
#      walras.core.schema (prints the diff; fix: `make crds`);
#   2. charts/walras/crds/ must equal what hack/sync-crds.sh makes from crds/ (prints the diff);
#   3. `helm lint` passes for the chart's defaults and for every charts/walras/ci/*.yaml.
# helm comes from hack/install-tools.sh (cached under $WALRAS_CACHE/bin). The generator runs with
# $PYTHON (the Makefile passes the venv's), else .venv/bin/python.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

tmp="$(mktemp -d "${TMPDIR:-/tmp}/walras-verify.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
status=0

if [[ -f hack/gen_crds.py ]]; then
	python="${PYTHON:-.venv/bin/python}"
	"$python" hack/gen_crds.py "$tmp/generated" 2>/dev/null
	if ! diff -ru "$tmp/generated" crds >"$tmp/generated.diff"; then
		cat "$tmp/generated.diff"
		echo "verify: crds/ differs from the models in walras.core.schema; run 'make crds' and commit" >&2
		status=1
	fi
else
	# A partial copy of the repository (tests/unit/test_chart_render.py stages one) has no models.
	echo "verify: no hack/gen_crds.py here; crds/ not checked against the models" >&2
fi

bash hack/sync-crds.sh "$tmp/crds" 2>/dev/null
if ! diff -ru "$tmp/crds" charts/walras/crds >"$tmp/crds.diff"; then
	cat "$tmp/crds.diff"
	echo "verify: charts/walras/crds/ differs from crds/; run 'make crds-sync' and commit" >&2
	status=1
fi

bin="$(bash hack/install-tools.sh)"
helm="$bin/helm"
if ! "$helm" lint --strict charts/walras >"$tmp/lint.log" 2>&1; then
	cat "$tmp/lint.log"
	status=1
fi
for values in charts/walras/ci/*.yaml; do
	if ! "$helm" lint --strict charts/walras --values "$values" >"$tmp/lint.log" 2>&1; then
		cat "$tmp/lint.log"
		echo "verify: helm lint failed with $values" >&2
		status=1
	fi
done

if [[ -f hack/verify-lock.sh ]] && ! bash hack/verify-lock.sh; then status=1; fi # locks/ vs pyproject
if ((status == 0)); then
	echo "verify: crds/ generated from the models, chart CRDs in sync with crds/, helm lint clean"
fi
exit "$status"
