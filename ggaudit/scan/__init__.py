"""Non-finite values at the level of the stored bits: the entry point and plans (:mod:`.run`), the bit tests
(:mod:`.kernel`), worker processes over mapped windows (:mod:`.workers`) and the report (:mod:`.report`).

The package is also the function: ``ggaudit.scan(model, ...)`` is :func:`ggaudit.scan.run.scan`.
"""

from .._callable import make_callable

make_callable(__name__, "ggaudit.scan.run:scan")
