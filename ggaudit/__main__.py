"""``python -m ggaudit`` and the ``ggaudit`` console script."""

from __future__ import annotations

import os
import sys
import traceback

from .errors import caused_by_ctrl_c
from .untrusted import quote


def run() -> None:
    """Start the command line. Ctrl-C while the command line's modules are still importing (the first
    few hundred milliseconds) ends in exit 130 like Ctrl-C at any later moment, not in a traceback; an
    installation that cannot import (a numpy built for another Python, say) is one line and exit 3."""
    try:
        from .cli import main
    except KeyboardInterrupt:
        _end("ggaudit: interrupted\n", 130)
    except Exception as err:  # the command line's own guarded() cannot report this: it did not load
        if caused_by_ctrl_c(err):
            _end("ggaudit: interrupted\n", 130)
        detail = "".join(traceback.format_exception(err)) if "--debug" in sys.argv[1:] else ""
        _end(f"{detail}ggaudit: internal error: cannot load the command line: {type(err).__name__}: "
             f"{quote(str(err), 200)} (check the installation; --debug shows the traceback)\n", 3)
    try:
        main(prog_name="ggaudit")
    except KeyboardInterrupt:
        _end("ggaudit: interrupted\n", 130)
    except SystemExit as exit_:
        # Ctrl-C that the command line reported (exit 130) may have escaped an exec() on its way (dataclasses
        # compile methods with one while a module imports): CPython 3.11 then still counts it as unhandled and
        # would end the process by SIGINT after teardown instead of with 130.
        if exit_.code == 130:
            _end("", 130)
        raise


def _end(message: str, status: int) -> None:
    for stream, text in ((sys.stdout, ""), (sys.stderr, message)):
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError, KeyboardInterrupt):
            pass
    # Skip interpreter teardown: a second Ctrl-C there would print a traceback after all.
    os._exit(status)


if __name__ == "__main__":
    run()
