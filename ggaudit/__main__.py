"""``python -m ggaudit`` and the ``ggaudit`` console script."""

from __future__ import annotations

import os
import sys


def run() -> None:
    """Start the command line. Ctrl-C while the command line's modules are still importing (the first
    few hundred milliseconds) ends in exit 130 like Ctrl-C at any later moment, not in a traceback."""
    try:
        from .cli import main

        main(prog_name="ggaudit")
    except KeyboardInterrupt:
        for stream, text in ((sys.stdout, ""), (sys.stderr, "ggaudit: interrupted\n")):
            try:
                stream.write(text)
                stream.flush()
            except (OSError, ValueError, KeyboardInterrupt):
                pass
        # Skip interpreter teardown: a second Ctrl-C there would print a traceback after all.
        os._exit(130)


if __name__ == "__main__":
    run()
