"""Checkpoints in one directory, each written whole or not at all.

A checkpoint of step ``n`` is the directory ``<dir>/step-<n>`` (``n`` zero-padded so that names
sort like numbers). It is written as ``<dir>/.partial-step-<n>-<pid>`` and renamed into place
once complete (``fsync`` first): a rename within one file system is atomic, so a process killed
mid-write (SIGKILL at the end of the grace period, a node lost) leaves the previous checkpoint
intact and at worst a ``.partial-*`` directory, which a later save removes once it is stale.
The latest checkpoint is the complete ``step-*`` directory with the highest ``n``; ``keep`` of
them are kept (older ones are deleted after a new one is in place).

What goes inside is the workload's: a callable writes files under the directory it is given (a
``torch.save``, an ``np.savez``), or :func:`save_state` pickles a dict of plain values and arrays.
The step counter lives in the name only, so it cannot disagree with the data.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

PREFIX = "step-"
PARTIAL = ".partial-"
STATE_FILE = "state.pickle"
STALE_S = 3600.0
"""A partial save untouched this long belongs to a process that died (no save takes an hour)."""
_NAME = re.compile(r"^step-([0-9]{1,20})$")


def checkpoint_dir(environ: Mapping[str, str] | None = None, default: str = "") -> Path:
    """``$WALRAS_CHECKPOINT_DIR`` (the volume the template mounts), else ``default``.

    Raises RuntimeError naming the variable when neither is set.
    """
    env = os.environ if environ is None else environ
    value = env.get("WALRAS_CHECKPOINT_DIR") or default
    if not value:
        raise RuntimeError(
            "no checkpoint directory: set WALRAS_CHECKPOINT_DIR to a mounted volume "
            "(hostPath on local nodes, a PersistentVolumeClaim on a real cluster)"
        )
    return Path(value)


def latest(directory: Path) -> tuple[int, Path] | None:
    """(step, path) of the newest complete checkpoint, or None when there is none."""
    if not directory.is_dir():
        return None
    found = []
    for entry in directory.iterdir():
        m = _NAME.match(entry.name)
        if m and entry.is_dir():
            found.append((int(m.group(1)), entry))
    return max(found) if found else None


def _fsync_tree(path: Path) -> None:
    for root, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(directory: Path, step: int, write: Callable[[Path], None], keep: int = 2) -> Path:
    """Write the checkpoint of ``step``: ``write(path)`` fills a fresh directory, then it is
    renamed to ``step-<step>``; returns its path. Older checkpoints beyond ``keep`` and leftovers
    of interrupted saves are removed afterwards."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative integer, got {step!r}")
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{PREFIX}{step:012d}"
    # Unique per writer: containers of a gang sharing a volume may all run as PID 1.
    writer = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    partial = directory / f"{PARTIAL}{PREFIX}{step:012d}-{writer}"
    partial.mkdir()
    try:
        write(partial)
        _fsync_tree(partial)
        try:
            os.rename(partial, final)
        except OSError:
            if not final.is_dir():
                raise
            # The same step is saved already (a resume that made no progress, or another
            # replica sharing the volume): the complete copy there is as good as this one.
            shutil.rmtree(partial, ignore_errors=True)
        _fsync_dir(directory)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    _prune(directory, keep)
    return final


def _prune(directory: Path, keep: int) -> None:
    complete = sorted(
        (int(m.group(1)), e) for e in directory.iterdir() if (m := _NAME.match(e.name))
    )
    for _, old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    now = time.time()
    for entry in directory.iterdir():
        # Another process's save may be in progress (replicas sharing a volume): only leftovers
        # untouched for STALE_S are removed.
        if entry.name.startswith(PARTIAL) and now - entry.stat().st_mtime > STALE_S:
            shutil.rmtree(entry, ignore_errors=True)


def save_state(path: Path, state: Mapping[str, Any]) -> None:
    """Pickle ``state`` (plain values, lists, NumPy arrays) into ``path/state.pickle``."""
    with open(path / STATE_FILE, "wb") as f:
        pickle.dump(dict(state), f, protocol=pickle.HIGHEST_PROTOCOL)


def load_state(path: Path) -> dict[str, Any]:
    """What :func:`save_state` wrote (only checkpoints this job wrote itself: it unpickles)."""
    with open(path / STATE_FILE, "rb") as f:
        value = pickle.load(f)
    if not isinstance(value, dict):
        raise ValueError(f"{path / STATE_FILE} does not hold a dict")
    return value
