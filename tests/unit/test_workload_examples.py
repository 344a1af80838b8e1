"""The reference workloads (examples/workloads) keep the preemption contract outside any container.

Each script is run as a real process with the venv's interpreter: once stopped by SIGTERM mid-run
and resumed, once uninterrupted. Oracles: the exit status (0 after SIGTERM), the checkpoint the
first process leaves and the step the second resumes from (the workload's own log), and the
final weights: batch ``i`` is seeded by ``i``, so a run that lost or repeated a step, or restored
the wrong state, would not end with the uninterrupted run's weights bit for bit.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
import yaml

from walras.workload import checkpoint

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "workloads"
SMALL = ["--batch", "16", "--features", "8", "--hidden", "8", "--log-every", "1000000000"]


def _start(script: str, ckpt: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "WALRAS_CHECKPOINT_DIR": str(ckpt)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env.pop("TRAIN_STEPS", None)
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / script), *SMALL, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str]) -> str:
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return err


def _stopped_then_resumed(script: str, tmp: Path, out: Path) -> tuple[int, int]:
    """(step stopped at, steps in all): SIGTERM once the loop runs, then resume to 40 more."""
    ckpt = tmp / "ckpt"
    first = _start(script, ckpt, "--steps", "100000000")
    assert first.stdout is not None
    assert first.stdout.readline().startswith("step 0 loss")  # the loop is running
    first.send_signal(signal.SIGTERM)
    err = _finish(first)
    stopped = int(re.findall(r"stopping at step (\d+) \(SIGTERM\): exit 0", err)[0])
    found = checkpoint.latest(ckpt)
    assert found is not None and found[0] == stopped >= 1
    total = stopped + 40
    err = _finish(_start(script, ckpt, "--steps", str(total), "--out", str(out)))
    assert f"resumed from step {stopped} " in err
    return stopped, total


@pytest.mark.parametrize("script", ["train.py", "train_torch.py"])
def test_sigterm_and_resume_end_where_an_uninterrupted_run_ends(
    script: str, tmp_path: Path
) -> None:
    if script == "train_torch.py":
        pytest.importorskip("torch", reason="the PyTorch example needs torch (the venv has it)")
    resumed, whole = tmp_path / "resumed", tmp_path / "whole"
    _, total = _stopped_then_resumed(script, tmp_path, resumed)
    _finish(_start(script, tmp_path / "ckpt-whole", "--steps", str(total), "--out", str(whole)))
    if script == "train.py":
        a, b = np.load(f"{resumed}.npz"), np.load(f"{whole}.npz")
        assert sorted(a.files) == ["w1", "w2"]
        for name in a.files:
            assert np.array_equal(a[name], b[name])
    else:
        import torch

        a, b = torch.load(resumed), torch.load(whole)
        assert a.keys() == b.keys()
        for name in a:
            assert torch.equal(a[name], b[name])


def test_bad_arguments_exit_2_naming_the_option(tmp_path: Path) -> None:
    proc = _start("train.py", tmp_path, "--steps", "-5")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert "--steps must be >= 0" in err and "Traceback" not in err


def _manifests() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / "fungiblejob.yaml").read_text()) if d]


def test_example_manifest_satisfies_the_crd_and_mounts_what_the_workload_reads() -> None:
    jobs = [d for d in _manifests() if d["kind"] == "FungibleJob"]
    assert jobs
    crd = yaml.safe_load((REPO / "crds" / "fungiblejob.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for job in jobs:
        jsonschema.Draft4Validator(schema).validate(job)
        spec = job["spec"]["template"]["spec"]
        assert spec["terminationGracePeriodSeconds"] > 0
        assert spec["automountServiceAccountToken"] is True  # progress needs the token
        [container] = spec["containers"]
        assert container["imagePullPolicy"] == "IfNotPresent"
        env = {e["name"]: e.get("value") for e in container["env"]}
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        # The checkpoint directory the workload reads is the volume the template mounts.
        ckpt = next(n for n, p in mounts.items() if p == env["WALRAS_CHECKPOINT_DIR"])
        assert "hostPath" in volumes[ckpt]
        # The advance notice: the pod's own annotations, where walras.workload looks for them.
        podinfo = next(n for n, p in mounts.items() if p == "/etc/walras/podinfo")
        items = volumes[podinfo]["downwardAPI"]["items"]
        assert {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}} in items
        # The job's total work is the workload's step count.
        args = container["args"]
        assert float(args[args.index("--steps") + 1]) == job["spec"]["totalWork"]


def test_no_checkpoint_directory_exits_2_naming_it(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    env.pop("WALRAS_CHECKPOINT_DIR", None)
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "train.py"), "--steps", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "WALRAS_CHECKPOINT_DIR" in proc.stderr and "Traceback" not in proc.stderr
