"""``ggaudit check``: the whole file through every read path, truth by evidence, the verdict in words: the
entry point (:mod:`.run`), one pass per read path (:mod:`.passes`), the expectation (:mod:`.expect`), the
pure decision (:mod:`.decide`), the verdict in words (:mod:`.verdict`) and the report (which words itself).

The function is :func:`ggaudit.check` (:func:`ggaudit.check.run.check`): the front door keeps that name the
function once this package is imported, so its modules are imported by name (``from ggaudit.check import
decide``). It imports nothing else itself, as ``ggaudit.scan`` and ``ggaudit.verify`` do: ``import
ggaudit.check.decide`` loads the decision only.
"""
