"""Each job takes one frozen, keyword-only options object (ScanOptions, VerifyOptions, DiffOptions, RowsOptions);
the keyword arguments are a thin way of writing one; a fleet scan and a local one run the same plan; the
``ggaudit scan`` flags and ScanOptions' fields are the same list (issue 24, item 1)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as T

import ggaudit
from ggaudit.cli import main
from ggaudit.cli.scan import scan as scan_command
from ggaudit.fleet import tasks
from ggaudit.scan.report import ScanStats
from ggaudit.scan.run import plan_scan, report_of
from ggaudit.scan.workers import make_tasks, merge_results
from support import write_small_model

ALL_TYPES = Path(__file__).resolve().parent.parent / "fixtures" / "all_types.gguf"
OPTIONS = [ggaudit.ScanOptions, ggaudit.VerifyOptions, ggaudit.DiffOptions, ggaudit.RowsOptions]
NO_STATS = ScanStats(bytes=0, seconds=0.0, workers=0)


def _nan_model(path: Path) -> Path:
    """A 64 x 64 F32 table whose last element (row 63, column 63) is a quiet NaN."""
    write_small_model(path, ggml_type=T.F32)
    data = bytearray(path.read_bytes())
    data[-4:] = b"\x00\x00\xc0\x7f"
    path.write_bytes(bytes(data))
    return path


def _findings(report: ggaudit.ScanReport) -> list[tuple[str, str, int | None, int | None, str]]:
    return [(t.name, f.kind, f.row, f.column, f.bits) for t in report.tensors for f in t.findings]


# --- the objects ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", OPTIONS, ids=lambda k: k.__name__)
def test_each_options_class_is_frozen_and_keyword_only(kind: type) -> None:
    fields = dataclasses.fields(kind)
    assert fields and all(f.kw_only for f in fields)
    with pytest.raises(TypeError):
        kind(False)
    first = fields[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(kind(), first, getattr(kind(), first))


def test_scan_options_keep_collections_as_tuples_so_equal_asks_are_equal() -> None:
    one = ggaudit.ScanOptions(tensors="types.f*", as_fp8=["types.i8.weight"], hashes=iter(["sha256"]), max_abs=1)
    assert (one.tensors, one.as_fp8, one.hashes, one.max_abs) == (("types.f*",), ("types.i8.weight",),
                                                                  ("sha256",), 1.0)
    assert one == ggaudit.ScanOptions(tensors=("types.f*",), as_fp8=("types.i8.weight",), hashes="sha256",
                                      max_abs=1.0)
    assert hash(one) == hash(dataclasses.replace(one))


@pytest.mark.parametrize("kind, kwargs, message", [
    (ggaudit.ScanOptions, {"limit": 2.5}, "limit: must be an integer, not float"),
    (ggaudit.ScanOptions, {"limit": True}, "limit: must be an integer, not bool"),
    (ggaudit.ScanOptions, {"limit": -1}, "limit: must be >= 0, not -1"),
    (ggaudit.ScanOptions, {"workers": -1}, "workers: must be >= 0, not -1"),
    (ggaudit.ScanOptions, {"max_abs": "1"}, "max_abs: must be a number or None, not str"),
    (ggaudit.ScanOptions, {"max_abs": float("nan")}, "max_abs: must be a finite number >= 0, not nan"),
    (ggaudit.ScanOptions, {"max_abs": -0.5}, "max_abs: must be a finite number >= 0, not -0.5"),
    (ggaudit.ScanOptions, {"deep": 1}, "deep: must be True or False, not int"),
    (ggaudit.ScanOptions, {"anomalies": 0}, "anomalies: must be True or False, not int"),
    (ggaudit.ScanOptions, {"tensors": b"types.*"}, "tensors: must be a string or a collection of them, not bytes"),
    (ggaudit.ScanOptions, {"as_fp8": [b"x"]}, "as_fp8: each item must be a string, not bytes"),
    (ggaudit.ScanOptions, {"hashes": "md5"}, "hashes: unknown digest algorithm 'md5' (known: sha256, xxh3-128)"),
    (ggaudit.ScanOptions, {"hashes": "sha256", "workers": 2},
     "workers: hashes are computed by the one streamed read: workers must be 0 or None"),
    (ggaudit.VerifyOptions, {"manifest": 5}, "manifest: must be a path or None, not int"),
    (ggaudit.VerifyOptions, {"sha256": b"00"}, "sha256: must be a string or None, not bytes"),
    (ggaudit.VerifyOptions, {"fail_fast": "no"}, "fail_fast: must be True or False, not str"),
    (ggaudit.VerifyOptions, {"cache": 1}, "cache: must be True, False or a folder, not int"),
    (ggaudit.VerifyOptions, {"quick": True}, "quick: takes its digests from the cache: not with the cache off"),
    (ggaudit.VerifyOptions, {"manifest": "m.json", "cache": True, "quick": True},
     "quick: checks whole files' cached digests; a manifest's check reads every tensor"),
    (ggaudit.DiffOptions, {"fail_fast": None}, "fail_fast: must be True or False, not NoneType"),
])
def test_an_options_object_refuses_bad_values_as_it_is_made(kind: type, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ggaudit.UsageError) as caught:
        kind(**kwargs)
    assert str(caught.value) == message


# --- the wrappers --------------------------------------------------------------------------------------

def test_scan_keywords_and_scan_options_give_the_same_report(tmp_path: Path) -> None:
    model = _nan_model(tmp_path / "m.gguf")
    by_keywords = ggaudit.scan(model, max_abs=100.0, limit=1, histograms=True, hashes="sha256")
    by_options = ggaudit.scan(model, options=ggaudit.ScanOptions(max_abs=100.0, limit=1, histograms=True,
                                                                 hashes=("sha256",)))
    assert _findings(by_keywords) == [("token_embd.weight", "nan", 63, 63, "0x7fc00000")]
    assert dataclasses.replace(by_keywords, stats=NO_STATS) == dataclasses.replace(by_options, stats=NO_STATS)


def test_verify_and_diff_keywords_and_options_give_the_same_report(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    manifest = tmp_path / "m.json"
    ggaudit.write_manifest(ggaudit.build_manifest(model, group_bytes=68 * 8), manifest)
    copy = tmp_path / "copy.gguf"
    data = bytearray(model.read_bytes())
    data[-68 * 3] ^= 0x01           # a quant byte of row 61: rows 56-63 are its group
    copy.write_bytes(bytes(data))
    by_keywords = ggaudit.verify(copy, manifest=manifest, fail_fast=True)
    by_options = ggaudit.verify(copy, options=ggaudit.VerifyOptions(manifest=manifest, fail_fast=True))
    assert [(m.kind, m.tensor, m.rows) for m in by_keywords.mismatches if m.tensor] == [
        ("tensor-data", "token_embd.weight", (56, 63))]
    assert (by_keywords.mismatches, by_keywords.checked) == (by_options.mismatches, by_options.checked)
    diff_keywords = ggaudit.diff(model, copy, fail_fast=True)
    diff_options = ggaudit.diff(model, copy, options=ggaudit.DiffOptions(fail_fast=True))
    assert [(d.name, d.rows_differing) for d in diff_keywords.data_diffs] == [("token_embd.weight", 1)]
    assert dataclasses.replace(diff_keywords, stats=diff_options.stats) == diff_options


@pytest.mark.parametrize("call, message", [
    (lambda m: ggaudit.scan(m, options=ggaudit.ScanOptions(), limit=1, deep=True),
     "options: given with the keywords deep, limit: give the options in the ScanOptions or as keywords, not both"),
    (lambda m: ggaudit.verify(m, options=ggaudit.VerifyOptions(), manifest="m.json"),
     "options: given with the keywords manifest: give the options in the VerifyOptions or as keywords, not both"),
    (lambda m: ggaudit.diff(m, m, options=ggaudit.DiffOptions(), fail_fast=True),
     "options: given with the keywords fail_fast: give the options in the DiffOptions or as keywords, not both"),
    (lambda m: ggaudit.scan(m, options=ggaudit.DiffOptions()),
     "options: must be a ScanOptions or None, not DiffOptions"),
])
def test_options_and_keywords_at_once_are_refused_naming_the_keywords(call: Any, message: str,
                                                                      tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    with pytest.raises(ggaudit.UsageError) as caught:
        call(model)
    assert str(caught.value) == message


# --- one plan for a local scan and a fleet's ------------------------------------------------------------

def test_the_fleet_plans_with_plan_scan_and_its_pieces_give_the_local_report(tmp_path: Path) -> None:
    """The fleet's first task is plan_scan where the data lives (its files' metadata left behind); its
    byte ranges, scanned and merged in file order as the client does, give the local report."""
    model = _nan_model(tmp_path / "m.gguf")
    options = ggaudit.ScanOptions(max_abs=100.0, limit=3)
    local_plan = plan_scan(ggaudit.open_model(model), options)
    planned = tasks.plan_model(str(model), options, None)
    assert planned.plan == dataclasses.replace(local_plan, model=tasks.without_metadata(local_plan.model))
    assert [f.metadata for f in planned.plan.model.files] == [{}]
    identities = {f.path: f.identity for f in planned.plan.model.files}
    pieces = list(make_tasks(planned.plan.plans, identities, 4096))
    assert len(pieces) == 4         # 16 KiB of F32 in 4 KiB tasks: the merge is exercised
    accs: dict[int, Any] = {}
    for piece in pieces:
        merge_results(accs, tasks.scan_range(piece, options.kernel), options.kernel)
    fleet = report_of(planned.plan, accs, NO_STATS, planned.structure)
    local = ggaudit.scan(model, options=options)
    assert dataclasses.replace(local, stats=NO_STATS) == fleet
    assert _findings(fleet) == [("token_embd.weight", "nan", 63, 63, "0x7fc00000")]


def test_the_fleet_refuses_what_it_cannot_do_in_one_place() -> None:
    from ggaudit.fleet import on_fleet

    assert on_fleet(ggaudit.ScanOptions(deep=True)) == ggaudit.ScanOptions(deep=True)
    with pytest.raises(ggaudit.UsageError) as caught:
        on_fleet(ggaudit.ScanOptions(anomalies=True))
    assert str(caught.value) == "anomalies: reads blocks again where the results are merged: not on a Dask cluster"
    with pytest.raises(ggaudit.UsageError) as caught:
        on_fleet(ggaudit.ScanOptions(workers=0))
    assert str(caught.value) == "workers: the cluster's workers are the readers: not on a Dask cluster"


# --- ggaudit scan's flags are ScanOptions' fields ------------------------------------------------------

#: Each ScanOptions field and the ``ggaudit scan`` flag that sets it (histograms: ``--format html``).
SCAN_FLAGS = {"tensors": "--tensor", "deep": "--deep", "max_abs": "--max-abs", "as_fp8": "--as", "limit": "--limit",
              "fail_fast": "--fail-fast", "workers": "--workers", "hashes": "--sha256", "histograms": "--format",
              "anomalies": "--anomalies"}
#: The flags of ``ggaudit scan`` that say what to scan, how many at once and where, how to report it and what fails.
RUN_FLAGS = {"--store", "--jobs", "--dask", "--json", "--output", "--quiet", "--fail-on"}


def test_every_scan_option_is_a_flag_of_ggaudit_scan_and_every_flag_an_option_or_the_run_s() -> None:
    assert set(SCAN_FLAGS) == {f.name for f in dataclasses.fields(ggaudit.ScanOptions)}
    flags = {max(p.opts, key=len) for p in scan_command.params if p.param_type_name == "option"}
    assert flags - RUN_FLAGS == set(SCAN_FLAGS.values())
    assert flags >= RUN_FLAGS


def test_ggaudit_scan_passes_its_flags_as_the_options_object(tmp_path: Path) -> None:
    model = _nan_model(tmp_path / "m.gguf")
    result = CliRunner().invoke(main, ["scan", "--tensor", "token_*", "--max-abs", "0.5", "--limit", "2",
                                       "--deep", "--sha256", "--workers", "0", "--json", str(model)])
    assert result.exit_code == 1, result.output
    options = ggaudit.ScanOptions(tensors="token_*", max_abs=0.5, limit=2, deep=True, hashes="sha256", workers=0)
    want = ggaudit.scan(model, options=options).to_json()
    got = json.loads(result.output)["models"][0]
    assert (got["tensors"], got["digests"], got["max_abs_threshold"]) == (want["tensors"], want["digests"], 0.5)
    assert len(got["tensors"][0]["findings"]) == 2
