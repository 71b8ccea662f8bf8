"""Audits beyond one machine: the same per-file jobs run on a Dask cluster (``pip install ggaudit[dask]``).

    from distributed import Client
    from ggaudit.fleet import scan_on, manifest_on

    with Client("tcp://scheduler:8786") as client:
        outcomes = scan_on(client, ["/share/models/a.gguf", "/share/models/b.gguf"])

Workers open the files themselves (a filesystem every worker mounts at the same path) and return small
results; each model's report is the one a local run gives. Importing this package does not import Dask:
:func:`connect` and the calls that take a client do, when called.
"""

from __future__ import annotations

from .cluster import connect
from .run import DEFAULT_RETRIES, check_on, manifest_on, on_fleet, scan_on, verify_on

__all__ = ["DEFAULT_RETRIES", "check_on", "connect", "manifest_on", "on_fleet", "scan_on", "verify_on"]
