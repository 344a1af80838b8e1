"""SIGTERM to a real process using walras.workload.Run: checkpoint, exit 0, resume, nothing lost.

Oracle: the kernel's signal delivery and the child's exit status; the child records every step
index it runs in its checkpointed state, so across the two processes the record must be exactly
``0 .. total − 1``, and the second process must start at the step of the first one's checkpoint.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from walras.workload import checkpoint

CHILD = textwrap.dedent(
    """
    import sys, time
    from walras.workload import Run

    state = {"done": []}
    with Run(int(sys.argv[1]), state=state, report=False) as run:
        for step in run:
            time.sleep(0.05)  # a step's work
            state["done"] = state["done"] + [step]
            if step == run.start_step:
                print("running", flush=True)
    """
)


def _child(tmp: Path, total: int) -> subprocess.Popen[str]:
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": str(src), "WALRAS_CHECKPOINT_DIR": str(tmp / "ckpt")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    script = tmp / "child.py"
    script.write_text(CHILD)
    return subprocess.Popen(
        [sys.executable, str(script), str(total)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_checkpoints_exits_zero_and_resumes(tmp_path: Path) -> None:
    total = 100_000  # far more than runs before the signal
    first = _child(tmp_path, total)
    assert first.stdout is not None
    assert first.stdout.readline() == "running\n"  # the loop is running: the handler is in place
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    found = checkpoint.latest(tmp_path / "ckpt")
    assert found is not None
    step, path = found
    assert f"stopping at step {step} (SIGTERM): exit 0" in err
    with open(path / checkpoint.STATE_FILE, "rb") as f:
        assert pickle.load(f)["done"] == list(range(step))

    # The next slice: a small total so it finishes; it starts from the checkpoint's step.
    second = _child(tmp_path, step + 3)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert f"resumed from step {step}" in err
    final = checkpoint.latest(tmp_path / "ckpt")
    assert final is not None and final[0] == step + 3
    with open(final[1] / checkpoint.STATE_FILE, "rb") as f:
        assert pickle.load(f)["done"] == list(range(step + 3))
