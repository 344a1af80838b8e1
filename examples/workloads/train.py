"""The reference training job: a small NumPy network fitted to synthetic data, preemptible.

A two-layer perceptron (tanh hidden layer) learns a fixed random "teacher" network from noisy
samples by minibatch SGD on the squared error. No downloads: batch ``i`` is drawn from a
generator seeded by ``(seed, i)``, so a run stopped and resumed any number of times computes
exactly what an uninterrupted run computes (the tests compare the final weights bit for bit).

It keeps Walras's preemption contract (``docs/workloads.md``) through ``walras.workload.Run``:
resume from ``$WALRAS_CHECKPOINT_DIR``, report steps through ``walras.dev/steps-done``,
checkpoint and exit 0 on SIGTERM. The loop is the whole integration::

    with Run(args.steps, state=state) as run:
        for step in run:
            ... one SGD step on state ...

Usage: ``python train.py --steps 3000`` (``$TRAIN_STEPS`` is the default for ``--steps``; it
should equal the FungibleJob's ``spec.totalWork``). At the defaults one step is a few
milliseconds on one core, so a 60 s slice is thousands of steps of real work.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from walras.workload import Run


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=int(os.environ.get("TRAIN_STEPS", "3000")))
    p.add_argument("--batch", type=int, default=256, help="samples per step")
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.01, help="SGD step size")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-every", type=float, default=300.0, help="seconds")
    p.add_argument("--log-every", type=int, default=500, help="steps between loss lines")
    p.add_argument(
        "--checkpoint-dir",
        default=os.environ.get("WALRAS_CHECKPOINT_DIR", ""),
        help="checkpoints (default $WALRAS_CHECKPOINT_DIR: the volume the template mounts)",
    )
    p.add_argument("--out", default="", help="write the final weights here (.npz)")
    p.add_argument(
        "--pace",
        type=float,
        default=0.0,
        help="seconds a step takes at least (sleeps the rest): a known rate on a shared machine",
    )
    return p


def init_state(features: int, hidden: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, 1])
    return {
        "w1": rng.normal(0.0, 1.0 / np.sqrt(features), (features, hidden)),
        "w2": rng.normal(0.0, 1.0 / np.sqrt(hidden), (hidden, 1)),
    }


def batch(
    step: int, size: int, teacher: dict[str, np.ndarray], seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Batch ``step``: the same samples whichever process draws it."""
    rng = np.random.default_rng([seed, 2, step])
    x = rng.normal(size=(size, teacher["w1"].shape[0]))
    y = np.tanh(x @ teacher["w1"]) @ teacher["w2"] + 0.01 * rng.normal(size=(size, 1))
    return x, y


def sgd_step(state: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, lr: float) -> float:
    """One step of gradient descent on the mean squared error; returns the batch loss."""
    h = np.tanh(x @ state["w1"])
    err = h @ state["w2"] - y
    grad_w2 = h.T @ err * (2.0 / len(x))
    grad_h = err @ state["w2"].T * (1.0 - h * h)
    grad_w1 = x.T @ grad_h * (2.0 / len(x))
    state["w1"] = state["w1"] - lr * grad_w1
    state["w2"] = state["w2"] - lr * grad_w2
    return float(np.mean(err * err))


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.pace < 0:
        p.error("--pace must be >= 0")
    for name in ("steps", "batch", "features", "hidden"):
        if getattr(args, name) < (0 if name == "steps" else 1):
            p.error(f"--{name} must be {'>= 0' if name == 'steps' else 'positive'}")
    if not args.checkpoint_dir:
        p.error("--checkpoint-dir (or $WALRAS_CHECKPOINT_DIR) is required")
    teacher = init_state(args.features, args.hidden, args.seed + 1000)
    state: dict[str, np.ndarray] = init_state(args.features, args.hidden, args.seed)
    loss = float("nan")
    run = Run(
        args.steps,
        state=state,
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_every_s=args.checkpoint_every,
    )
    with run:
        for step in run:
            began = time.monotonic()
            x, y = batch(step, args.batch, teacher, args.seed)
            loss = sgd_step(state, x, y, args.lr)
            if args.pace > 0:
                time.sleep(max(0.0, args.pace - (time.monotonic() - began)))
            if args.log_every and step % args.log_every == 0:
                print(f"step {step} loss {loss:.5f}", flush=True)
    print(f"finished {run.step} steps (resumed at {run.start_step}); last loss {loss:.5f}")
    if args.out:
        np.savez(args.out, **state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
