"""A thin array backend so that one code path runs on numpy and on torch (CPU or CUDA).

The solver and the per-job subproblem (``subproblem.py``) only use ``Backend`` methods and the
functions named alike in numpy and torch (``log``, ``where``, ``minimum``, ``maximum``, ``clip``),
reached through ``Backend.xp``. torch is imported lazily, only when that backend is asked for.
Everything is float64 (the allocator's default); indices are int64.

``chunk`` is the number of jobs processed per vectorised pass: small on CPU so that the
temporaries stay in cache, everything at once on CUDA.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from walras.allocator.errors import InvalidProblem


@dataclass(frozen=True)
class Backend:
    """Array operations of one library on one device."""

    name: str  # "numpy" | "torch"
    device: str  # "cpu" | "cuda:0" | ...
    xp: Any  # the numpy or torch module
    chunk: int

    def asarray(self, x: Any, *, integer: bool = False) -> Any:
        """A backend array (float64, or int64 with ``integer``) holding a copy-free view of x."""
        if self.name == "numpy":
            arr = np.asarray(x, dtype=np.int64 if integer else np.float64)
            if arr.ndim == 1 and arr.strides == (0,):
                # A constant per-job parameter (``problem._constant``): one number, not n.
                return arr
            return np.ascontiguousarray(arr)
        torch = self.xp
        dtype = torch.int64 if integer else torch.float64
        arr = np.ascontiguousarray(x)
        if not arr.flags.writeable:  # torch warns about (and cannot honour) read-only memory
            arr = arr.copy()
        return torch.as_tensor(arr, dtype=dtype, device=self.device)

    def to_numpy(self, x: Any) -> np.ndarray[Any, Any]:
        """A numpy copy (or view, for numpy) of a backend array."""
        if self.name == "numpy":
            return np.asarray(x)
        return np.asarray(x.detach().cpu().numpy())

    def full(self, size: int, value: float, *, integer: bool = False) -> Any:
        """A 1-D array of ``size`` copies of ``value``."""
        if self.name == "numpy":
            return np.full(size, value, dtype=np.int64 if integer else np.float64)
        torch = self.xp
        dtype = torch.int64 if integer else torch.float64
        return torch.full((size,), value, dtype=dtype, device=self.device)

    def empty(self, size: int, *, integer: bool = False) -> Any:
        """An uninitialised 1-D array."""
        if self.name == "numpy":
            return np.empty(size, dtype=np.int64 if integer else np.float64)
        torch = self.xp
        dtype = torch.int64 if integer else torch.float64
        return torch.empty((size,), dtype=dtype, device=self.device)

    def bincount(self, idx: Any, weights: Any, length: int) -> Any:
        """Σ of ``weights`` per value of ``idx`` (values in [0, length))."""
        if self.name == "numpy":
            return np.bincount(idx, weights=weights, minlength=length)
        return self.xp.bincount(idx, weights=weights, minlength=length)

    def total(self, x: Any) -> float:
        """Σ x as a Python float (float64 accumulation)."""
        return float(x.sum())


def _torch() -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    return torch


def get_backend(name: str = "auto", device: str | None = None) -> Backend:
    """The backend called ``name`` ("auto", "numpy" or "torch") on ``device``.

    "auto" is numpy unless a CUDA device is available through torch. "torch" without a device
    uses CUDA when available, else the CPU.
    """
    if name not in ("auto", "numpy", "torch"):
        raise InvalidProblem(f"unknown backend {name!r} (expected auto, numpy or torch)")
    if name == "auto":
        # Importing torch takes seconds; skip it when no NVIDIA device can be there anyway.
        if (
            device in (None, "cpu")
            and "torch" not in sys.modules
            and not os.path.exists("/dev/nvidiactl")
        ):
            return Backend("numpy", "cpu", np, chunk=16_384)
        torch = _torch()
        use_torch = torch is not None and (
            (device is not None and device != "cpu") or bool(torch.cuda.is_available())
        )
        name = "torch" if use_torch else "numpy"
    if name == "numpy":
        if device not in (None, "cpu"):
            raise InvalidProblem(f"the numpy backend runs on the CPU only, not {device!r}")
        return Backend("numpy", "cpu", np, chunk=16_384)
    torch = _torch()
    if torch is None:
        raise InvalidProblem("backend 'torch' requested but torch is not installed")
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    chunk = 1 << 62 if dev.startswith("cuda") else 262_144
    return Backend("torch", str(torch.device(dev)), torch, chunk=chunk)
