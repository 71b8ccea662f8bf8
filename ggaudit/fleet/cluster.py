"""A Dask client for the command line's ``--dask ADDRESS|local[:N]``; Dask is imported only here, and
only when asked for (``pip install ggaudit[dask]``)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..io import processes
from ..errors import UsageError

if TYPE_CHECKING:
    from distributed import Client

#: ``--dask local`` or ``local:N``: a cluster of worker processes on this machine.
LOCAL = "local"
#: Longest wait for a scheduler given by address.
_CONNECT_SECONDS = 30


@contextlib.contextmanager
def connect(spec: str) -> Iterator[Client]:
    """A client of the scheduler at ``spec`` (``tcp://HOST:PORT``, or anything ``distributed.Client``
    takes), or of a new local cluster for ``local`` (one worker per available core) or ``local:N``; a
    local cluster ends with the block."""
    try:
        import distributed
    except ImportError:
        raise UsageError(None, "needs Dask: pip install 'ggaudit[dask]'", field="--dask") from None
    if spec == LOCAL or spec.startswith(LOCAL + ":"):
        workers = _local_workers(spec)
        # One thread per worker: a scan task is numpy over a mapping, which holds the GIL for part of it.
        with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                      dashboard_address=":0", silence_logs=logging.ERROR) as cluster, \
                distributed.Client(cluster) as client:
            yield client
        return
    try:
        client = distributed.Client(spec, timeout=_CONNECT_SECONDS)
    except (OSError, TimeoutError, ValueError) as err:
        raise UsageError(spec, f"cannot reach the Dask scheduler: {err}", field="--dask") from None
    with client:
        yield client


def _local_workers(spec: str) -> int:
    _, _, count = spec.partition(":")
    if not count:
        return processes.available_cores()
    if not count.isdigit() or int(count) < 1:
        raise UsageError(None, f"local:N takes a number of workers >= 1, not {count!r}", field="--dask")
    return int(count)
