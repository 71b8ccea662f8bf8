"""How the CLI shows a run: reporters, chosen by name (``--format NAME``; ``--json`` is ``--format json``).

A reporter is a function ``report(outcomes, rendering) -> str``: it takes the outcome of every target of
the run, in the order given (a report, or the error that stopped it), and how the user asked to see it
(:class:`Rendering`), and returns the text for stdout or ``-o FILE``. Adding a format is one file: a module
in this package named as its format, defining ``NAME`` (that name) and ``report``; it is found here and
offered by every command, and imported only when a run prints with it. Errors are never a reporter's job
alone: each is also one line on stderr.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import pkgutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import click

from ...batch import Outcome, Report, overall_status
from ...text import escape_message
from ..common import STDOUT, as_flags, hint, writing_to


@dataclass(frozen=True, kw_only=True)
class Rendering:
    """How the user asked to see a run: the format, where it goes, and how much of it."""

    fmt: str = "text"
    #: A file the report is written to (atomically) instead of stdout; None or "-": stdout.
    output: str | None = None
    #: Only errors and the summary: no warnings, no per-finding lines (text), no progress.
    quiet: bool = False
    #: Mismatches listed per target by ``verify`` (all are counted); None: every one.
    limit: int | None = None

    @property
    def to_file(self) -> bool:
        """The report is written to ``-o FILE``, not printed: the run's inputs are then worth listing."""
        return self.output not in (None, STDOUT)


#: As a command shows a run when no option says otherwise.
DEFAULT = Rendering()

Reporter = Callable[[Sequence[Outcome[Report]], Rendering], str]


#: The format names: this package's modules, listed without importing them (the text reporter imports
#: every report type, numpy with them, and `--help` should not). A module named with a leading underscore
#: is a reporter's helper, not a format.
NAMES: tuple[str, ...] = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))


def reporter(name: str) -> Reporter:
    """The reporter of the format ``name`` (one of :data:`NAMES`), imported on first use."""
    module = importlib.import_module(f"{__name__}.{name}")
    found: Reporter = module.report
    return found


def emit_outcomes(outcomes: Sequence[Outcome[Report]], rendering: Rendering, *, inputs: Iterable[str] = ()) -> int:
    """Show the run as ``rendering`` asks: each report's warnings on stderr (unless quiet), the reporter's
    text on stdout or in ``-o FILE``, each target's error as one line on stderr; return the exit status:
    2 if any target failed, else 1 if any report is not ok, else 0. ``inputs``: every file the run read
    (its targets are added here), none of which ``-o FILE`` may be (see :func:`check_report_file`)."""
    # Errors name the command line's options, not the library's parameters, on stderr and in reports.
    said = [o if o.error is None else dataclasses.replace(o, error=as_flags(o.error)) for o in outcomes]
    if not rendering.quiet:
        for o in said:
            for warning in getattr(o.result, "warnings", ()):
                hint(f"ggaudit: warning: {escape_message(warning)}")
    text = reporter(rendering.fmt)(said, rendering)
    if rendering.to_file:
        assert rendering.output is not None
        _write_report(text, rendering.output, [*inputs, *(o.model for o in said)])
    elif text:
        click.echo(text, nl=False)
    for o in said:
        if o.error is not None:
            click.echo(f"ggaudit: error: {o.error}", err=True)
    return overall_status(said)


def check_report_file(rendering: Rendering, inputs: Iterable[str]) -> None:
    """Refuse ``-o FILE`` (a UsageError: one line, exit 2) before the run reads anything when FILE is one
    of ``inputs`` (the files the run will read: its targets and every file found from them, the files
    its options name), however it is spelled: files are compared by identity (device and inode), as
    ``manifest -o`` compares them, so a link, ``./`` or another case on Windows is caught too. Also
    refused: anything but a regular file, and a GGUF file (a model the run does not read is still a
    model). The writer checks again, with the files the run found while it ran, before it replaces FILE."""
    if rendering.to_file:
        assert rendering.output is not None
        _check_report_file(rendering.output, _files(inputs))


def _files(inputs: Iterable[str]) -> tuple[str, ...]:
    """``inputs`` that may name a file: each once, none holding a NUL (no file's name does, and os.stat
    raises ValueError for it, which the comparison does not expect)."""
    return tuple(p for p in dict.fromkeys(os.fspath(p) for p in inputs) if "\0" not in p)


def _check_report_file(path: str, inputs: tuple[str, ...]) -> None:
    from ... import io as fileio
    from ...errors import GGAuditError, UsageError
    from ...verify.manifests.tensor import check_output

    check_output(path, replace=True, inputs=inputs, what="the report")
    try:
        fd, _ = fileio.open_readonly(path)     # a regular file only: a FIFO put there since never blocks this
    except (GGAuditError, OSError):
        return      # absent, or not readable: the writer says what is wrong with it
    with open(fd, "rb") as f:
        if f.read(4) == b"GGUF":
            raise UsageError(path, "is a GGUF file; a report never replaces a model", field="--output")


def _write_report(text: str, path: str, inputs: Iterable[str]) -> None:
    """``-o FILE``: replaced atomically (a CI job writes the same report name every run), but never when it
    is one of the run's inputs (``inputs``: its targets, and every file it read), and never a GGUF file."""
    from ...verify.manifests.tensor import write_output_file

    files = _files(inputs)
    _check_report_file(path, files)
    with writing_to(path, "the report"):
        write_output_file(text, path, replace=True, inputs=files, what="the report")


F = TypeVar("F", bound=Callable[..., Any])


def format_options(command: F) -> F:
    """``--format NAME`` (any reporter here; default text), ``--json`` (short for ``--format json``),
    ``-o/--output FILE`` and ``-q/--quiet``: the command receives them as one :class:`Rendering`,
    ``rendering``. ``--format`` and ``--json`` are two options, not one destination, since click versions
    differ in which of two options sharing a destination sets it."""
    return format_options_also()(command)


def format_options_also(*extra: str, output_flags: tuple[str, ...] = ("-o", "--output")) -> Callable[[F], F]:
    """:func:`format_options` whose ``--format`` also accepts the command's own ``extra`` names (the
    command then decides what they mean), and whose report file is given with ``output_flags`` (for a
    command whose ``-o`` is already something else)."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def with_format(*args: Any, fmt: str, as_json: bool, report_file: str | None, quiet: bool,
                        **kwargs: Any) -> Any:
            rendering = Rendering(fmt="json" if as_json else fmt, output=report_file, quiet=quiet)
            return command(*args, rendering=rendering, **kwargs)

        with_json = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (--format json).")
        with_name = click.option("--format", "fmt", type=click.Choice(list(NAMES) + list(extra)),
                                 default="text", show_default=True, help="How to print the result.")
        with_file = click.option(*output_flags, "report_file", metavar="FILE", default=None,
                                 help="Write the result to FILE (replaced atomically) instead of stdout; never "
                                      "one of the run's inputs, nor a GGUF file.")
        with_quiet = click.option("-q", "--quiet", is_flag=True,
                                  help="Print only errors and the summary: no warnings, no progress.")
        return cast(F, with_name(with_json(with_file(with_quiet(with_format)))))

    return decorate
