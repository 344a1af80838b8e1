"""Write crds/*.yaml from the pydantic models in walras.core.schema (``make crds``).

Usage: .venv/bin/python hack/gen_crds.py [DEST]   (DEST defaults to crds/)

Each CRD is ``walras.core.schema.build_crd`` of its descriptor, dumped as YAML under a header
comment. With a DEST other than crds/, the CRDs that are still written by hand (HAND_WRITTEN) are
copied there too, so that ``diff -r DEST crds`` compares everything (hack/verify.sh does that).
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import yaml

from walras.core.schema import DESCRIPTORS, CrdDescriptor, build_crd

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "crds"
# CRDs not generated from a model yet (their owner moves them to walras.core.schema).
HAND_WRITTEN: frozenset[str] = frozenset()


class _Dumper(yaml.SafeDumper):
    """Block YAML as people write CRDs: list items indented under their key, no anchors."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: object) -> bool:
        return True


def render(desc: CrdDescriptor) -> str:
    """The YAML file of one CRD: header comment, then the CustomResourceDefinition."""
    lines = []
    for paragraph in desc.comment.split("\n"):
        wrapped = textwrap.wrap(paragraph, width=97) or [""]
        lines += [f"# {line}".rstrip() for line in wrapped]
    module = desc.model.__module__
    lines += [
        f"# Generated from {module} by hack/gen_crds.py (`make crds`):",
        "# edit the model, not this file; `make crds` also copies it into charts/walras/crds/.",
    ]
    body = yaml.dump(
        build_crd(desc),
        Dumper=_Dumper,
        sort_keys=False,
        width=96,
        allow_unicode=True,
        default_flow_style=False,
    )
    return "\n".join(lines) + "\n" + body


def main(argv: list[str]) -> int:
    dest = Path(argv[1]) if len(argv) > 1 else SOURCE
    dest.mkdir(parents=True, exist_ok=True)
    for desc in DESCRIPTORS:
        (dest / desc.file).write_text(render(desc), encoding="utf-8")
    if dest.resolve() != SOURCE.resolve():
        for name in sorted(HAND_WRITTEN):
            if (SOURCE / name).exists():
                shutil.copyfile(SOURCE / name, dest / name)
    print(f"gen_crds: {len(DESCRIPTORS)} CRD(s) -> {dest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
