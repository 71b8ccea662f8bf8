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

from ...diagnostic import Report
from ...escaping import escape_message
from ...io.output_files import STDOUT
from ...outcomes import STATUS_CLEAN, STATUS_ERROR, STATUS_FINDINGS, Outcome, overall_status
from ..common import as_flags, hint, writing_to


@dataclass(frozen=True, kw_only=True)
class Rendering:
    """How the user asked to see a run: the format, where it goes, and how much of it. A reporter sees one
    destination (``fmt``, ``output``); ``also`` lists the others of the run (several ``-o FILE``), each
    rendered from the same reports: the model is read once, whatever the number of formats."""

    fmt: str = "text"
    #: A file the report is written to (atomically) instead of stdout; None or "-": stdout.
    output: str | None = None
    #: Only errors and the summary: no warnings, no per-finding lines (text), no progress.
    quiet: bool = False
    #: Mismatches listed per target by ``verify`` (all are counted); None: every one.
    limit: int | None = None
    #: The run's other destinations, as (format, file) pairs (file "-": stdout).
    also: tuple[tuple[str, str], ...] = ()
    #: ``--fail-on``: the kinds, families or severities whose findings make the exit status 1; None: any.
    fail_on: frozenset[str] | None = None

    @property
    def destinations(self) -> list[Rendering]:
        """Every destination of the run, each as the rendering its reporter sees."""
        return [self, *(dataclasses.replace(self, fmt=fmt, output=path, also=()) for fmt, path in self.also)]

    @property
    def formats(self) -> set[str]:
        return {d.fmt for d in self.destinations}

    @property
    def to_file(self) -> bool:
        """A report is written to ``-o FILE``: the run's inputs are then worth listing."""
        return any(d.output not in (None, STDOUT) for d in self.destinations)

    @property
    def files(self) -> list[str]:
        """The report files, in the order given."""
        return [d.output for d in self.destinations if d.output not in (None, STDOUT)]

    @property
    def on_stdout(self) -> bool:
        return any(d.output in (None, STDOUT) for d in self.destinations)


#: As a command shows a run when no option says otherwise.
DEFAULT = Rendering()

Reporter = Callable[[Sequence[Outcome[Report]], Rendering], str]


#: The format names: this package's modules, listed without importing them (`--help` imports no reporter:
#: what one loads is the run's to pay). A module named with a leading underscore is a reporter's helper, not a
#: format. A reporter reads reports through ggaudit.diagnostic.Report only, so a new report type needs none of
#: them changed.
NAMES: tuple[str, ...] = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))


#: The format a report file's name asks for, by its ending (``-o run.sarif``), unless --format says otherwise;
#: a file of any other name is written as text, the default.
EXTENSIONS: tuple[tuple[str, str], ...] = ((".sarif.json", "sarif"), (".sarif", "sarif"), (".xml", "junit"),
                                           (".html", "html"), (".htm", "html"), (".json", "json"), (".txt", "text"))


def format_of(path: str) -> str | None:
    """The format ``path``'s ending names (:data:`EXTENSIONS`), or None."""
    name = path.lower()
    return next((fmt for ending, fmt in EXTENSIONS if name.endswith(ending)), None)


def destinations(formats: Sequence[str], files: Sequence[str], flag: str = "-o") -> list[tuple[str, str | None]]:
    """Where the run's result goes, as (format, file) pairs; file None: stdout. With no ``flag`` FILE, stdout
    in the one format given (default text). Otherwise each FILE in the format its name ends with (else
    text), or, when --format is given as often as FILE, the --format given in the same place."""
    from ...errors import UsageError

    if not files:
        if len(formats) > 1:
            raise UsageError(None, f"{len(formats)} formats for one stdout: give {flag} FILE for each, in the "
                                   "same order", field="--format")
        return [(formats[0] if formats else "text", None)]
    if formats and len(formats) != len(files):
        given = "once" if len(formats) == 1 else f"{len(formats)} times"
        raise UsageError(None, f"given {given} for {len(files)} {flag} FILE: give one --format per "
                               f"{flag} FILE, in the same order, or none (each FILE's name ends as its format: "
                               f"{', '.join(ending for ending, _ in EXTENSIONS)})", field="--format")
    _no_file_twice(files, flag)
    chosen = list(formats) or [format_of(f) or "text" for f in files]
    return [(fmt, None if f == STDOUT else f) for fmt, f in zip(chosen, files, strict=True)]


def _no_file_twice(files: Sequence[str], flag: str) -> None:
    """Two destinations are never one file (the second would replace the first), however spelled."""
    from ...errors import UsageError

    seen: list[str] = []
    for path in files:
        if any(same_file(path, other) for other in seen):
            raise UsageError(path, "given twice: each report needs its own file", field=flag)
        seen.append(path)


