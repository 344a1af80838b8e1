"""walras.workload.Run: resume, checkpoint on stop, no step lost or done twice.

Oracle: the loop body appends each step index it runs to the checkpointed state, so the record
across every slice must be exactly ``0, 1, ..., total − 1`` (a step lost would leave a gap, a step
redone after a resume would repeat), and the resumed step must equal the checkpoint's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from walras.workload import Run, checkpoint


def _run(tmp: Path, total: int, stop_after: int | None = None, **kw: Any) -> tuple[Run, dict]:
    state: dict[str, Any] = {"done": []}
    run = Run(total, state=state, checkpoint_dir=tmp, report=False, log=lambda m: None, **kw)
    try:
        with run:
            for step in run:
                state["done"] = [*state["done"], step]
                if stop_after is not None and step == stop_after:
                    run.request_stop("test")
    except SystemExit as exc:
        assert exc.code == 0
    return run, state


def test_stop_checkpoints_and_resume_continues(tmp_path: Path) -> None:
    first, state = _run(tmp_path, 10, stop_after=3)
    # The stop is honoured after the step in flight: steps 0..3 done, checkpoint of step 4.
    assert state["done"] == [0, 1, 2, 3]
    assert first.step == 4
    found = checkpoint.latest(tmp_path)
    assert found is not None and found[0] == 4
    second, state = _run(tmp_path, 10)
    assert second.start_step == 4 and second.resumed_from == found[1]
    assert state["done"] == list(range(10))
    assert checkpoint.latest(tmp_path) is not None
    assert checkpoint.latest(tmp_path)[0] == 10  # type: ignore[index]


def test_three_slices_lose_nothing(tmp_path: Path) -> None:
    _run(tmp_path, 9, stop_after=2)
    _run(tmp_path, 9, stop_after=5)
    _, state = _run(tmp_path, 9)
    assert state["done"] == list(range(9))
    # keep=2: only the two newest complete checkpoints remain.
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["step-000000000006", "step-000000000009"]


def test_a_finished_job_resumed_runs_no_step(tmp_path: Path) -> None:
    _run(tmp_path, 3)
    run, state = _run(tmp_path, 3)
    assert run.start_step == 3 and state["done"] == [0, 1, 2]


def test_save_and_load_callables(tmp_path: Path) -> None:
    seen: list[int] = []
    weights = {"w": 0}

    def save(path: Path) -> None:
        (path / "w.txt").write_text(str(weights["w"]))

    def load(path: Path) -> None:
        weights["w"] = int((path / "w.txt").read_text())

    for stop in (4, None):
        run = Run(6, save=save, load=load, checkpoint_dir=tmp_path, report=False, log=seen.append)
        try:
            with run:
                for step in run:
                    weights["w"] += step
                    if step == stop:
                        run.request_stop()
        except SystemExit:
            pass
    assert weights["w"] == sum(range(6))


def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    checkpoint.save(tmp_path, 5, lambda p: (p / "x").write_text("5"))

    def broken(path: Path) -> None:
        (path / "x").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        checkpoint.save(tmp_path, 7, broken)
    found = checkpoint.latest(tmp_path)
    assert found is not None and found[0] == 5
    assert (found[1] / "x").read_text() == "5"
    assert [p.name for p in tmp_path.iterdir()] == [found[1].name]


def test_a_partial_directory_is_never_the_latest(tmp_path: Path) -> None:
    checkpoint.save(tmp_path, 2, lambda p: None)
    (tmp_path / ".partial-step-000000000009-1").mkdir()  # a save killed mid-write
    found = checkpoint.latest(tmp_path)
    assert found is not None and found[0] == 2


def test_advance_notice_checkpoints_before_the_signal(tmp_path: Path) -> None:
    import time

    podinfo = tmp_path / "podinfo"
    podinfo.mkdir()
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 5))
    (podinfo / "annotations").write_text(
        f'kubernetes.io/x="1"\nwalras.dev/stop-at="{soon}"\nwalras.dev/steps-done="0"\n'
    )
    ckpt = tmp_path / "ckpt"
    saved_at: list[int] = []
    state: dict[str, Any] = {"done": []}
    run = Run(
        4,
        state=state,
        checkpoint_dir=ckpt,
        report=False,
        notice_margin_s=30,
        environ={"WALRAS_PODINFO_DIR": str(podinfo)},
        log=lambda m: saved_at.append(len(state["done"])) if m.startswith("checkpoint") else None,
    )
    with run:
        for step in run:
            state["done"] = [*state["done"], step]
    # Once after the first step (the notice, 5 s away, is within the 30 s margin: once only),
    # then the final one; the loop was not ended by the notice.
    assert saved_at == [1, 4]
    assert state["done"] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"total_steps": -1, "state": {}}, "total_steps"),
        ({"total_steps": 3}, "state"),
        ({"total_steps": 3, "state": {}, "load": print}, "either state"),
        ({"total_steps": 3, "state": {}, "report_every_s": -1}, "report_every_s"),
    ],
)
def test_bad_arguments_name_the_field(tmp_path: Path, kw: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Run(checkpoint_dir=tmp_path, report=False, **kw)


def test_no_checkpoint_dir_says_which_variable() -> None:
    with pytest.raises(RuntimeError, match="WALRAS_CHECKPOINT_DIR"):
        Run(3, state={}, report=False, environ={})


def test_only_replica_zero_saves_and_every_replica_resumes(tmp_path: Path) -> None:
    _run(tmp_path, 10, stop_after=1)  # replica 0's slice: checkpoint of step 2
    state: dict[str, Any] = {}
    other = Run(
        10,
        state=state,
        checkpoint_dir=tmp_path,
        report=False,
        environ={"WALRAS_REPLICA": "1"},
        log=lambda m: None,
    )
    with other:
        steps = list(other)
    assert steps[0] == 2 and state == {"done": [0, 1]}  # resumed from replica 0's checkpoint
    found = checkpoint.latest(tmp_path)
    assert found is not None and found[0] == 2  # and wrote none of its own


def test_a_step_saved_twice_keeps_one_complete_copy(tmp_path: Path) -> None:
    checkpoint.save(tmp_path, 4, lambda p: (p / "x").write_text("first"))
    checkpoint.save(tmp_path, 4, lambda p: (p / "x").write_text("second"))
    found = checkpoint.latest(tmp_path)
    assert found is not None and (found[1] / "x").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == [found[1].name]


def test_the_notice_file_as_the_kubelet_writes_it(tmp_path: Path) -> None:
    from walras.workload import notice

    # One key="value" line per annotation, values quoted as Go's %q does.
    text = 'a.example/quote="say \\"hi\\""\nwalras.dev/stop-at="2026-01-02T03:04:05Z"\nnot a line\n'
    parsed = notice.parse_annotations(text)
    assert parsed["a.example/quote"] == 'say "hi"'
    assert notice.parse_stop_at(parsed["walras.dev/stop-at"]) == 1767323045.0
    assert notice.parse_stop_at("2026-01-02T03:04:05") is None  # no zone: not guessed
    assert notice.parse_stop_at("soon") is None
    watch = notice.Notice({"WALRAS_PODINFO_DIR": str(tmp_path)})
    assert watch.stop_at() is None  # no file: no notice
    (tmp_path / "annotations").write_text(text)
    assert watch.stop_at() == 1767323045.0


@pytest.mark.parametrize(
    ("environ", "saves"),
    [
        ({}, True),  # a single pod: replica 0
        ({"WALRAS_REPLICA": "0"}, True),
        ({"WALRAS_REPLICA": "1"}, False),
        # An Indexed Job's pod: the Job controller's completion index names the replica.
        ({"JOB_COMPLETION_INDEX": "0"}, True),
        ({"JOB_COMPLETION_INDEX": "1"}, False),
        # A template that passes an absent walras.dev/replica label reads it as empty.
        ({"WALRAS_REPLICA": "", "JOB_COMPLETION_INDEX": "1"}, False),
        ({"WALRAS_REPLICA": "0", "JOB_COMPLETION_INDEX": "1"}, True),  # Walras's label wins
    ],
)
def test_the_replica_that_saves_from_walras_or_the_job_controller(
    tmp_path: Path, environ: dict[str, str], saves: bool
) -> None:
    run = Run(3, state={}, checkpoint_dir=tmp_path, report=False, environ=environ)
    assert run.saves is saves
