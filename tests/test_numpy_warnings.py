"""numpy's floating-point warnings never reach stderr (issue 23, item 7).

A row, a capture or a file that decodes to NaN or Inf is what ggaudit looks for: it is a finding in the
report, and numpy's ``RuntimeWarning: invalid value encountered in multiply`` (gguf.quants' ``d * q`` with
d = +Inf and q = 0) or ``overflow encountered in cast`` on stderr is noise a CI log shows as a problem
of the tool. Checked through the command line in a subprocess: the warnings print only there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T

from ggaudit.format.build import TensorSpec, write_gguf
from rows_support import table_bytes

TABLE = "token_embd.weight"
#: Q8_0: 256 columns, 8 blocks of 34 bytes a row (f16 d @0, then 32 int8 quants).
COLS, ROWS, ROW_BYTES = 256, 8, 8 * 34
F16_INF = b"\x00\x7c"


def _ggaudit(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ggaudit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def _q8_model(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    write_gguf(path, [TensorSpec(TABLE, T.Q8_0, (COLS, ROWS), data)], {"general.architecture": "llama"})
    return path


def _inf_times_zero(row: bytes) -> bytes:
    """``row`` with its first block's scale +Inf and its first quant 0: gguf.quants decodes Inf x 0 (NaN)."""
    return F16_INF + b"\0" + row[3:]


def test_a_delivered_row_that_decodes_to_nan_is_a_finding_without_a_numpy_warning(tmp_path: Path) -> None:
    data = table_bytes(T.Q8_0, COLS, ROWS)
    model = _q8_model(tmp_path, "model.gguf", data)
    rows = np.frombuffer(data, np.uint8).reshape(ROWS, ROW_BYTES)
    delivered = rows[[2, 3]].copy()
    delivered[1] = np.frombuffer(_inf_times_zero(delivered[1].tobytes()), np.uint8)
    np.savez(tmp_path / "capture.npz", ids=np.array([2, 3]), rows=delivered)
    proc = _ggaudit("rows", model, "--against", "capture.npz", "--json", cwd=tmp_path)
    assert "RuntimeWarning" not in proc.stderr and proc.stderr == "", proc.stderr
    (mismatch,) = json.loads(proc.stdout)["models"][0]["mismatches"]
    assert (proc.returncode, mismatch["row"], mismatch["offset"], mismatch["actual_finite"]) == \
        (1, 3, model.stat().st_size - len(data) + 3 * ROW_BYTES + 1, False)


def test_a_decoded_capture_beyond_its_type_is_compared_without_a_numpy_warning(tmp_path: Path) -> None:
    # An f32 table of 1e10: cast to the capture's float16 for the comparison, it is +Inf (as an engine's
    # cast would give), which numpy reports as "overflow encountered in cast".
    values = np.full((ROWS, 64), 1e10, np.float32)
    model = tmp_path / "model.gguf"
    write_gguf(model, [TensorSpec(TABLE, T.F32, (64, ROWS), values.tobytes())], {"general.architecture": "llama"})
    np.savez(tmp_path / "capture.npz", ids=np.array([1, 2]), rows=np.ones((2, 64), np.float16))
    proc = _ggaudit("rows", model, "--against", "capture.npz", "--json", cwd=tmp_path)
    assert "RuntimeWarning" not in proc.stderr and proc.stderr == "", proc.stderr
    mismatches = json.loads(proc.stdout)["models"][0]["mismatches"]
    assert (proc.returncode, [m["row"] for m in mismatches], mismatches[0]["expected"]) == (1, [1, 2], "7c00")


def test_diff_of_a_block_that_decodes_to_nan_against_a_finite_one_warns_nothing(tmp_path: Path) -> None:
    # Both files' first block has d = +Inf; A's first quant is 0 (decodes to NaN), B's is not: the scale
    # is the same, so diff decodes the blocks to show the differing value.
    finite = table_bytes(T.Q8_0, COLS, ROWS)
    a = _q8_model(tmp_path, "a.gguf", _inf_times_zero(finite))
    b = _q8_model(tmp_path, "b.gguf", F16_INF + b"\x05" + finite[3:])
    proc = _ggaudit("diff", a, b, "--json", cwd=tmp_path)
    assert "RuntimeWarning" not in proc.stderr and proc.stderr == "", proc.stderr
    (data_diff,) = json.loads(proc.stdout)["models"][0]["data_diffs"]
    (change,) = data_diff["first"]["changes"]
    assert (proc.returncode, data_diff["first"]["row"], change["what"], change["column"], change["a"], change["b"]) \
        == (1, 0, "decoded", 0, "nan", "+inf")
