"""The ``ggaudit`` command line: parses, calls the library, renders, picks the exit code."""

from __future__ import annotations

import sys

import click

from .._version import __version__
from .common import OneLineErrorsGroup
from .diff import diff
from .info import info
from .manifest import manifest
from .rows import rows
from .scan import scan
from .verify import verify


@click.group(cls=OneLineErrorsGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ggaudit")
@click.option("--debug", is_flag=True, help="On an internal error (exit 3), also print the traceback.")
def main(debug: bool) -> None:
    """Audit GGUF model files: is the data intact, and does every read path deliver the same bytes?

    Exit status: 0 clean, 1 findings, 2 bad input or an unreadable file, 3 internal error (a bug: please
    report it), 130 interrupted.
    """
    _never_fail_on_encoding()


def _never_fail_on_encoding() -> None:
    # Windows pipes and legacy consoles write in the ANSI code page (cp1252, ...): a name it cannot encode
    # is shown as a \uXXXX escape instead of ending the run in UnicodeEncodeError.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


for _command in (info, scan, verify, manifest, diff, rows):
    main.add_command(_command)
