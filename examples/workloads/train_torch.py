"""The reference training job's pattern in a plain PyTorch loop (CPU is enough).

The same teacher-student regression as ``train.py``, written the way a PyTorch user writes it:
an ``nn.Module``, an optimizer, ``loss.backward()``. Walras's contract (``docs/workloads.md``)
costs four lines: the ``save``/``load`` pair and the ``with Run(...)`` around the loop::

    def save(path): torch.save({"model": model.state_dict(), ...}, path / "ckpt.pt")
    def load(path): model.load_state_dict(torch.load(path / "ckpt.pt")["model"]); ...

    with Run(args.steps, save=save, load=load) as run:
        for step in run:
            ...forward, backward, opt.step()...

Batch ``i`` comes from a generator seeded by ``(seed, i)``, so a stopped-and-resumed run ends
with the same weights as an uninterrupted one. Usage: ``python train_torch.py --steps 3000``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from torch import nn

from walras.workload import Run


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=int(os.environ.get("TRAIN_STEPS", "3000")))
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-every", type=float, default=300.0, help="seconds")
    p.add_argument("--log-every", type=int, default=500)
    p.add_argument(
        "--checkpoint-dir",
        default=os.environ.get("WALRAS_CHECKPOINT_DIR", ""),
        help="checkpoints (default $WALRAS_CHECKPOINT_DIR: the volume the template mounts)",
    )
    p.add_argument("--out", default="", help="write the final state_dict here")
    return p


def network(features: int, hidden: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(features, hidden, bias=False), nn.Tanh(), nn.Linear(hidden, 1, bias=False)
    )


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.steps < 0 or args.batch < 1 or args.features < 1 or args.hidden < 1:
        p.error("--steps must be >= 0 and --batch, --features, --hidden positive")
    if not args.checkpoint_dir:
        p.error("--checkpoint-dir (or $WALRAS_CHECKPOINT_DIR) is required")
    torch.set_num_threads(1)  # one core per replica; and the same sums in every process
    teacher = network(args.features, args.hidden, args.seed + 1000).requires_grad_(False)
    model = network(args.features, args.hidden, args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    def save(path: Path) -> None:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path / "ckpt.pt")

    def load(path: Path) -> None:
        saved = torch.load(path / "ckpt.pt")
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])

    loss = torch.tensor(float("nan"))
    run = Run(
        args.steps,
        save=save,
        load=load,
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_every_s=args.checkpoint_every,
    )
    with run:
        for step in run:
            gen = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
            x = torch.randn(args.batch, args.features, generator=gen)
            y = teacher(x) + 0.01 * torch.randn(args.batch, 1, generator=gen)
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if args.log_every and step % args.log_every == 0:
                print(f"step {step} loss {loss.item():.5f}", flush=True)
    print(f"finished {run.step} steps (resumed at {run.start_step}); last loss {loss.item():.5f}")
    if args.out:
        torch.save(model.state_dict(), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
