"""ggaudit: audit GGUF model files: non-finite values, digests, and read-path replay."""

from __future__ import annotations

__version__ = "0.1.0"
