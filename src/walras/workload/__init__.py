"""What a workload that Walras schedules imports: resume, checkpoint, report, stop on time.

The whole contract is in ``docs/workloads.md``; in a plain Python loop::

    from walras.workload import Run

    state = {"weights": init_weights()}
    with Run(total_steps=10_000, state=state) as run:   # resumes from the last checkpoint
        for step in run:                                   # checkpoints and exits 0 on SIGTERM
            state["weights"] = train_one_step(state["weights"], step)

:class:`Run` (``walras.workload.run``) hides the signal, the checkpoint directory
(``$WALRAS_CHECKPOINT_DIR``), the resume and the progress reports; :func:`report_progress`
reports a step count alone, for loops that manage the rest themselves.

This package uses the standard library only and imports nothing else from Walras, so it runs in
a minimal image (an import-linter contract keeps it that way).
"""

from __future__ import annotations

from walras.workload.checkpoint import checkpoint_dir, latest, load_state, save, save_state
from walras.workload.identity import ANN_STEPS_DONE, ANN_STOP_AT, NAMESPACE_FILE, pod_identity
from walras.workload.notice import Notice
from walras.workload.report import ApiServer, ReportError, progress_patch, report_progress
from walras.workload.run import Run

__all__ = [
    "ANN_STEPS_DONE",
    "ANN_STOP_AT",
    "NAMESPACE_FILE",
    "ApiServer",
    "Notice",
    "ReportError",
    "Run",
    "checkpoint_dir",
    "latest",
    "load_state",
    "pod_identity",
    "progress_patch",
    "report_progress",
    "save",
    "save_state",
]
