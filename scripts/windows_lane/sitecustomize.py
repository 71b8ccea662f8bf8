"""Imported at start-up by the Windows lane's interpreter (scripts/windows_lane.sh copies it into the lane's site dir).

Lane-only work-arounds, not part of ggaudit:

* Wine 8.0 lacks propsys.dll.VariantToString, which CPython 3.12's _wmi module calls when platform.system(),
  release() or version() query WMI, and Wine aborts the whole process. Hiding _wmi makes platform fall back to
  sys.getwindowsversion() and `ver`, as on a Windows without WMI.
* The lane keeps bytecode in its cache (PYTHONPYCACHEPREFIX), but multiprocessing starts its children with -I,
  which makes them ignore that variable and write __pycache__ into the repo: take it from os.environ here.
"""

import os
import sys

sys.modules.setdefault("_wmi", None)

if sys.pycache_prefix is None and os.environ.get("PYTHONPYCACHEPREFIX"):
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]
