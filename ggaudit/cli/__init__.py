"""The ``ggaudit`` command line: parses, calls the library, renders, picks the exit code."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click
from click.shell_completion import CompletionItem

from .._version import __version__
from .common import OneLineErrorsGroup

#: Command name -> (its module in this package, its one-line summary). ``ggaudit --help`` lists the
#: summaries from here, so it imports no command; tests/test_startup_cost.py checks each equals the
#: first sentence of its command's docstring.
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("check", "Read every byte of each TARGET through every read path and say whether it is intact."),
    "diff": ("diff", "Compare models A and B (files, split sets, or ollama:NAME): metadata keys only in one or "
                     "with another type or value (for arrays, the first differing element), tensors only in one, "
                     "type or shape changes, and for differing data the first differing byte and the number of "
                     "differing rows."),
    "info": ("info", "Show each MODEL's header, metadata and tensor table."),
    "manifest": ("manifest", "Write MODEL's tensor manifest to OUTPUT, reading each file once."),
    "rows": ("rows", "Replay rows of an embedding table through each read path and byte-compare them with the "
                     "file."),
    "scan": ("scan", "Find NaN and Inf (and with --max-abs, outliers) in each MODEL's tensors."),
    "verify": ("verify", "Check the bytes of each TARGET against the digests they should have."),
}


class _LoadedOnUse(dict[str, click.Command]):
    """The group's commands: ``main.commands["scan"]`` imports the scan command the first time."""

    def __missing__(self, name: str) -> click.Command:
        if name not in COMMANDS:
            raise KeyError(name)
        module = importlib.import_module(f"{__name__}.{COMMANDS[name][0]}")
        command: click.Command = getattr(module, name)
        self[name] = command
        return command


class LazyGroup(OneLineErrorsGroup):
    """A group that imports a command's module only when that command runs, completes or shows its help:
    starting the command line costs click and this package, not numpy and every job (issue 15)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _LoadedOnUse()

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.commands[cmd_name] if cmd_name in COMMANDS else None

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        # Command names and their help from the table, so `ggaudit s<TAB>` imports no command; the group's
        # own options as click completes them.
        names = [CompletionItem(name, help=COMMANDS[name][1]) for name in self.list_commands(ctx)
                 if name.startswith(incomplete)]
        return names + click.Command.shell_complete(self, ctx, incomplete)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # As click's own listing, shortened as click shortens, but from the table: no command is imported.
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, _short(COMMANDS[name][1], limit)) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _short(summary: str, limit: int) -> str:
    """``summary`` cut at a word to fit ``limit`` characters, "..." said (click's own helper for this is
    deprecated in click 8.3)."""
    if len(summary) <= limit:
        return summary
    cut = summary[:max(limit - 3, 1)].rsplit(" ", 1)[0]
    return cut.rstrip(" .,;:") + "..."


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ggaudit")
@click.option("--debug", is_flag=True, help="On an internal error (exit 3), also print the traceback.")
def main(debug: bool) -> None:
    """Audit GGUF model files: is the data intact, and does every read path deliver the same bytes?

    Exit status: 0 clean, 1 findings, 2 bad input or an unreadable file, 3 internal error (a bug: please
    report it), 4 the result could not be written (stdout or -o FILE), 130 interrupted.
    """
    _never_fail_on_encoding()


def _never_fail_on_encoding() -> None:
    # Windows pipes and legacy consoles write in the ANSI code page (cp1252, ...): a name it cannot encode
    # is shown as a \uXXXX escape instead of ending the run in UnicodeEncodeError.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
