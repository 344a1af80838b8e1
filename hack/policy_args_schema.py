"""Write the policy registry into the chart's values.schema.json: ``policy``'s enum (the
registered names) and ``policyArgs`` (each policy's arguments).

``python hack/policy_args_schema.py`` after adding a policy or an argument; without ``--write``
it only says whether the chart is in step (exit 1 if not). tests/unit/test_policy_contract.py
checks the same thing.
"""

from __future__ import annotations

import json
import pathlib
import sys

from walras.core import policies
from walras.core.policies import registry

SCHEMA = pathlib.Path(__file__).resolve().parents[1] / "charts" / "walras" / "values.schema.json"
DESCRIPTION = (
    "Each policy's own arguments, {policy: {argument: value}}; each entry becomes "
    "walras operator --policy-arg=POLICY.ARGUMENT=VALUE (walras policies lists them)"
)


def expected(schema: dict[str, object]) -> dict[str, object]:
    """``schema`` with ``policy``'s enum and ``policyArgs`` as the registry has them."""
    out: dict[str, object] = {}
    props = dict(schema["properties"])  # type: ignore[call-overload]
    props["policy"] = {**props["policy"], "enum": list(policies.names())}
    new = {**registry.values_schema(), "description": DESCRIPTION}
    for key, value in props.items():
        if key == "policyArgs":
            continue
        out[key] = value
        if key == "solver":
            out["policyArgs"] = new
    if "policyArgs" not in out:
        out["policyArgs"] = new
    return {**schema, "properties": out}


def main(argv: list[str]) -> int:
    current = json.loads(SCHEMA.read_text())
    want = expected(current)
    if "--write" in argv:
        SCHEMA.write_text(json.dumps(want, indent=2, ensure_ascii=False) + "\n")
        return 0
    if want != current:
        print(f"{SCHEMA}: policyArgs is not the registry's; run {__file__} --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
