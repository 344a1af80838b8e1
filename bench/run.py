"""Run every ``bench/bench_*.py`` in its own interpreter; each prints one JSON line per case.

Separate processes keep ``peak_rss_mb`` honest (one case's memory does not leak into the next).
Pass names to run a subset: ``python bench/run.py pricing fairness``.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys


def main(argv: list[str]) -> int:
    here = pathlib.Path(__file__).parent
    scripts = sorted(here.glob("bench_*.py"))
    if argv:
        scripts = [s for s in scripts if any(a in s.stem for a in argv)]
    failed = 0
    for script in scripts:
        rc = subprocess.run([sys.executable, str(script)], check=False).returncode
        if rc != 0:
            print(f'{{"bench": "{script.stem}", "error": "exit code {rc}"}}', flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
