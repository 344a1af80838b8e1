"""``walras simulate generate OUT.trace``: write a large Gavel-style trace.

Options: ``--jobs N`` (required), ``--rate R`` (jobs per hour, Poisson arrivals; omitted: a
static trace, every job at 0), ``--seed S``, ``--single-gpu`` (no multi-GPU jobs), ``--job-types
A,B`` (restrict the job types), ``--reference TYPE`` (the GPU type durations refer to, default
v100), ``--throughputs FILE`` (default: the table shipped with Walras), ``--tenants
NAME=RATE,...`` (a multi-tenant workload: FungibleJob manifests in ``OUT.yaml``, tenant NAME's jobs
in namespace NAME arriving at RATE jobs per hour, for ``walras simulate OUT.yaml --tenants
TENANTS.yaml``). The jobs are drawn by
:mod:`walras.sim.generate`. Bad input (a negative or zero rate, an unknown job type, a missing
option) prints ``error: --option: ...`` on stderr and exits with status 2.

The console script dispatches ``walras simulate generate`` here before Typer, which treats the
first argument of ``walras simulate`` as a trace path; this module parses its own options with
argparse (standard library, imported only for this command).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from walras.sim.generate import GenerateOptions


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="walras simulate generate",
        description="Write a Gavel-style trace drawn from the throughput table and Philly's "
        "job-size distribution.",
    )
    parser.add_argument("out", type=pathlib.Path, help="where to write the .trace file")
    parser.add_argument("--jobs", type=int, required=True, help="number of jobs")
    parser.add_argument(
        "--rate", type=float, default=None, help="arrivals per hour (omit for a static trace)"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--single-gpu", action="store_true", help="every job uses one GPU")
    parser.add_argument("--job-types", default=None, help="comma-separated job types to draw from")
    parser.add_argument("--reference", default="v100", help="GPU type of the durations")
    parser.add_argument("--throughputs", type=pathlib.Path, default=None, help="throughput JSON")
    parser.add_argument(
        "--tenants",
        default=None,
        help="NAME=RATE,...: write FungibleJob manifests (OUT.yaml), tenant NAME's jobs in "
        "namespace NAME arriving at RATE jobs/hour (replaces --rate)",
    )
    return parser


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    """Run the command; the exit status (0, or 2 for bad input)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse printed its usage and error (status 2) or --help (0)
        return int(exc.code or 0)
    from walras.sim.errors import SimInputError
    from walras.sim.generate import GenerateOptions, generate_lines
    from walras.sim.throughputs import load_throughputs

    types = None
    if args.job_types is not None:
        types = tuple(t.strip() for t in args.job_types.split(",") if t.strip())
    options = GenerateOptions(
        jobs=args.jobs,
        rate=args.rate,
        seed=args.seed,
        multi_gpu=not args.single_gpu,
        job_types=types,
        reference=args.reference,
    )
    if args.tenants is not None:
        return _tenants(args, options)
    try:
        lines = generate_lines(options, load_throughputs(args.throughputs))
    except SimInputError as exc:
        return _error(str(exc))
    try:
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    except OSError as exc:
        return _error(f"OUT: cannot write {args.out}: {exc}")
    kind = "static" if args.rate is None else f"{args.rate:g} jobs/hour"
    print(f"wrote {args.out} ({len(lines)} jobs, {kind}, seed {args.seed})", file=sys.stderr)
    return 0


def _tenants(args: argparse.Namespace, options: GenerateOptions) -> int:
    """``--tenants``: a multi-tenant workload as FungibleJob manifests."""
    import yaml

    from walras.sim.errors import SimInputError
    from walras.sim.generate import parse_tenant_rates, tenant_manifests
    from walras.sim.throughputs import load_throughputs

    if args.rate is not None:
        return _error("--rate: not with --tenants (each tenant has its own rate)")
    if args.out.suffix.lower() not in (".yaml", ".yml"):
        return _error(f"OUT: with --tenants, name a .yaml file (FungibleJob manifests): {args.out}")
    try:
        rates = parse_tenant_rates(args.tenants)
        docs = tenant_manifests(options, load_throughputs(args.throughputs), rates)
    except SimInputError as exc:
        return _error(str(exc))
    try:
        args.out.write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
    except OSError as exc:
        return _error(f"OUT: cannot write {args.out}: {exc}")
    streams = ", ".join(f"{n} {r:g}/h" for n, r in rates)
    print(f"wrote {args.out} ({len(docs)} jobs: {streams}; seed {args.seed})", file=sys.stderr)
    return 0
