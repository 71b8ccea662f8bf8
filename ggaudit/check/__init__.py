"""``ggaudit check``: the whole file through every read path, truth by evidence, the verdict in words."""

from .options import CheckOptions
from .report import CheckReport
from .run import check

__all__ = ["CheckOptions", "CheckReport", "check"]
