"""The full Walras demo (``make demo`` runs ``python -m walras.demo``).

It starts the local control plane (``walras.testing.devcluster``), creates kwok GPU nodes of
three types with their ResourcePools, submits FungibleJobs whose throughputs come from Gavel's
measurements, runs the real ``walras operator`` for a few short rounds, prints each round as rich
tables read back from the API, draws shares and prices per round into a PNG, and tears everything
down.

Modules: ``workload`` (what to submit; pure), ``cluster`` (API writes and reads), ``report``
(tables and the PNG), ``runner`` (the orchestration and clean-up), ``__main__`` (options).
"""
