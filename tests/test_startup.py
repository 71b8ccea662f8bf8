"""Before the command line has loaded: an installation that cannot import is one line and exit 3."""

from __future__ import annotations

import subprocess
import sys

import pytest

# click made unimportable, as a broken or half-upgraded installation would leave it.
_BROKEN = "import sys; sys.modules['click'] = None; from ggaudit.__main__ import run; sys.argv[1:] = {args!r}; run()"


@pytest.mark.parametrize("args", [["--help"], ["scan", "m.gguf"]])
def test_a_command_line_that_cannot_load_is_one_line_and_exit_3(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", _BROKEN.format(args=args)], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (3, "")
    assert done.stderr == ("ggaudit: internal error: cannot load the command line: ModuleNotFoundError: "
                           "'import of click halted; None in sys.modules' (check the installation; --debug "
                           "shows the traceback)\n")


def test_debug_shows_the_traceback_before_the_line() -> None:
    done = subprocess.run([sys.executable, "-c", _BROKEN.format(args=["--debug", "--help"])],
                          capture_output=True, text=True)
    lines = done.stderr.splitlines()
    assert done.returncode == 3 and lines[0] == "Traceback (most recent call last):"
    assert lines[-1].startswith("ggaudit: internal error: cannot load the command line: ModuleNotFoundError: ")
