"""Time how long ggaudit takes to start, against the interpreter itself, in the same run.

    python scripts/bench_startup.py [--runs N]

Each command is run N times in a fresh process (after one unmeasured warm-up run, so every one finds
the files in the page cache) and its median wall time is printed with its ratio to ``python -c pass``.
The ``ggaudit`` console script is run directly (the one installed beside this interpreter), not
through a shell or a version manager's shim. The target of issue 15: ``ggaudit --help`` and
``ggaudit scan --help`` under 3x ``python -c pass``; the exit status is 1 when either misses it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "all_types.gguf"
#: Most a start-up may cost, as a multiple of `python -c pass`.
TARGET_RATIO = 3.0


def ggaudit_command() -> list[str]:
    """How the console script starts: the installed script when there is one, else ``-m ggaudit``."""
    name = "ggaudit.exe" if os.name == "nt" else "ggaudit"
    script = Path(sysconfig.get_path("scripts")) / name
    if os.name != "nt" and script.is_file():
        return [sys.executable, str(script)]
    return [sys.executable, "-m", "ggaudit"]


def median_seconds(argv: list[str], runs: int) -> float:
    """The median wall time of ``argv`` over ``runs`` runs; output is discarded, a failure is fatal."""
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - started)
        if done.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}")
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each command (the median is shown)")
    args = parser.parse_args()
    tool = ggaudit_command()
    cases = [
        ("python -c pass", [sys.executable, "-c", "pass"], False),
        ("python -c 'import ggaudit'", [sys.executable, "-c", "import ggaudit"], False),
        ("ggaudit --help", [*tool, "--help"], True),
        ("ggaudit scan --help", [*tool, "scan", "--help"], True),
        ("ggaudit info fixtures/all_types.gguf", [*tool, "info", str(FIXTURE)], False),
    ]
    base = median_seconds(cases[0][1], args.runs)
    print(f"median of {args.runs} runs each; ggaudit is {' '.join(tool)}")
    missed = []
    for label, argv, has_target in cases:
        seconds = base if argv is cases[0][1] else median_seconds(argv, args.runs)
        ratio = seconds / base
        verdict = ""
        if has_target:
            verdict = "  ok" if ratio < TARGET_RATIO else f"  MISSES the {TARGET_RATIO:g}x target"
            if ratio >= TARGET_RATIO:
                missed.append(label)
        print(f"{label:40s} {seconds * 1000:8.1f} ms {ratio:6.2f}x{verdict}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
