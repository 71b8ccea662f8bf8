"""``ggaudit check``: the whole file through every read path, truth by evidence, the verdict in words: the
entry point (:mod:`.run`), one pass per read path (:mod:`.passes`), the expectation (:mod:`.expect`), the
pure decision (:mod:`.decide`), the verdict in words (:mod:`.verdict`) and the report (which words itself).

The package is also the function: ``ggaudit.check(target, ...)`` is :func:`ggaudit.check.run.check`. It
imports nothing else itself, as ``ggaudit.scan`` and ``ggaudit.verify`` do: ``import ggaudit.check.decide``
loads the decision only.
"""

from .._callable import make_callable

make_callable(__name__, "ggaudit.check.run:check")
