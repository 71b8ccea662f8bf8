"""Which operating system this is, for the modules of :mod:`ggaudit.io` that answer differently on each
(and for the few callers outside it that must know, such as the digest cache's file modes)."""

from __future__ import annotations

import sys

WINDOWS = sys.platform == "win32"
LINUX = sys.platform.startswith("linux")
MACOS = sys.platform == "darwin"
