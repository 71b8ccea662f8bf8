"""Load (issue 6): several models at once, and `rows` with many workers and big batches.

* ``ggaudit.outcomes.run_models`` audits several models (optionally ``jobs`` at a time): each model's
  report or error comes back, in the order given, and one failure never loses the others; the exit
  status is 2 if any failed, else 1 if any has findings, else 0.
* ``cli.reporters.emit_outcomes`` renders them: a test command wired exactly as scan/verify should be.
* ``rows`` with 16 workers and 2048-row batches over a 13 MB table keeps its traced memory far below
  the table's size and gives identical results on repeated runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import time
import tracemalloc
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as T

from ggaudit.outcomes import overall_status, run_models
from ggaudit.format.build import encode_kv, encode_tensor_info
from ggaudit.cli.common import handle_errors
from ggaudit.cli.reporters import Rendering, emit_outcomes
from ggaudit.errors import FormatError, ReadError
from ggaudit.format.layout import open_model
from ggaudit.rows.replay import rows_geometry, table_geometry
from ggaudit.rows.table import RowTable
from ggaudit.rows.select import RowSelection, select_rows
from ggaudit.scan.run import scan
from ggaudit.verify.walk.sums import verify_blob

from support import FIXTURES, fixture_files, write_small_model


@pytest.fixture()
def models(tmp_path: Path) -> dict[str, Path]:
    """A clean model, one with a NaN, a missing one, a truncated one, and another clean one."""
    clean = shutil.copy(FIXTURES / "ple_q8_0.gguf", tmp_path / "clean.gguf")
    nan = shutil.copy(FIXTURES / "all_types-f32-nan.gguf", tmp_path / "nan.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes((FIXTURES / "all_types.gguf").read_bytes()[:5000])
    other = shutil.copy(FIXTURES / "all_types.gguf", tmp_path / "other.gguf")
    return {"clean": Path(clean), "nan": Path(nan), "missing": tmp_path / "missing.gguf", "cut": cut,
            "other": Path(other)}


def _scan(model: str) -> Any:
    return scan(model, workers=0)


@pytest.mark.parametrize("jobs", [1, 3])
def test_scan_of_several_models_keeps_every_result_in_order(models: dict[str, Path], jobs: int) -> None:
    order = ["clean", "nan", "missing", "cut", "other"]
    outcomes = run_models([str(models[k]) for k in order], _scan, jobs=jobs)
    assert [o.model for o in outcomes] == [str(models[k]) for k in order]
    by = dict(zip(order, outcomes, strict=False))
    assert by["clean"].ok and by["clean"].result.ok
    assert by["other"].ok and by["other"].result.ok
    nan_tensor = next(t for t in by["nan"].result.tensors if t.findings)
    assert (nan_tensor.name, nan_tensor.findings[0].row, nan_tensor.findings[0].column,
            nan_tensor.findings[0].offset) == ("types.f32.weight", 3, 100, 9744)
    assert isinstance(by["missing"].error, ReadError) and by["missing"].error.path == str(models["missing"])
    assert isinstance(by["cut"].error, FormatError) and by["cut"].error.path == str(models["cut"])
    assert overall_status(outcomes) == 2
    assert overall_status([by["clean"], by["nan"]]) == 1
    assert overall_status([by["clean"], by["other"]]) == 0


def test_jobs_give_the_same_reports_as_one_at_a_time(models: dict[str, Path]) -> None:
    paths = [str(p) for k, p in models.items() if k not in ("missing", "cut")] * 2
    serial = run_models(paths, _scan, jobs=1)
    parallel = run_models(paths, _scan, jobs=4)
    strip = lambda o: {k: v for k, v in o.result.to_json().items() if k != "stats"}  # noqa: E731
    assert [strip(o) for o in serial] == [strip(o) for o in parallel]


def test_a_bug_in_one_model_is_not_swallowed(models: dict[str, Path]) -> None:
    def audit(model: str) -> None:
        raise KeyError(model)     # not an input problem: must surface, not become an "error" outcome

    with pytest.raises(KeyError):
        run_models([str(models["clean"])], audit)


@pytest.fixture()
def blobs(tmp_path: Path) -> list[Path]:
    """Ollama-style blobs named by their sha256: two good, one corrupted, one missing."""
    out = []
    for i, source in enumerate(fixture_files()[:3]):
        data = source.read_bytes()
        blob = tmp_path / f"sha256-{hashlib.sha256(data).hexdigest()}"
        blob.write_bytes(data if i != 1 else data[:-1] + bytes([data[-1] ^ 1]))
        out.append(blob)
    out.append(tmp_path / ("sha256-" + "ab" * 32))
    return out


@pytest.mark.parametrize("jobs", [1, 4])
def test_verify_of_several_blobs_reports_each(blobs: list[Path], jobs: int) -> None:
    outcomes = run_models([str(b) for b in blobs], verify_blob, jobs=jobs)
    assert [o.ok for o in outcomes] == [True, True, True, True]      # a missing blob is a finding here
    assert [o.result.ok for o in outcomes] == [True, False, True, False]
    assert outcomes[1].result.mismatches[0].kind == "sha256"
    assert outcomes[3].result.mismatches[0].kind == "missing"
    assert overall_status(outcomes) == 1


# --- the CLI side, wired the way scan/verify should wire it -----------------------------------------

@click.command()
@click.argument("models", nargs=-1, required=True)
@click.option("--jobs", type=click.IntRange(min=1), default=1)
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def multi_scan(models: tuple[str, ...], jobs: int, as_json: bool) -> None:
    outcomes = run_models(list(models), lambda m: scan(m, workers=0 if jobs > 1 else None), jobs=jobs)
    raise SystemExit(emit_outcomes(outcomes, Rendering(fmt="json" if as_json else "text")))


def _invoke(*args: object) -> Any:
    return CliRunner().invoke(multi_scan, [str(a) for a in args])


def test_cli_several_models_text(models: dict[str, Path]) -> None:
    result = _invoke(models["clean"], models["missing"], models["nan"], models["cut"], "--jobs", 2)
    assert result.exit_code == 2, result.output + result.stderr
    errors = result.stderr.splitlines()
    assert len(errors) == 2
    assert errors[0].startswith(f"ggaudit: error: {models['missing']}: ")
    assert errors[1].startswith(f"ggaudit: error: {models['cut']}: offset ")
    single_clean = _invoke(models["clean"])
    single_nan = _invoke(models["nan"])
    assert (single_clean.exit_code, single_nan.exit_code) == (0, 1)
    # Each report appears whole, in order: exactly what scanning that model alone prints; then the count.
    assert result.stdout == (single_clean.stdout + single_nan.stdout
                             + "4 models: 1 with findings, 1 clean, 2 errors\n")


def test_cli_several_models_json(models: dict[str, Path]) -> None:
    result = _invoke(models["nan"], models["missing"], models["other"], "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert (doc["schema"], doc["status"]) == ("ggaudit/cli-output/1", "error")
    assert [m.get("ok") for m in doc["models"]] == [False, None, True]
    assert doc["models"][1] == {"target": str(models["missing"]), "error": {
        "message": f"{models['missing']}: cannot open: No such file or directory", "path": str(models["missing"]),
        "offset": None, "field": None, "kind": "ReadError"}}
    assert [m.get("model") for m in doc["models"]] == [str(models["nan"]), None, str(models["other"])]
    # The error is also its one line on stderr, as without --json.
    assert result.stderr == f"ggaudit: error: {models['missing']}: cannot open: No such file or directory\n"
    only = _invoke(models["other"], models["clean"], "--json")
    assert only.exit_code == 0 and json.loads(only.stdout)["status"] == "clean"


def test_cli_one_model_is_the_same_document(models: dict[str, Path]) -> None:
    """A single MODEL prints the same envelope as several, and a single error is the usual one line."""
    result = _invoke(models["nan"], "--json")
    doc = json.loads(result.stdout)
    assert result.exit_code == 1 and doc["status"] == "findings" and len(doc["models"]) == 1
    among = json.loads(_invoke(models["nan"], models["clean"], "--json").stdout)["models"][0]
    assert {**doc["models"][0], "stats": None} == {**among, "stats": None}     # the time taken differs
    failed = _invoke(models["missing"])
    assert failed.exit_code == 2 and failed.stderr.count("\n") == 1 and failed.output == failed.stderr
    failed_json = _invoke(models["missing"], "--json")
    assert (failed_json.exit_code, failed_json.stderr) == (2, failed.stderr)
    assert [m["target"] for m in json.loads(failed_json.stdout)["models"]] == [str(models["missing"])]


def _real_cli_takes_several(command: str) -> bool:
    from ggaudit.cli import main

    params = main.commands[command].params
    return any(isinstance(p, click.Argument) and p.nargs == -1 for p in params)


@pytest.mark.parametrize("command", ["scan", "verify"])
def test_real_cli_reports_each_of_several_models(command: str, models: dict[str, Path], blobs: list[Path]) -> None:
    assert _real_cli_takes_several(command), f"`ggaudit {command}` takes one MODEL"
    from ggaudit.cli import main

    # scan: a clean model, a missing one, one with a NaN. verify: blobs (good, corrupt, good, missing)
    # and a file whose name holds no digest (a usage error for that one target only).
    args = [models["clean"], models["missing"], models["nan"]] if command == "scan" else [*blobs, models["clean"]]
    failing = models["missing"] if command == "scan" else models["clean"]
    result = CliRunner().invoke(main, [command, *map(str, args), "--jobs", "2"])
    assert result.exit_code == 2, result.output + result.stderr
    errors = result.stderr.splitlines()
    assert len(errors) == 1 and errors[0].startswith(f"ggaudit: error: {failing}"), result.stderr
    if command == "scan":
        assert "nan at file" in result.stdout and f"model {models['clean']}:" in result.stdout
    else:
        assert "MISMATCH sha256:" in result.stdout and "MISMATCH missing:" in result.stdout


# --- rows under load ----------------------------------------------------------------------------------

@pytest.mark.scale
def test_rows_many_workers_big_batches_bounded_and_repeatable(tmp_path: Path) -> None:
    from ggaudit.rows.replay import RowSelection, RowsOptions, check_rows

    path = write_small_model(tmp_path / "big.gguf", name="per_layer_token_embd.weight", rows=200_000,
                             ggml_type=T.Q8_0)
    size = path.stat().st_size

    def run() -> dict[str, Any]:
        report = check_rows(path, select=RowSelection(random=3000, seed=7),
                            options=RowsOptions(workers=16, batch=2048, cache_rows=512))
        out = report.to_json()
        for stats in out["stats"]:
            stats.pop("seconds")
            stats.pop("buffers")     # how many pooled buffers the threads happened to need
        return out

    started = time.perf_counter()
    first = run()
    assert time.perf_counter() - started < 60
    tracemalloc.start()
    second = run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert first["ok"] and first["rows_checked"] == 3000
    assert {s["mode"] for s in first["stats"]} == {"buffered", "mmap", "direct"}
    assert first == second
    # Rows live in pooled, reused buffers: memory is a small fraction of the 13 MB table.
    assert peak < size // 2 and peak < 24 << 20, (peak, size)


def test_page_crossing_rows_of_a_54_gb_table_take_little_memory_and_time(tmp_path: Path) -> None:
    """The issue's scale: a PLE table of 600M 90-byte rows (a sparse file). Its 12.9M page-crossing rows
    are chosen as int64 and counted from the 13M page boundaries, not the 600M rows: this took 15 s and
    1.5 GB (a dict and tuples of Python ints) before."""
    n_rows, path = 600_000_000, tmp_path / "ple-54gb-sparse.gguf"
    header = b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + encode_kv("general.architecture", "gemma3n")
    header += encode_tensor_info("per_layer_token_embd.weight", T.IQ4_NL, (160, n_rows), 0)
    header += bytes(-len(header) % 32)
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(len(header) + n_rows * 90)
    table = RowTable(open_model(path).tensor("per_layer_token_embd.weight"), os.path.getsize(path))
    tracemalloc.start()
    started = time.perf_counter()
    try:
        selection = select_rows(table, select=RowSelection(page_crossing=True))
        geometry = rows_geometry(table, selection.rows)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    elapsed = time.perf_counter() - started
    n = selection.rows.size
    # Page boundary k * 4096 falls inside a row unless a row starts there; which k those are repeats
    # every 45 boundaries (45 * 4096 is a multiple of 90), so count one period and the remainder.
    h, boundaries = len(header), (len(header) + n_rows * 90 - 1) // 4096
    full, rest = divmod(boundaries, 45)
    starts = sum((full + (k <= rest)) for k in range(1, 46) if (k * 4096 - h) % 90 == 0)
    assert n == boundaries - starts == geometry.page
    assert table_geometry(table).page == n
    assert peak < 40 * n and elapsed < 10, (peak / n, elapsed)
