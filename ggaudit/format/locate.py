"""Where ``resolve_model`` was before the stores got their own layer (:mod:`ggaudit.stores.locate`); the
name is kept for the code that imports it from here. Loaded on use, so that ``format`` imports nothing
of the layer above it."""

from __future__ import annotations

import importlib
from typing import Any

#: The names this module still answers to, from :mod:`ggaudit.stores.locate`.
MOVED = ("Target", "description_files", "open_model", "resolve_model", "target_text")


def __getattr__(name: str) -> Any:
    if name not in MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("ggaudit.stores.locate"), name)
