"""What every command shares: error handling, exit codes, JSON output, stderr hints."""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from typing import Any, Callable, Iterable, Sequence, TypeVar

import click

from ..batch import STATUS_CLEAN, STATUS_ERROR, STATUS_FINDINGS, Outcome, overall_status, status_word
from ..errors import GGAuditError
from ..layout import ArrayValue
from ..locate import resolve_model
from ..text import escape, escape_path

# The exit status is the library's overall status: one definition of what 0, 1 and 2 mean.
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = STATUS_CLEAN, STATUS_FINDINGS, STATUS_ERROR

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")

log = logging.getLogger(__name__)


class OneLineErrorsGroup(click.Group):
    """A command group whose commands report bad arguments (a MODEL that is a directory, an unreadable
    --sums file, a missing option) as one line on stderr with exit 2, like every other error."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as err:
            where = f" (see '{err.ctx.command_path} --help')" if err.ctx is not None else ""
            # The message quotes the paths the user typed: shown as paths (Windows' separator once).
            fail(escape_path(err.format_message()) + where)


class PathParam(click.ParamType):
    """A path option or argument, checked only for being a folder or not. click.Path quotes the path with
    repr(), which doubles every Windows backslash; this says it as ``PATH: is a directory``."""

    name = "path"

    def __init__(self, *, file_okay: bool = True, dir_okay: bool = True) -> None:
        self.file_okay, self.dir_okay = file_okay, dir_okay

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        path = os.fsdecode(value)
        if not self.dir_okay and os.path.isdir(path):
            self.fail(f"{path}: is a directory", param, ctx)
        if not self.file_okay and os.path.exists(path) and not os.path.isdir(path):
            self.fail(f"{path}: is not a directory", param, ctx)
        return path


def handle_errors(func: F) -> F:
    """Turn library errors into one line on stderr and exit status 2, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except GGAuditError as err:
            fail(str(err))
        except OSError as err:
            fail(_describe_os_error(err))
        except MemoryError:
            fail("out of memory")

    return wrapper  # type: ignore[return-value]


def _describe_os_error(err: OSError) -> str:
    where = escape_path(str(err.filename)) + ": " if err.filename is not None else ""
    return f"{where}{err.strerror or err}"


def fail(message: str) -> None:
    """Print *message* as the one error line on stderr and exit 2."""
    click.echo(f"ggaudit: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()


def hint(message: str) -> None:
    """Warnings and hints go to stderr, and only when a person is watching."""
    if stderr_is_tty():
        click.echo(message, err=True)


def error_to_json(err: GGAuditError) -> dict[str, Any]:
    """An error as JSON: the one-line text, and its parts exact."""
    return {"message": str(err), "path": err.path, "offset": err.offset, "field": err.field,
            "kind": type(err).__name__}


def emit_outcomes(outcomes: Sequence[Outcome[R]], *, as_json: bool, to_json: Callable[[R], Any],
                  render: Callable[[R], Iterable[str]], has_findings: Callable[[R], bool]) -> int:
    """Print what several models gave, in the order given, and return the exit status.

    One model prints exactly what a single-model command prints (an error: one line, exit 2). Several:
    each report in turn on stdout and each error as its own line on stderr; with --json one object
    ``{"status": "ok"|"findings"|"error", "models": [{"model", "status", "report" | "error"}]}``.
    Status: 2 if any model failed, else 1 if any has findings, else 0.
    """
    status = overall_status(outcomes, has_findings)
    if len(outcomes) == 1 and outcomes[0].error is not None:
        fail(str(outcomes[0].error))
    if len(outcomes) == 1:
        result = _result(outcomes[0])
        if as_json:
            emit_json(to_json(result))
        else:
            for line in render(result):
                click.echo(line)
        return status
    if as_json:
        emit_json({"status": ("ok", "findings", "error")[status], "models": [
            {"model": o.model, "status": status_word(o, has_findings),
             **({"error": error_to_json(o.error)} if o.error is not None else {"report": to_json(_result(o))})}
            for o in outcomes]})
        return status
    for o in outcomes:
        if o.error is not None:
            click.echo(f"ggaudit: error: {o.error}", err=True)
        else:
            for line in render(_result(o)):
                click.echo(line)
    return status


def _result(outcome: Outcome[R]) -> R:
    """The result of an outcome that holds no error (an outcome holds one or the other)."""
    assert outcome.result is not None, outcome
    return outcome.result


def expand_models(specs: Iterable[str], store: str | None) -> list[str]:
    """Each MODEL as the files it names: ``ollama:NAME`` becomes its model blob and then its projector's,
    if it has one. A name that does not resolve is kept as it is, so auditing it reports the error."""
    paths: list[str] = []
    for spec in specs:
        try:
            paths.extend(resolve_model(spec, store=store))
        except GGAuditError:
            paths.append(spec)
    return paths


#: Longest string a metadata value shows before it is cut.
MAX_SHOWN = 80


def show_value(value: Any) -> str:
    """A metadata value for a terminal: escaped, quoted strings cut at MAX_SHOWN, arrays as type x count
    and their first elements."""
    if isinstance(value, ArrayValue):
        head = ", ".join(show_value(v) for v in value.head)
        more = ", ..." if value.count > len(value.head) else ""
        return f"[{value.elem_type.name.lower()} x {value.count}] [{head}{more}]"
    if isinstance(value, str):
        # Quotes inside are escaped too, or a tokenizer's quote token reads as three quotes. The
        # backslash itself is already escaped, so a backslash-quote can only mean a quote.
        text = escape(value).replace("'", "\\'")
        if len(text) > MAX_SHOWN:
            return f"'{text[:MAX_SHOWN]}...' ({len(value)} chars)"
        return f"'{text}'"
    return str(value)
