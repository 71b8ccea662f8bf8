"""The fault layer below the process (tests/faultlayer.c), for tests: compiled once per session into pytest's
temporary directory, preloaded into a child process that reads one file wrong on one read path.

``faulted_env(path, "direct", "flip", offset=40752, mask=0x10)`` gives the environment for the child; the read
path kinds are ``PATHS``: "device" is the device holding other bytes than the page cache (direct reads faulted;
buffered and mmap reads only on the pages the child evicted with ``os.posix_fadvise(..., POSIX_FADV_DONTNEED)``);
``run_ggaudit(args, env)`` runs ``python -m ggaudit`` under it. The parameters are those the layer reads
(faultlayer.c's header): ``offset`` (an int or a list of ints), ``length``, ``mask``, ``byte``, ``shift``,
``times`` ("once", "always" or a count), ``min_length`` (only requests of at least that many bytes are faulted)
and ``log`` (a file that gets a line per injected fault). ``below(env, path_kind, fault, **params)`` adds a second
layer under the first, with its own fault on the same file (the layer compiled with FAULT_PREFIX="FAULT2_").
``rows(model, env, ...)`` runs ``ggaudit rows MODEL --json ...`` under it and gives the exit code and the report;
``hexed`` spells bytes as a mismatch's ``expected``/``actual`` do, ``picked`` takes some fields of one.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest

SOURCE = Path(__file__).with_name("faultlayer.c")
PATHS = ("buffered", "direct", "mmap", "pagecache", "device")
DATA_FAULTS = ("flip", "zero", "fill", "shift")
REQUEST_FAULTS = ("short", "stale", "eio", "eintr", "eagain", "einval")
PARAMS = ("offset", "length", "mask", "byte", "shift", "times", "min_length", "log")
#: The layer's exit status for a setting it cannot apply (it never silently does nothing).
BAD_SETTING = 86


def layer_library(prefix: str = "FAULT_") -> Path:
    """The compiled layer (reading the variables named *prefix*...); skips the test where it cannot be built
    or preloaded."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the fault layer is preloaded into a Linux process (LD_PRELOAD over glibc's read calls)")
    compiler = shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler")
    return _compiled(compiler, prefix)


@functools.cache
def _compiled(compiler: str, prefix: str) -> Path:
    # tempfile's folder is inside pytest's temporary directory (conftest.py sets it): once per session.
    target = Path(tempfile.mkdtemp(prefix="faultlayer-")) / "faultlayer.so"
    cmd = [compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", f'-DFAULT_PREFIX="{prefix}"', "-o",
           str(target), str(SOURCE), "-ldl"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr}"
    return target


def faulted_env(path: str | os.PathLike[str], path_kind: str, fault: str, **params: object) -> dict[str, str]:
    """The environment of a child process whose reads of *path* on *path_kind* suffer *fault*."""
    env = dict(os.environ)
    preload = [str(layer_library())] + ([env["LD_PRELOAD"]] if env.get("LD_PRELOAD") else [])
    env["LD_PRELOAD"] = " ".join(preload)
    return _set(env, "FAULT_", os.fspath(path), path_kind, fault, params)


def below(env: dict[str, str], path_kind: str, fault: str, **params: object) -> dict[str, str]:
    """*env* (from faulted_env) with a second layer preloaded after the first, faulting the same file's reads
    on *path_kind* with *fault*: two faults in one child (a data fault on one path, a failing read on another)."""
    assert "FAULT2_PATH" not in env, "two layers at most"
    out = dict(env)
    first, *rest = env["LD_PRELOAD"].split(" ")
    out["LD_PRELOAD"] = " ".join([first, str(layer_library("FAULT2_")), *rest])
    return _set(out, "FAULT2_", env["FAULT_PATH"], path_kind, fault, params)


def _set(env: dict[str, str], prefix: str, path: str, path_kind: str, fault: str,
         params: dict[str, object]) -> dict[str, str]:
    assert path_kind in PATHS, path_kind
    assert fault in DATA_FAULTS + REQUEST_FAULTS, fault
    unknown = set(params) - set(PARAMS)
    assert not unknown, f"the fault layer takes no {sorted(unknown)}"
    env.update({f"{prefix}PATH": path, f"{prefix}ON": path_kind, f"{prefix}KIND": fault})
    for name, value in params.items():
        text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        env[f"{prefix}{name.upper()}"] = text
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


def rows(model: str | os.PathLike[str], env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    """The exit code and the one model's report of ``ggaudit rows MODEL --json ARGS`` under *env*."""
    done = run_ggaudit(["rows", os.fspath(model), "--json", *args], env)
    assert done.code in (0, 1), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)["models"][0]
    return done.code, report


def hexed(data: bytes, offset: int) -> str:
    """The 16 bytes of *data* from *offset*, as a rows mismatch's ``expected`` and ``actual`` spell them."""
    return data[offset:offset + 16].hex(" ")


def picked(found: dict[str, Any], *keys: str) -> tuple[Any, ...]:
    return tuple(found[k] for k in keys)
