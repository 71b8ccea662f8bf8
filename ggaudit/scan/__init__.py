"""Non-finite values at the level of the stored bits: the entry point and plans (:mod:`.run`), the bit tests
(:mod:`.kernel`), worker processes over mapped windows (:mod:`.workers`) and the report (:mod:`.report`).

The function is :func:`ggaudit.scan` (:func:`ggaudit.scan.run.scan`): the front door keeps that name the
function once this package is imported, so its modules are imported by name (``from ggaudit.scan import
workers``). It imports nothing else itself: importing one of its modules runs no other.
"""