def same_file(a: str, b: str) -> bool:
    """Whether two paths name one file, before either exists (then by their absolute, normalised text)."""
    if STDOUT in (a, b):
        return a == b
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.normcase(os.path.abspath(a)) == os.path.normcase(os.path.abspath(b))


def reporter(name: str) -> Reporter:
    """The reporter of the format ``name`` (one of :data:`NAMES`), imported on first use."""
    module = importlib.import_module(f"{__name__}.{name}")
    found: Reporter = module.report
    return found


def emit_outcomes(outcomes: Sequence[Outcome[Report]], rendering: Rendering, *, inputs: Iterable[str] = ()) -> int:
    """Show the run as ``rendering`` asks: each report's warnings on stderr (unless quiet), each destination's
    text on stdout or in its ``-o FILE`` (one read of the model, every format), each target's error as one
    line on stderr, and when every report went to a file, each target's one-line summary on stderr (a CI
    log shows the result); return the exit status: 2 if any target failed, else 1 if any report has a
    finding ``--fail-on`` selects (any, without it), else 0. ``inputs``: every file the run read (its
    targets are added here), none of which ``-o FILE`` may be (see :func:`check_report_file`)."""
    # Errors name the command line's options, not the library's parameters, on stderr and in reports.
    said = [o if o.error is None else dataclasses.replace(o, error=as_flags(o.error)) for o in outcomes]
    if not rendering.quiet:
        for o in said:
            for warning in o.result.summary().warnings if o.result is not None else ():
                hint(f"ggaudit: warning: {escape_message(warning)}")
    read = [*inputs, *(o.model for o in said)]
    for destination in rendering.destinations:
        text = reporter(destination.fmt)(said, destination)
        if destination.output not in (None, STDOUT):
            assert destination.output is not None
            _write_report(text, destination.output, read)
        elif text:
            click.echo(text, nl=False)
    for o in said:
        if o.error is not None:
            click.echo(f"ggaudit: error: {o.error}", err=True)
    if not rendering.on_stdout:
        _summaries(said)
    return exit_status(said, rendering.fail_on)


def _summaries(outcomes: Sequence[Outcome[Report]]) -> None:
    for o in outcomes:
        if o.result is not None:
            hint(o.result.summary().headline)


def exit_status(outcomes: Sequence[Outcome[Report]], fail_on: frozenset[str] | None) -> int:
    """The run's exit status: :func:`overall_status`, except that with ``fail_on`` (``--fail-on``) a report
    fails only by a finding of a kind it selects, an advisory one (a template's warning, in a report that is
    ``ok``: :data:`ggaudit.kinds.ADVISORY`) included. A report that is not ok and names no finding fails
    whatever ``fail_on`` says: what it found cannot be told apart, and a wrong clean is the worst output."""
    status = overall_status(outcomes)
    if fail_on is None or status == STATUS_ERROR:
        return status
    from ...kinds import ADVISORY, family, selects

    for result in (o.result for o in outcomes if o.result is not None):
        # An ok report's findings are notes and advice; only the advice (ADVISORY) is for --fail-on to select.
        found = [d for d in result.diagnostics() if not result.ok or family(d.kind) in ADVISORY]
        if (not result.ok and not found) or any(selects(fail_on, d.kind, d.severity) for d in found):
            return STATUS_FINDINGS
    return STATUS_CLEAN


def check_report_file(rendering: Rendering, inputs: Iterable[str]) -> None:
    """Refuse each ``-o FILE`` (a UsageError: one line, exit 2) before the run reads anything when FILE is
    one of ``inputs`` (the files the run will read: its targets and every file found from them, the files
    its options name), however it is spelled: files are compared by identity (device and inode), as
    ``manifest -o`` compares them, so a link, ``./`` or another case on Windows is caught too. Also
    refused: anything but a regular file, and a GGUF file (a model the run does not read is still a
    model). The writer checks again, with the files the run found while it ran, before it replaces FILE."""
    files = _files(inputs) if rendering.to_file else ()
    for path in rendering.files:
        _check_report_file(path, files)


def _files(inputs: Iterable[str]) -> tuple[str, ...]:
    """``inputs`` that may name a file: each once, none holding a NUL (no file's name does, and os.stat
    raises ValueError for it, which the comparison does not expect)."""
    return tuple(p for p in dict.fromkeys(os.fspath(p) for p in inputs) if "\0" not in p)


