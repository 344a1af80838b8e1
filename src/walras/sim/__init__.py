"""Trace-driven simulator behind ``walras simulate``.

Pipeline: :mod:`.trace` (Gavel ``.trace`` files) + :mod:`.throughputs` (Gavel's table, shipped in
:mod:`walras.data.gavel`) + :mod:`.cluster` → :mod:`.workload` arrays → :func:`.engine.run` with a
round mechanics (:mod:`.gavel_mechanics` today) and a policy (:mod:`.policies`) → a
:class:`.metrics.SimResult` (summary, per-job tally, round timeline) → :mod:`.report` (CSV and
plots). The clock and the cluster are simulated; nothing here imports the operator, kopf or
kubernetes.
"""
