"""`ggaudit rows` on the command line: exact text lines, JSON, exit codes 0 / 1 / 2, escaping."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner, Result
from gguf import GGMLQuantizationType as T

from ggaudit.cli import main
from rows_support import make_table


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["rows", *args])


def test_clean_run_text(tmp_path: Path) -> None:
    t = make_table(tmp_path, T.Q8_0, n_rows=300)
    result = run(t.path, "--ids", "4,100-102", "--random", "5", "--seed", "7", "--cache-rows", "8")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"file {t.path}"
    assert lines[1] == (f"tensor per_layer_token_embd.weight: Q8_0, 160 columns, 170-byte rows, 300 rows at "
                        f"offset {t.tensor.offset}")
    assert lines[2].startswith("rows: 9 (rows 4,100-102 + random 5 seed 7); crossing: 4096-byte page ")
    assert [line.split(" ")[0] for line in lines[3:6]] == ["buffered", "mmap", "direct"]
    assert lines[-1] == ("result: clean: every path delivered the file's bytes; "
                         "the 9 selected rows are finite in the file")


def test_capture_mismatch_text_and_exit_1(tmp_path: Path) -> None:
    t = make_table(tmp_path, T.IQ4_NL, n_rows=5000)
    rows = np.stack([np.frombuffer(t.row(r), np.uint8) for r in (4162, 4170)])
    rows[0, 36:] = 0xA5
    np.savez(tmp_path / "cap.npz", ids=np.array([4162, 4170]), rows=rows)
    result = run(t.path, "--against", str(tmp_path / "cap.npz"))
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    off = t.offset(4162)
    k = next(i for i in range(36, 90) if t.row(4162)[i] != 0xA5)
    at = lines.index("mismatch: capture row 4162 [short-read] (capture)")
    assert lines[at + 1] == f"  file {t.path}, offset {off} (0x{off:x}), length 90"
    assert lines[at + 2].startswith(f"  tensor per_layer_token_embd.weight, row 4162, block {k // 18}, column ")
    assert lines[at + 2].endswith(f"(byte {k} of the row, offset {off + k} (0x{off + k:x}))")
    assert lines[at + 3] == f"  expected: {t.row(4162)[k:k + 16].hex(' ')}"
    assert lines[at + 4] == "  actual:   " + " ".join(["a5"] * len(t.row(4162)[k:k + 16]))
    assert lines[at + 5].startswith(f"  {sum(b != 0xA5 for b in t.row(4162)[36:])} bytes differ; decoded row "
                                    "finite: expected yes, actual ")
    assert lines[at + 6] == f"  poison from offset {off + k} on: the read stopped there"
    assert lines[-1].startswith("result: 1 mismatch (short-read 1), 0 short reads; mismatched rows crossing: ")
    assert "capture" in lines[3] and "2 raw rows (uint8), 1 differ" in lines[3]


def test_json_output(tmp_path: Path) -> None:
    t = make_table(tmp_path, T.IQ4_NL, n_rows=200)
    result = run(t.path, "--ids", "1-3", "--modes", "direct,mmap", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)["models"][0]
    assert (data["ok"], data["rows_checked"], data["modes"], data["mismatches"]) == (True, 3, ["direct", "mmap"], [])
    assert data["tensor"] == "per_layer_token_embd.weight" and data["row_bytes"] == 90
    assert set(data["geometry"]) == {"rows", "page", "sector", "window_64k"}
    assert [s["mode"] for s in data["stats"]] == ["direct", "mmap"]


def test_usage_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    t = make_table(tmp_path, T.IQ4_NL, n_rows=200)
    cases = [
        (["--ids", "199,200"], "ggaudit: error: --ids: row 200 is outside the table (rows 0..199)"),
        (["--ids", "1", "--all"], "ggaudit: error: --all sweeps the whole table; drop --ids"),
        (["--all", "--cache-rows", "8"], "ggaudit: error: --cache-rows: a sweep of all rows reads in large chunks, "
                                         "not through a row cache; use 0 or choose rows"),
        (["--ids", "1", "--modes", "disk"], "ggaudit: error: --modes: unknown read path 'disk'; choose from buffered, "
                                            "mmap, direct"),
        (["--ids", "1", "--workers", "0"], "ggaudit: error: --workers: must be at least 1, not 0"),
        (["--all", "--random", "5", "--page-crossing"], "ggaudit: error: --all sweeps the whole table; drop "
                                                        "--random, --page-crossing"),
        (["--ids", "1", "--random", "0"], "ggaudit: error: --random: must be at least 1, not 0"),
        (["--random", "201"], "ggaudit: error: --random: choose 1..200 rows, not 201"),
        (["--ids", "1", "--fp8"], f"ggaudit: error: {t.path}: per_layer_token_embd.weight: fp8 applies to I8 "
                                  "tables; this one is IQ4_NL"),
        (["--ids", "1", "--modes", ","], "ggaudit: error: --modes needs at least one of buffered,mmap,direct"),
        (["--ids", "1", "--tensor", "x"], f"ggaudit: error: {t.path}: --tensor: no tensor named 'x'"),
        ([], "ggaudit: error: choose rows: --ids, --ids-file, --random N, --page-crossing or --all"),
    ]
    for extra, line in cases:
        result = run(t.path, *extra)
        assert result.exit_code == 2, (extra, result.output)
        assert result.stderr.splitlines() == [line] and result.stdout == ""
    missing = run(str(tmp_path / "nope.gguf"), "--ids", "1")
    assert missing.exit_code == 2 and missing.stderr.startswith("ggaudit: error: ") and "nope.gguf" in missing.stderr


def test_names_are_escaped_in_text_and_exact_in_json(tmp_path: Path) -> None:
    name = "evil\x1b[31m.weight"
    t = make_table(tmp_path, T.Q8_0, n_rows=20, name=name)
    text = run(t.path, "--tensor", name, "--ids", "1", "--modes", "buffered")
    assert text.exit_code == 0 and "\x1b" not in text.stdout
    assert "tensor evil\\x1b[31m.weight: Q8_0" in text.stdout
    js = run(t.path, "--tensor", name, "--ids", "1", "--modes", "buffered", "--json")
    assert json.loads(js.stdout)["models"][0]["tensor"] == name


def test_json_mismatch_fields(tmp_path: Path) -> None:
    t = make_table(tmp_path, T.IQ4_NL, n_rows=300)
    rows = np.stack([np.frombuffer(t.row(r), np.uint8) for r in (7, 8)])
    rows[1] = np.frombuffer(t.row(9), np.uint8)  # row 8 holds row 9's bytes
    np.savez(tmp_path / "cap.npz", ids=np.array([7, 8]), rows=rows)
    result = run(t.path, "--against", str(tmp_path / "cap.npz"), "--json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)["models"][0]
    (m,) = data["mismatches"]
    k = next(i for i in range(90) if t.row(8)[i] != t.row(9)[i])
    assert {key: m[key] for key in ("kind", "mode", "stage", "row", "other_row", "other_offset", "byte", "offset")} \
        == {"kind": "misplaced", "mode": "capture", "stage": "capture", "row": 8, "other_row": 9,
            "other_offset": t.offset(9), "byte": k, "offset": t.offset(8) + k}
    assert m["expected"] == t.row(8)[k:k + 16].hex(" ") and m["actual"] == t.row(9)[k:k + 16].hex(" ")
    assert data["by_kind"] == {"misplaced": 1} and data["ok"] is False
    assert data["capture"] == {"file": str(tmp_path / "cap.npz"), "kind": "raw", "dtype": "uint8", "rows": 2,
                               "mismatched_rows": 1, "max_abs_diff": None}


def test_prefetch_flag_adds_a_stage_and_is_refused_with_all(tmp_path: Path) -> None:
    t = make_table(tmp_path, T.IQ4_NL, n_rows=200)
    result = run(t.path, "--ids", "1-3,150", "--modes", "direct", "--batch", "2", "--prefetch")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[3:5]] == ["direct (gather)", "direct (prefetch)"]
    assert lines[4].startswith("direct (prefetch): 4 rows, 3 reads, ")  # rows 1-2 share one read
    assert lines[-1] == ("result: clean: every path delivered the file's bytes; "
                         "the 4 selected rows are finite in the file")
    refused = run(t.path, "--all", "--prefetch")
    assert refused.exit_code == 2 and refused.stdout == ""
    assert refused.stderr.splitlines() == ["ggaudit: error: --prefetch: a sweep of all rows reads in large chunks, "
                                           "not in prefetched batches; drop it or choose rows"]


#: The note of a run with ggaudit's own row cache and buffer ring (RowsOptions' default factories).
OWN_NOTE = ("note: the cache and prefetch stages ran ggaudit's own row cache and buffer ring: what correct ones "
            "deliver over these read paths on this machine, not the engine's (to run its own: "
            "docs/rows.md#for-engine-developers)")


def test_the_cache_and_prefetch_stages_say_they_ran_ggaudits_own_cache_and_ring(tmp_path: Path) -> None:
    t = make_table(tmp_path, T.IQ4_NL, n_rows=200)
    both = run(t.path, "--ids", "1-3,150", "--modes", "buffered", "--cache-rows", "2", "--prefetch")
    assert both.exit_code == 0, both.output
    assert [line for line in both.stdout.splitlines() if line.startswith("note: ")] == [OWN_NOTE]
    data = json.loads(run(t.path, "--ids", "1-3,150", "--modes", "buffered", "--prefetch", "--json").stdout)
    assert data["models"][0]["exercised"] == {
        "stages": ["prefetch"], "cache": None, "buffer_ring": "ggaudit",
        "text": "the prefetch stage ran ggaudit's own buffer ring: what a correct one delivers over these read "
                "paths on this machine, not the engine's (to run its own: docs/rows.md#for-engine-developers)"}
    # Without those stages (a plain gather, a sweep of every row) nothing is said of a cache or a ring.
    for args in (("--ids", "1-3,150"), ("--all",)):
        plain = run(t.path, *args, "--modes", "buffered")
        assert plain.exit_code == 0 and "note: " not in plain.stdout and "ring" not in plain.stdout, args
        assert json.loads(run(t.path, *args, "--modes", "buffered", "--json").stdout)["models"][0]["exercised"] \
            is None