def _check_report_file(path: str, inputs: tuple[str, ...]) -> None:
    from ...errors import GGAuditError, UsageError
    from ...io.opening import open_readonly
    from ...io.output_files import check_output

    check_output(path, replace=True, inputs=inputs, what="the report")
    try:
        fd, _ = open_readonly(path)     # a regular file only: a FIFO put there since never blocks this
    except (GGAuditError, OSError):
        return      # absent, or not readable: the writer says what is wrong with it
    with open(fd, "rb") as f:
        if f.read(4) == b"GGUF":
            raise UsageError(path, "is a GGUF file; a report never replaces a model", field="--output")


def _write_report(text: str, path: str, inputs: Iterable[str]) -> None:
    """``-o FILE``: replaced atomically (a CI job writes the same report name every run), but never when it
    is one of the run's inputs (``inputs``: its targets, and every file it read), and never a GGUF file."""
    from ...io.output_files import write_output_file

    files = _files(inputs)
    _check_report_file(path, files)
    with writing_to(path, "the report"):
        write_output_file(text, path, replace=True, inputs=files, what="the report")


F = TypeVar("F", bound=Callable[..., Any])


def format_options(command: F) -> F:
    """``--format NAME`` and ``-o/--output FILE`` (each repeatable: one read, every format), ``--json``
    (short for ``--format json``), ``--fail-on LIST`` and ``-q/--quiet``: the command receives them as one
    :class:`Rendering`, ``rendering``. ``--format`` and ``--json`` are two options, not one destination,
    since click versions differ in which of two options sharing a destination sets it."""
    return format_options_also()(command)


def format_options_also(*extra: str, output_flags: tuple[str, ...] = ("-o", "--output")) -> Callable[[F], F]:
    """:func:`format_options` whose ``--format`` also accepts the command's own ``extra`` names (the
    command then decides what they mean), and whose report files are given with ``output_flags`` (for a
    command whose ``-o`` is already something else)."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def with_format(*args: Any, fmt: tuple[str, ...], as_json: bool, report_files: tuple[str, ...],
                        fail_on: tuple[str, ...], quiet: bool, **kwargs: Any) -> Any:
            # --json wins over --format, as it always has: it is the one format.
            formats = ["json"] if as_json else list(fmt)
            (first, output), *others = destinations(formats, report_files, output_flags[0])
            rendering = Rendering(fmt=first, output=output, quiet=quiet, fail_on=fail_on_kinds(fail_on),
                                  also=tuple((f, STDOUT if path is None else path) for f, path in others))
            return command(*args, rendering=rendering, **kwargs)

        with_json = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (--format json).")
        with_name = click.option("--format", "fmt", type=click.Choice(list(NAMES) + list(extra)), multiple=True,
                                 help="How to print the result [default: text; with FILEs, each FILE's ending: "
                                      + ", ".join(f"{ending} {name}" for ending, name in EXTENSIONS)
                                      + "]; repeatable, one per FILE in the same order.")
        with_file = click.option(*output_flags, "report_files", metavar="FILE", multiple=True,
                                 help="Write the result to FILE (replaced atomically) instead of stdout; never "
                                      "one of the run's inputs, nor a GGUF file. Repeatable: one read of the "
                                      "model, a report in each FILE ('-': stdout).")
        with_fail_on = click.option("--fail-on", "fail_on", multiple=True, metavar="LIST",
                                    help="Exit 1 only for findings of these kinds, families or severities, "
                                         "comma-separated (repeatable): " + ", ".join(fail_on_names())
                                         + " [default: any finding]; the others are reported, exit 0.")
        with_quiet = click.option("-q", "--quiet", is_flag=True,
                                  help="Print only errors and the summary: no warnings, no progress.")
        return cast(F, with_name(with_json(with_file(with_fail_on(with_quiet(with_format))))))

    return decorate


def fail_on_names() -> list[str]:
    """What --fail-on takes besides a kind's id: the families, then the severities."""
    from ...kinds import FAMILIES, SEVERITIES

    return [*FAMILIES, *SEVERITIES]


def fail_on_kinds(given: tuple[str, ...]) -> frozenset[str] | None:
    """--fail-on's names, each checked: a family, a severity or a kind's id; None when none was given."""
    from ...errors import UsageError
    from ...kinds import KINDS

    if not given:
        return None
    names = frozenset(n.strip() for text in given for n in text.split(",") if n.strip())
    unknown = sorted(names - set(fail_on_names()) - set(KINDS))
    if unknown or not names:
        raise UsageError(None, f"{', '.join(unknown) or 'nothing'} is no kind, family or severity: give "
                               f"{', '.join(fail_on_names())} or a kind's id (docs/output.md)", field="--fail-on")
    return names
