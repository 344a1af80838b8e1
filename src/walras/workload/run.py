"""The training loop's side of the preemption contract, as one iterator (``docs/workloads.md``).

::

    state = {"weights": w}
    with Run(total_steps=10_000, state=state) as run:
        for step in run:               # from the last checkpoint's step on
            state["weights"] = train_one_step(state["weights"], step)

The iterator, after each step it hands out has been run:

* **counts** it: ``run.step`` is the number of steps done (cumulative over every slice);
* **reports** that count through the ``walras.dev/steps-done`` annotation every
  ``report_every_s`` seconds, at every checkpoint, once at start with the restored count and
  once after the first step (so the operator sees the restart end when it ends:
  ``walras.core.restarts``; ``walras.workload.report``; failures are logged, never fatal);
* **checkpoints** every ``checkpoint_every_s`` seconds, once when an advance notice
  (``walras.workload.notice``) says the pod stops within ``notice_margin_s``, and on SIGTERM;
* **stops** on SIGTERM: the handler only sets a flag, so the step in flight finishes, then the
  checkpoint is written, the count reported, and ``SystemExit(0)`` ends the process with status 0
  (the pod is being deleted: its phase does not matter, and a zero status says the workload kept
  the contract). SIGTERM is Kubernetes's first signal when a pod is deleted; SIGKILL follows after
  ``terminationGracePeriodSeconds``, so a step plus a checkpoint must fit in that grace period.

Entering the ``with`` block resumes: the newest complete checkpoint (``walras.workload.checkpoint``)
is loaded into ``state`` (or handed to ``load``) and counting continues from its step. Steps run
after the last checkpoint are lost only when the process dies without SIGTERM (SIGKILL, a node
lost); the operator then sees the reported count fall back and counts those steps as lost.

At ``total_steps`` a last checkpoint is written and the count reported; the loop ends and the
process should exit 0 (the pod Succeeds). Exiting 0 *before* that would make the pod Succeed with
work left, so a notice never ends the loop early: it only checkpoints ahead of the signal.

State: either ``state`` (a dict pickled into the checkpoint and restored in place) or ``save`` and
``load`` (callables given the checkpoint's directory: ``torch.save`` into it, ``np.savez``...).
``save=None`` with ``load`` only resumes. In a gang, replica 0 saves and every replica resumes
from its checkpoint (``saves``; the template passes the ``walras.dev/replica`` label as
``$WALRAS_REPLICA`` through the downward API). The pod of an Indexed batch/v1 Job (bring your
own Job) has no such label and an immutable template: there the replica is the completion index
``$JOB_COMPLETION_INDEX``, which the Job controller sets on every container.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from walras.workload import checkpoint
from walras.workload.identity import pod_identity
from walras.workload.notice import Notice
from walras.workload.report import (
    STOP_TIMEOUT_S,
    TIMEOUT_S,
    ApiServer,
    ReportError,
    progress_patch,
)


def replica_of(environ: Mapping[str, str]) -> str:
    """This process's replica: ``$WALRAS_REPLICA`` (a FungibleJob's pod, through the downward
    API), else ``$JOB_COMPLETION_INDEX`` (an Indexed Job's pod; a downward-API label that is
    absent reads as empty, hence the fallback on empty too); '' when neither says."""
    return environ.get("WALRAS_REPLICA") or environ.get("JOB_COMPLETION_INDEX") or ""


def _stderr(message: str) -> None:
    print(f"walras.workload: {message}", file=sys.stderr, flush=True)


class Run:
    """A training run that Walras may stop and restart (see the module docstring).

    Args:
        total_steps: steps the job does in all (its ``spec.totalWork``).
        state: a dict saved and restored whole (pickled; plain values and NumPy arrays).
        save: writes the checkpoint into the directory it is given (instead of ``state``).
        load: reads it back from the directory it is given.
        checkpoint_dir: default ``$WALRAS_CHECKPOINT_DIR``.
        checkpoint_every_s: periodic checkpoints, bounding the work a SIGKILL loses (0: never).
        report_every_s: how often the step count is reported (0: only at checkpoints).
        notice_margin_s: checkpoint once when the announced stop is this close.
        report: report progress (default: when an API server is configured, i.e. in a pod).
        keep: complete checkpoints kept.
        saves: whether this process writes checkpoints (default: unless ``$WALRAS_REPLICA``, or
            when that is unset or empty ``$JOB_COMPLETION_INDEX``, names a replica other than 0:
            the replicas of a synchronous gang hold the same state, so replica 0 saves and every
            replica resumes from its checkpoint).
        environ: the environment to read (default ``os.environ``).
        log: where the run's log lines go (default standard error, prefixed ``walras.workload:``).
    """

    def __init__(
        self,
        total_steps: int,
        *,
        state: MutableMapping[str, Any] | None = None,
        save: Callable[[Path], None] | None = None,
        load: Callable[[Path], None] | None = None,
        checkpoint_dir: str | Path | None = None,
        checkpoint_every_s: float = 600.0,
        report_every_s: float = 10.0,
        notice_margin_s: float = 30.0,
        report: bool | None = None,
        keep: int = 2,
        saves: bool | None = None,
        environ: Mapping[str, str] | None = None,
        log: Callable[[str], None] = _stderr,
    ) -> None:
        if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 0:
            raise ValueError(f"total_steps must be a non-negative integer, got {total_steps!r}")
        if state is not None and (save is not None or load is not None):
            raise ValueError("give either state or save/load, not both")
        if state is None and load is None:
            raise ValueError("give state (a dict) or load (and save) to restore from")
        for name, value in (
            ("checkpoint_every_s", checkpoint_every_s),
            ("report_every_s", report_every_s),
            ("notice_margin_s", notice_margin_s),
        ):
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        env = os.environ if environ is None else environ
        self.total_steps = total_steps
        self.directory = Path(checkpoint_dir) if checkpoint_dir else checkpoint.checkpoint_dir(env)
        self._state = state
        self._save = save
        self._load = load
        self.checkpoint_every_s = checkpoint_every_s
        self.report_every_s = report_every_s
        self.notice_margin_s = notice_margin_s
        self.keep = keep
        self.saves = saves if saves is not None else replica_of(env) in ("", "0")
        self.log = log
        self._server: ApiServer | None = None
        if report is None or report:
            try:
                self._server = ApiServer.from_env(env)
            except RuntimeError as exc:
                if report:
                    raise
                log(f"progress not reported: {exc}")
        self._environ: Mapping[str, str] = env
        self._notice = Notice(env)
        self.step = 0
        self.start_step = 0
        self.resumed_from: Path | None = None
        self.stop_requested = False
        self.stop_reason = ""
        self._saved_step: int | None = None
        self._noticed: float | None = None  # the announced stop already checkpointed for
        self._last_checkpoint = 0.0
        self._last_report = 0.0
        self._reported: int | None = None
        self._report_error = ""
        self._previous_handler: Any = None
        self._entered = False

    # -- context manager -------------------------------------------------------------------
    def __enter__(self) -> Run:
        if self._entered:
            return self
        self._entered = True
        try:
            self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        except ValueError:  # not the main thread: signals cannot be caught here
            self.log("SIGTERM not caught (not the main thread); call run.request_stop() instead")
        self._resume()
        now = time.monotonic()
        self._last_checkpoint = self._last_report = now
        self.report_now()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._previous_handler is not None:
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = None

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.request_stop("SIGTERM")

    def request_stop(self, reason: str = "requested") -> None:
        """Checkpoint and exit after the step in flight (what SIGTERM does)."""
        self.stop_requested = True
        self.stop_reason = self.stop_reason or reason

    # -- the loop ----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[int]:
        self.__enter__()
        while self.step < self.total_steps:
            if self.stop_requested:
                self._stop()
            yield self.step
            self.step += 1
            if self.step == self.start_step + 1:
                self.report_now()  # the first progress of this start: the restart is over
            self.after_step()
        self.checkpoint()
        self.report_now()
        self.log(f"done: {self.step} steps")

    def after_step(self) -> None:
        """Report, checkpoint or stop as due (the iterator calls it; so may a custom loop)."""
        if self.stop_requested:
            self._stop()
        now = time.monotonic()
        stop_at = self._notice.stop_at()
        if (
            stop_at is not None
            and stop_at != self._noticed
            and stop_at - time.time() <= self.notice_margin_s
        ):
            self._noticed = stop_at
            self.log(f"stop announced in {stop_at - time.time():.0f} s: checkpointing ahead")
            self.checkpoint()
            self.report_now()
        if self.checkpoint_every_s and now - self._last_checkpoint >= self.checkpoint_every_s:
            self.checkpoint()
            self.report_now()
        elif self.report_every_s and now - self._last_report >= self.report_every_s:
            self.report_now()

    def _stop(self) -> None:
        self.checkpoint()
        self.report_now(timeout=STOP_TIMEOUT_S)
        self.log(f"stopping at step {self.step} ({self.stop_reason}): exit 0")
        raise SystemExit(0)

    # -- checkpoints -------------------------------------------------------------------------
    def _resume(self) -> None:
        found = checkpoint.latest(self.directory)
        if found is None:
            self.log(f"no checkpoint in {self.directory}: starting at step 0")
            return
        step, path = found
        if self._state is not None:
            restored = checkpoint.load_state(path)
            self._state.clear()
            self._state.update(restored)
        elif self._load is not None:
            self._load(path)
        self.step = self.start_step = self._saved_step = step
        self.resumed_from = path
        self.log(f"resumed from step {step} ({path})")

    def checkpoint(self) -> Path | None:
        """Write a checkpoint of the current step now (None: it is saved already, or this
        process does not save)."""
        self._last_checkpoint = time.monotonic()
        if self.step == self._saved_step or not self.saves:
            return None
        if self._state is not None:
            state = self._state
            path = checkpoint.save(
                self.directory, self.step, lambda p: checkpoint.save_state(p, state), self.keep
            )
        elif self._save is not None:
            path = checkpoint.save(self.directory, self.step, self._save, self.keep)
        else:
            return None
        self._saved_step = self.step
        self.log(f"checkpoint at step {self.step} ({path})")
        return path

    # -- progress ----------------------------------------------------------------------------
    def report_now(self, timeout: float = TIMEOUT_S) -> None:
        """Report the step count now (when reporting is on and it changed since the last)."""
        self._last_report = time.monotonic()
        if self._server is None or self.step == self._reported:
            return
        try:
            namespace, name = pod_identity(self._environ)
            self._server.patch_pod(namespace, name, progress_patch(self.step), timeout)
        except (ReportError, RuntimeError) as exc:
            if str(exc) != self._report_error:
                self.log(f"progress report failed (training goes on): {exc}")
            self._report_error = str(exc)
            return
        self._reported = self.step
        self._report_error = ""
