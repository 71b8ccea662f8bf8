"""One word of a command line the tool prints as a next step, quoted so the user's shell passes it as is:
POSIX shells' quoting on Linux and macOS; on Windows a quoting that cmd and PowerShell both take (they share
no single-quote syntax, and a bare ``>`` or ``|`` would redirect in both)."""

from __future__ import annotations

import re
import shlex

from .system import WINDOWS

#: The characters a Windows shell passes through unquoted: a path such as ``C:\models\m.gguf`` stays bare.
_WINDOWS_BARE = re.compile(r"[\w@+=:,./\\-]+")


def shell_word(text: str) -> str:
    """``text`` as one word of a command line for this system's shell."""
    return _windows_word(text) if WINDOWS else shlex.quote(text)


def _windows_word(text: str) -> str:
    if _WINDOWS_BARE.fullmatch(text):
        return text
    # Double quotes group the word in cmd and PowerShell; an inner quote is escaped as the C runtime that
    # splits the command line into argv reads it.
    return '"' + text.replace('"', '\\"') + '"'
