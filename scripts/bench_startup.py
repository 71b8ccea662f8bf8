"""Time how long ggaudit takes to start and to scan a real model, against references run in the same run.

    python scripts/bench_startup.py [--runs N] [--model PATH]

Each command is run N times in a fresh process (after one unmeasured warm-up run, so every one finds
the files in the page cache), the commands taking turns (round after round, each once a round, so a load
that comes and goes on the machine weighs on each of them alike), and its median wall time is printed
with its ratio to its reference: the
interpreter itself (``python -c pass``) for starting, and for the scan a Python process that imports numpy
and reads the model once (what any scan must at least cost). The ``ggaudit`` console script is run
directly (the one installed beside this interpreter), not through a shell or a version manager's shim.
Every command runs from bytecode, as an installed package does (pip compiles it at install): the bytecode
goes to a temporary folder (PYTHONPYCACHEPREFIX), written by the warm-up run, even where the environment
says PYTHONDONTWRITEBYTECODE, under which a checkout would compile each of its modules on every start.
The targets (issues 15, 24 and 37): ``ggaudit --help``, ``ggaudit scan --help`` and ``ggaudit check --help``
under 3x ``python -c pass``, ``ggaudit scan MODEL`` of the 253 MB Gemma 3 270M Q4_K_M (``scripts/gather_real_models.py``
fetches it into bench-data/real/) at most 2x its reference; the exit status is 1 when one misses.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "all_types.gguf"
MODEL = ROOT / "bench-data" / "real" / "gemma-3-270m-q4_k_m.gguf"

#: The scan's reference: import numpy, then read the file once, 8 MiB at a time into one buffer.
READ_ONCE = """import sys
import numpy
buffer = bytearray(8 << 20)
with open(sys.argv[1], "rb", buffering=0) as f:
    while f.readinto(buffer):
        pass
"""


@dataclass(frozen=True)
class Case:
    """A command to time; with a reference (another case's label), its ratio to it, and the most it may be."""

    label: str
    argv: list[str]
    reference: str | None = None
    target: float | None = None


def ggaudit_command() -> list[str]:
    """How the console script starts: the installed script when there is one, else ``-m ggaudit``."""
    name = "ggaudit.exe" if os.name == "nt" else "ggaudit"
    script = Path(sysconfig.get_path("scripts")) / name
    if os.name != "nt" and script.is_file():
        return [sys.executable, str(script)]
    return [sys.executable, "-m", "ggaudit"]


def seconds_of(argv: list[str], env: dict[str, str]) -> float:
    """The wall time of one run of ``argv``; output is discarded, a failure is fatal."""
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=env)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}")
    return elapsed


def median_seconds(cases: list[Case], runs: int) -> dict[str, float]:
    """Each case's median wall time over ``runs`` rounds, after a warm-up round that is not counted."""
    with tempfile.TemporaryDirectory(prefix="ggaudit-bench-pyc-") as pycache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = pycache
        for case in cases:
            seconds_of(case.argv, env)
        times: dict[str, list[float]] = {case.label: [] for case in cases}
        for _ in range(runs):
            for case in cases:
                times[case.label].append(seconds_of(case.argv, env))
    return {label: statistics.median(each) for label, each in times.items()}


def cases(tool: list[str], model: Path) -> list[Case]:
    python = "python -c pass"
    read_once = f"python: import numpy, read {model.name} once"
    return [
        Case(python, [sys.executable, "-c", "pass"]),
        Case("python -c 'import ggaudit'", [sys.executable, "-c", "import ggaudit"], python),
        Case("ggaudit --help", [*tool, "--help"], python, 3.0),
        Case("ggaudit scan --help", [*tool, "scan", "--help"], python, 3.0),
        Case("ggaudit check --help", [*tool, "check", "--help"], python, 3.0),
        Case("ggaudit info fixtures/all_types.gguf", [*tool, "info", str(FIXTURE)], python),
        Case(read_once, [sys.executable, "-c", READ_ONCE, str(model)]),
        Case(f"ggaudit scan {model.name}", [*tool, "scan", str(model)], read_once, 2.0),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each command (the median is shown)")
    parser.add_argument("--model", type=Path, default=MODEL, help="the real model to scan (default: %(default)s)")
    args = parser.parse_args()
    if not args.model.is_file():
        raise SystemExit(f"{args.model}: not found; scripts/gather_real_models.py fetches it")
    tool = ggaudit_command()
    print(f"median of {args.runs} runs each; ggaudit is {' '.join(tool)}")
    timed = cases(tool, args.model)
    seconds = median_seconds(timed, args.runs)
    missed = []
    for case in timed:
        ratio = None if case.reference is None else seconds[case.label] / seconds[case.reference]
        verdict = ""
        if ratio is not None and case.target is not None:
            verdict = "  ok" if ratio <= case.target else f"  MISSES the {case.target:g}x target"
            if ratio > case.target:
                missed.append(case.label)
        shown = "" if ratio is None else f"{ratio:6.2f}x"
        print(f"{case.label:56s} {seconds[case.label] * 1000:8.1f} ms {shown:>7s}{verdict}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
