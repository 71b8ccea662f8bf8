"""What every command shares: error handling, exit codes, JSON output, stderr hints."""

from __future__ import annotations

import functools
import json
import logging
import sys
from typing import Any, Callable, TypeVar

import click

from ..errors import GGAuditError

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2

F = TypeVar("F", bound=Callable[..., Any])

log = logging.getLogger(__name__)


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
    from ..text import escape

    where = escape(str(err.filename)) + ": " if err.filename is not None else ""
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
