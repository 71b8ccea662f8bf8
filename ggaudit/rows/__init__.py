"""Replaying table rows through every read path (:mod:`ggaudit.evidence.readers`): the table's row
geometry (:mod:`.table`), choosing rows (:mod:`.select`), gathering them (:mod:`.gather`: pools, cache,
prefetch), telling what went wrong (:mod:`.classify`), the finiteness verdict (:mod:`.finite`) and the
entry point (:mod:`.replay`, :func:`ggaudit.check_rows`)."""

from ..evidence.paths import MODES

__all__ = ["MODES", "WHOLE_FILE"]

#: How a whole-file pass (:mod:`.published`) is named to the progress callback, after its read path: it
#: counts bytes of the file, where the replay's passes count rows.
WHOLE_FILE = "whole file"
