"""Peak memory stays flat with file size (issue 15: under 200 MB whatever the file size): a 1.7 GB model
(sparse on disk: only its header is written) scanned in a fresh process, in the process and with two
worker processes, measured by the kernel (VmHWM of the scanning process, ru_maxrss of its workers)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as T
from platforms import WINDOWS

from ggaudit.format.build import encode_kv, encode_tensor_info

LIMIT_MIB = 200
#: Q4_K rows of 4096 columns (2304 bytes) and F32 rows of 4096 (16384 bytes): 1.2 GB + 0.5 GB.
Q4K_ROWS, F32_ROWS = 524288, 32768

_PROBE = """
import json, resource, sys
from ggaudit.scan.run import scan
report = scan(sys.argv[1], workers=int(sys.argv[2]))
own = [int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if int(sys.argv[2]) else 0
print(json.dumps({"ok": report.ok, "bytes": report.stats.bytes, "workers": report.stats.workers,
                  "own_kib": own, "workers_kib": workers}))
"""


@pytest.fixture(scope="module")
def big_sparse_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("memory") / "big.gguf"
    q4k_bytes = 4096 // 256 * 144 * Q4K_ROWS
    header = (b"GGUF" + (3).to_bytes(4, "little") + (2).to_bytes(8, "little") + (1).to_bytes(8, "little")
              + encode_kv("general.architecture", "test")
              + encode_tensor_info("q", T.Q4_K, (4096, Q4K_ROWS), 0)
              + encode_tensor_info("f", T.F32, (4096, F32_ROWS), q4k_bytes))
    header += bytes(-len(header) % 32)
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(len(header) + q4k_bytes + 4096 * 4 * F32_ROWS)    # zeros: finite, every byte still read
    yield path
    path.unlink()


@pytest.mark.skipif(WINDOWS, reason="peak memory from /proc and getrusage")
@pytest.mark.parametrize("workers", [0, 2])
def test_peak_memory_of_a_big_scan_stays_under_200_mb(big_sparse_model: Path, workers: int) -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE, str(big_sparse_model), str(workers)],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    probe = json.loads(out)
    assert (probe["ok"], probe["workers"]) == (True, workers)
    assert probe["bytes"] == 4096 // 256 * 144 * Q4K_ROWS + 4096 * 4 * F32_ROWS      # the whole 1.7 GB
    assert probe["own_kib"] < LIMIT_MIB * 1024, probe
    assert probe["workers_kib"] < LIMIT_MIB * 1024, probe
