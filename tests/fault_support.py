"""The fault layer below the process (tests/faultlayer.c), for tests: compiled once per session into pytest's
temporary directory, preloaded into a child process that reads one file wrong on one read path.

``faulted_env(path, "direct", "flip", offset=40752, mask=0x10)`` gives the environment for the child;
``run_ggaudit(args, env)`` runs ``python -m ggaudit`` under it. The parameters are those the layer reads
(faultlayer.c's header): ``offset`` (an int or a list of ints), ``length``, ``mask``, ``byte``, ``shift``,
``times`` ("once", "always" or a count) and ``log`` (a file that gets a line per injected fault).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import pytest

SOURCE = Path(__file__).with_name("faultlayer.c")
PATHS = ("buffered", "direct", "mmap", "pagecache")
DATA_FAULTS = ("flip", "zero", "fill", "shift")
REQUEST_FAULTS = ("short", "stale", "eio", "eintr", "eagain", "einval")
PARAMS = ("offset", "length", "mask", "byte", "shift", "times", "log")
#: The layer's exit status for a setting it cannot apply (it never silently does nothing).
BAD_SETTING = 86


def layer_library() -> Path:
    """The compiled layer; skips the test where it cannot be built or preloaded."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the fault layer is preloaded into a Linux process (LD_PRELOAD over glibc's read calls)")
    compiler = shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler")
    return _compiled(compiler)


@functools.cache
def _compiled(compiler: str) -> Path:
    # tempfile's folder is inside pytest's temporary directory (conftest.py sets it): once per session.
    target = Path(tempfile.mkdtemp(prefix="faultlayer-")) / "faultlayer.so"
    cmd = [compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(target), str(SOURCE),
           "-ldl"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr}"
    return target


def faulted_env(path: str | os.PathLike[str], path_kind: str, fault: str, **params: object) -> dict[str, str]:
    """The environment of a child process whose reads of *path* on *path_kind* suffer *fault*."""
    assert path_kind in PATHS, path_kind
    assert fault in DATA_FAULTS + REQUEST_FAULTS, fault
    unknown = set(params) - set(PARAMS)
    assert not unknown, f"the fault layer takes no {sorted(unknown)}"
    env = dict(os.environ)
    preload = [str(layer_library())] + ([env["LD_PRELOAD"]] if env.get("LD_PRELOAD") else [])
    env.update(LD_PRELOAD=" ".join(preload), FAULT_PATH=os.fspath(path), FAULT_ON=path_kind, FAULT_KIND=fault)
    for name, value in params.items():
        text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        env[f"FAULT_{name.upper()}"] = text
    return env


class Run(NamedTuple):
    code: int
    stdout: str
    stderr: str


def run_ggaudit(args: Sequence[str], env: dict[str, str]) -> Run:
    """``python -m ggaudit ARGS`` in a child process under *env*."""
    done = run_python(["-m", "ggaudit", *args], env)
    assert not done.stderr.startswith("faultlayer:"), done.stderr  # the layer refused its setting
    return done


def run_python(args: Sequence[str], env: dict[str, str]) -> Run:
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120)
    return Run(done.returncode, done.stdout, done.stderr)
