"""``walras explain`` shows each throughput's source; its alternatives use the values in use."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from test_inspect_logic import POOLS, job

from walras.cli import inspect_cmd, throughput_view


def status() -> dict[str, Any]:
    return {
        "phase": "Running",
        "throughputs": {
            "v100": {"value": 4.0, "source": "measured", "declared": 2.0, "samples": 3},
            "k80": {"value": 1.5, "source": "estimated-similar"},
        },
        "progress": {"measured": {"v100": {"stepsPerSecond": 4.0, "samples": 3}}},
    }


def test_rows_say_where_each_value_came_from() -> None:
    obj = job({"v100": 2.0, "p100": 0.0}, status=status())
    rows = {r.gpu_type: r for r in throughput_view.rows(obj)}
    assert (rows["v100"].value, rows["v100"].source, rows["v100"].declared) == (
        4.0,
        "measured",
        2.0,
    )
    assert (rows["v100"].measured, rows["v100"].samples) == (4.0, 3)
    assert (rows["k80"].value, rows["k80"].source, rows["k80"].declared) == (
        1.5,
        "estimated-similar",
        None,
    )
    # Before the operator wrote anything, p100's declared value is all there is.
    assert (rows["p100"].value, rows["p100"].source) == (0.0, "declared")
    assert throughput_view.effective(obj) == {"k80": 1.5, "p100": 0.0, "v100": 4.0}


def test_explain_uses_and_prints_them() -> None:
    e = inspect_cmd.explain(job({"v100": 2.0}, status=status()), POOLS)
    alt = {a.gpu_type: a for a in e.alternatives}
    # k80 was never declared: its estimated 1.5 steps/s is what the job would get there, not 0.
    assert alt["k80"].throughput > 0 and alt["k80"].note == ""
    assert alt["p100"].note == "no throughput on this type"
    console = Console(record=True, width=160)
    inspect_cmd.render_explanation(console, e)
    text = console.export_text()
    assert "estimated-similar" in text and "where they came from" in text
