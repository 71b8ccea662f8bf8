"""Non-finite values at the level of the stored bits: the entry point and plans (:mod:`.run`), the bit tests
(:mod:`.kernel`), worker processes over mapped windows (:mod:`.workers`) and the report (:mod:`.report`).

The function is :func:`ggaudit.scan` (:func:`ggaudit.scan.run.scan`): the front door keeps that name the
function once this package is imported, so its modules are imported by name (``from ggaudit.scan import
workers``). It imports nothing else itself: importing one of its modules runs no other.
"""

#: ``TensorScan.encoding`` of an I8 tensor the caller said holds FP8 E4M3 bytes (``--as NAME=fp8_e4m3``).
#: Here, not in :mod:`.report`, so that ``ggaudit scan --help`` shows it without importing the report.
FP8_E4M3 = "fp8_e4m3"
