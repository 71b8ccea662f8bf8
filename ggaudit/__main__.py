from __future__ import annotations

from .cli import main

main(prog_name="ggaudit")
