"""ggaudit.fleet (issue 16): scans and manifests on a Dask cluster are the reports and manifests a local run
gives, whatever the task size, with errors kept per model and a worker killed mid-run made good."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

distributed = pytest.importorskip("distributed")

from ggaudit.outcomes import Outcome, run_models  # noqa: E402
from ggaudit.errors import ReadError  # noqa: E402
from ggaudit.fleet import manifest_on, scan_on  # noqa: E402
from ggaudit.fleet import run as fleet_run  # noqa: E402
from ggaudit.scan.report import ScanReport, ScanStats  # noqa: E402
from ggaudit.scan.run import scan  # noqa: E402
from ggaudit.verify.manifests.tensor import build_tensor_manifest, tensor_manifest_text  # noqa: E402

from platforms import needs_posix_signals  # noqa: E402
from support import run_cli  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MODELS = sorted(str(p) for p in FIXTURES.glob("*.gguf"))
F32_AT, F64_AT, Q8_0_AT = 3200, 35968, 140928     # offsets of three tensors of all_types.gguf


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """Two worker threads in this process: every task runs the worker code, with nothing to start."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") \
            as cluster, distributed.Client(cluster) as c:
        yield c


@pytest.fixture
def poisoned(tmp_path: Path) -> str:
    """all_types.gguf with non-finite values in three tensors, two of them in its first and last rows."""
    path = tmp_path / "poisoned.gguf"
    shutil.copyfile(FIXTURES / "all_types.gguf", path)
    with open(path, "r+b") as f:
        for offset, bits in [(F32_AT + 5 * 4, b"\x00\x00\xc0\x7f"),                    # row 0, column 5: nan
                             (F32_AT + (7 * 512 + 500) * 4, b"\x00\x00\x80\x7f"),      # row 7, column 500: +inf
                             (F64_AT + (4 * 512 + 10) * 8, b"\x00" * 6 + b"\xf0\xff"),  # row 4, column 10: -inf
                             (Q8_0_AT + 17 * 34, b"\x00\x7e")]:                         # row 1, block 1's d: nan
            f.seek(offset)
            f.write(bits)
    return str(path)


def unstated(report: ScanReport | None, stopped: bool = False) -> ScanReport:
    """The report without its timings and reader count, which are the run's, not the model's; when a
    --fail-fast run ``stopped``, without each tensor's largest value too: that covers what was read before
    the stop, a task's bytes here and a stream's chunk locally (as locally with worker processes)."""
    assert report is not None
    if stopped:
        report = dataclasses.replace(report, tensors=tuple(dataclasses.replace(t, max_abs=None)
                                                           for t in report.tensors))
    return dataclasses.replace(report, stats=ScanStats(bytes=report.stats.bytes, seconds=0.0, workers=0))


def assert_alike(fleet: list[Outcome[Any]], local: list[Outcome[Any]], seen: Callable[[Any], Any]) -> None:
    """The same models in the same order, the same errors, and reports equal as ``seen`` shows them."""
    assert [o.model for o in fleet] == [o.model for o in local]
    for got, want in zip(fleet, local, strict=True):
        if want.error is not None:
            assert type(got.error) is type(want.error) and str(got.error) == str(want.error)
        else:
            assert got.error is None, got.error
            assert seen(got.result) == seen(want.result), got.model


def assert_same(fleet: list[Outcome[ScanReport]], local: list[Outcome[ScanReport]], stopped: bool = False) -> None:
    assert_alike(fleet, local, lambda report: unstated(report, stopped))


def local_scans(models: list[str], **options: Any) -> list[Outcome[ScanReport]]:
    return run_models(models, lambda m: scan(m, workers=0, **options))


@pytest.mark.parametrize("task_bytes", [64 << 20, 4096])
def test_a_folder_scans_as_it_does_locally_a_missing_file_kept_apart(client: Any, task_bytes: int) -> None:
    models = [*MODELS, str(FIXTURES / "absent.gguf")]
    fleet = scan_on(client, models, task_bytes=task_bytes)
    assert_same(fleet, local_scans(models))
    assert fleet[-1].error is not None and "No such file" in str(fleet[-1].error)
    # The split set is a fragment of a llama (most of its layer's tensors absent): llama.cpp's loader refuses it.
    assert [os.path.basename(o.model) for o in fleet if o.result is not None and not o.result.ok] == [
        "all_types-f32-nan.gguf", "all_types-mxfp4-nan.gguf", "all_types-q4_k-inf.gguf",
        "split-00001-of-00002.gguf", "split-00002-of-00002.gguf"]


@pytest.mark.parametrize("options", [{}, {"limit": 1}, {"fail_fast": True}, {"max_abs": 0.5, "limit": 3},
                                     {"tensors": ["types.f*"], "histograms": True}, {"hashes": ("sha256",)}])
def test_findings_in_several_tasks_of_one_file_merge_in_file_order(client: Any, poisoned: str,
                                                                   options: dict[str, Any]) -> None:
    fleet = scan_on(client, [poisoned], task_bytes=4096, **options)
    assert_same(fleet, local_scans([poisoned], **options), stopped=bool(options.get("fail_fast")))
    report = fleet[0].result
    assert report is not None
    found = [(t.name, f.row, f.column, f.kind) for t in report.tensors for f in t.findings if f.kind != "outlier"]
    if options.get("fail_fast"):
        assert found == [("types.f32.weight", 0, 5, "nan")] and not report.complete
    elif options.get("limit") == 1:
        assert found == [("types.f32.weight", 0, 5, "nan"), ("types.f64.weight", 4, 10, "-inf"),
                         ("types.q8_0.weight", 1, 32, "nan")]
        assert report.counts["+inf"] == 1       # counted, not listed: beyond the limit
    elif not options:
        assert found == [("types.f32.weight", 0, 5, "nan"), ("types.f32.weight", 7, 500, "+inf"),
                         ("types.f64.weight", 4, 10, "-inf"), ("types.q8_0.weight", 1, 32, "nan")]


def test_one_string_is_one_model_pattern_or_name_on_the_cluster(client: Any, poisoned: str) -> None:
    # As for ggaudit.scan (issue 23, item 7): a str is one item, never its letters.
    assert_same(scan_on(client, poisoned, tensors="types.f*", hashes="sha256"),
                local_scans([poisoned], tensors=["types.f*"], hashes=["sha256"]))
    assert_same(scan_on(client, poisoned, tensors="types.i8*", as_fp8="types.i8.weight"),
                local_scans([poisoned], tensors=["types.i8*"], as_fp8=["types.i8.weight"]))
    assert [o.model for o in manifest_on(client, poisoned)] == [poisoned]


def test_options_or_their_keywords_give_the_same_run_and_both_at_once_are_refused(client: Any, poisoned: str) -> None:
    """The fleet's options are typed keyword parameters (issue 36): an options object or the same fields as
    keywords give the same reports; both at once, or an option the cluster refuses, are refused before a task
    is submitted: a UsageError in an options object, and no parameter to give it by (Python's TypeError)."""
    from ggaudit.check.options import CheckOptions
    from ggaudit.errors import UsageError
    from ggaudit.fleet import check_on, verify_on
    from ggaudit.scan.options import ScanOptions
    from ggaudit.verify.options import VerifyOptions

    by_keywords = scan_on(client, poisoned, tensors="types.f*", limit=1, task_bytes=4096)
    by_options = scan_on(client, poisoned, options=ScanOptions(tensors="types.f*", limit=1), task_bytes=4096)
    assert_same(by_options, by_keywords)
    assert by_options[0].result is not None
    assert [(t.name, f.row, f.column, f.kind) for t in by_options[0].result.tensors for f in t.findings] == [
        ("types.f32.weight", 0, 5, "nan"), ("types.f64.weight", 4, 10, "-inf")]
    refusals: list[tuple[Callable[[], object], str]] = [
        (lambda: scan_on(client, poisoned, options=ScanOptions(), limit=1),
         "options: given with the keywords limit: give the options in the ScanOptions or as keywords, not both"),
        (lambda: verify_on(client, poisoned, options=VerifyOptions(), fail_fast=True),
         "options: given with the keywords fail_fast: give the options in the VerifyOptions or as keywords, not "
         "both"),
        (lambda: check_on(client, poisoned, options=CheckOptions(), modes="mmap", evict=False),
         "options: given with the keywords evict, modes: give the options in the CheckOptions or as keywords, "
         "not both"),
        (lambda: scan_on(client, poisoned, options=ScanOptions(workers=2)),
         "workers: the cluster's workers are the readers: not on a Dask cluster"),
        (lambda: check_on(client, poisoned, options=CheckOptions(anomalies=True)),
         "anomalies: reads blocks again where the results are merged: not on a Dask cluster")]
    with distributed.get_task_stream(client) as stream:
        for call, message in refusals:
            with pytest.raises(UsageError) as caught:
                call()
            assert str(caught.value) == message
        with pytest.raises(TypeError, match=r"scan_on\(\) got an unexpected keyword argument 'anomalies'"):
            scan_on(client, poisoned, anomalies=True)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"check_on\(\) got an unexpected keyword argument 'anomalies'"):
            check_on(client, poisoned, anomalies=True)  # type: ignore[call-arg]
    assert stream.data == []


def test_manifests_are_byte_identical_and_a_bad_file_is_its_own_error(client: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 8)
    models = [str(FIXTURES / "split-00002-of-00002.gguf"), str(bad), str(FIXTURES / "all_types.gguf"),
              str(FIXTURES / "ple_q8_0.gguf")]
    fleet = manifest_on(client, models, group_bytes=4096)
    assert fleet[1].error is not None and fleet[1].result is None
    for outcome, model in zip(fleet, models, strict=True):
        if model != str(bad):
            assert outcome.result is not None
            want = tensor_manifest_text(build_tensor_manifest(model, group_bytes=4096))
            assert tensor_manifest_text(outcome.result) == want
    assert [f.name for f in fleet[0].result.files] == ["split-00001-of-00002.gguf", "split-00002-of-00002.gguf"]


def test_a_file_changed_between_planning_and_reading_is_reported_so(client: Any, poisoned: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real = fleet_run.plan_model

    def then_append(target: str, options: Any, store: Any) -> Any:
        planned = real(target, options, store)
        if target == poisoned:          # never a fixture: they are read-only
            with open(target, "ab") as f:
                f.write(b"\0" * 32)
        return planned

    monkeypatch.setattr(fleet_run, "plan_model", then_append)
    outcome = scan_on(client, [poisoned, MODELS[0]], task_bytes=4096)
    assert isinstance(outcome[0].error, ReadError)
    assert str(outcome[0].error).startswith(f"{poisoned}: file changed during scan (replaced, resized or "
                                            "rewritten: size 186688 -> 186720")
    assert outcome[1].result is not None


def test_cli_scan_and_manifest_on_a_scheduler_by_address(client: Any, poisoned: str) -> None:
    address = client.scheduler.address
    local = run_cli(["scan", poisoned, MODELS[0]])
    fleet = run_cli(["scan", "--dask", address, poisoned, MODELS[0]])
    assert (fleet.exit_code, fleet.output) == (1, local.output)
    wanted = run_cli(["manifest", MODELS[0], "-o", "-"])
    got = run_cli(["manifest", "--dask", address, MODELS[0], "-o", "-"])
    assert (got.exit_code, got.output) == (0, wanted.output)


def test_cli_scan_on_a_local_cluster_of_its_own(poisoned: str) -> None:
    # --dask local:N starts N worker processes for the run and stops them with it: the report is the
    # local one, and no worker outlives the command.
    local = run_cli(["scan", poisoned, MODELS[0]])
    before = _children()
    fleet = run_cli(["scan", "--dask", "local:1", poisoned, MODELS[0]])
    assert (fleet.exit_code, fleet.output) == (1, local.output)
    deadline = time.monotonic() + 10
    while _children() - before and time.monotonic() < deadline:     # a worker may take a moment to exit
        time.sleep(0.1)
    assert _children() - before == set()
    wanted = run_cli(["manifest", MODELS[0], "-o", "-"])
    got = run_cli(["manifest", "--dask", "local:1", MODELS[0], "-o", "-"])
    assert (got.exit_code, got.output) == (0, wanted.output)


def _children() -> set[int]:
    """This process's live child processes but multiprocessing's resource tracker, which a process keeps
    once it has started one (Linux: from /proc; elsewhere nothing is known)."""
    found = set()
    for entry in Path("/proc").glob("[0-9]*/stat") if Path("/proc/self/stat").exists() else ():
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
            tracker = b"resource_tracker" in (entry.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and not tracker:
            found.add(int(entry.parent.name))
    return found


def test_cli_dask_refuses_a_bad_local_count_and_llama_hash() -> None:
    result = run_cli(["scan", "--dask", "local:0", MODELS[0]])
    assert result.exit_code == 2 and "local:N takes a number of workers >= 1, not '0'" in result.stderr
    result = run_cli(["manifest", "--dask", "local", "--manifest-format", "llama-gguf-hash", MODELS[0], "-o", "-"])
    assert result.exit_code == 2 and "--dask builds the ggaudit manifest, not llama-gguf-hash" in result.stderr
    for extra in (["--workers", "0"], ["--jobs", "2"]):
        result = run_cli(["scan", "--dask", "local", *extra, MODELS[0]])
        assert result.exit_code == 2
        assert "--dask reads on the cluster's workers: not with --workers or --jobs" in result.stderr


@needs_posix_signals
@pytest.mark.scale
def test_a_worker_killed_mid_run_leaves_the_report_complete(poisoned: str) -> None:
    models = [poisoned, *MODELS]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=50) as cluster, distributed.Client(cluster) as c:
        pids = c.run(os.getpid)
        killed: list[str] = []

        def kill_a_busy_worker() -> None:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                busy = [w for w, keys in c.processing().items() if any("scan_range" in k for k in keys)]
                if busy:
                    os.kill(pids[busy[0]], signal.SIGKILL)
                    killed.append(busy[0])
                    return
                time.sleep(0.005)

        killer = threading.Thread(target=kill_a_busy_worker)
        killer.start()
        fleet = scan_on(c, models, task_bytes=2048)
        killer.join()
    assert killed, "no worker was busy to be killed"
    assert_same(fleet, local_scans(models))


def test_verify_on_the_cluster_is_the_local_verify(client: Any, poisoned: str, tmp_path: Path) -> None:
    from ggaudit.fleet import verify_on
    from ggaudit.verify.dispatch import verify

    manifest = tmp_path / "all_types.manifest.json"
    assert run_cli(["manifest", str(FIXTURES / "all_types.gguf"), "-o", str(manifest)]).exit_code == 0
    targets = [str(FIXTURES / "all_types.gguf"), poisoned, str(tmp_path / "absent.gguf"), str(tmp_path)]
    fleet = verify_on(client, targets, manifest=str(manifest))
    assert [o.model for o in fleet] == targets
    local = [verify(t, manifest=str(manifest)) for t in targets[:3]]
    for got, wanted in zip(fleet[:3], local, strict=True):
        assert got.result is not None
        assert (got.result.ok, got.result.mismatches, got.result.checked) == (wanted.ok, wanted.mismatches,
                                                                                wanted.checked)
    assert fleet[0].result is not None and fleet[0].result.ok
    assert fleet[1].result is not None and {m.tensor for m in fleet[1].result.mismatches} >= {
        "types.f32.weight", "types.f64.weight", "types.q8_0.weight"}
    assert fleet[2].result is not None and [m.kind for m in fleet[2].result.mismatches] == ["missing"]
    assert fleet[3].result is None and isinstance(fleet[3].error, ReadError)
    assert str(fleet[3].error) == f"{tmp_path}: is a directory"


def test_cli_verify_on_dask_prints_the_local_report(client: Any, poisoned: str, tmp_path: Path) -> None:
    address = client.scheduler.address
    manifest = tmp_path / "m.json"
    assert run_cli(["manifest", str(FIXTURES / "all_types.gguf"), "-o", str(manifest)]).exit_code == 0
    args = ["verify", poisoned, str(FIXTURES / "all_types.gguf"), "--manifest", str(manifest), "--no-cache"]
    local, fleet = run_cli(args), run_cli([*args, "--dask", address])
    assert (fleet.exit_code, fleet.output) == (1, local.output)
    assert "2 models: 1 with findings, 1 clean, 0 errors" in fleet.output
    for extra in (["--jobs", "2"], ["--quick"], ["--sums", str(manifest)]):
        refused = run_cli(["verify", *([] if extra[0] == "--sums" else [poisoned]), *extra, "--dask", address])
        assert refused.exit_code == 2, refused.output


# --- check on a cluster (issue 25, item 9) ------------------------------------------------------------

def untimed(doc: Any) -> Any:
    """A check's JSON without its timings (``seconds``: the run's, not the model's)."""
    if isinstance(doc, dict):
        return {k: untimed(v) for k, v in doc.items() if k != "seconds"}
    return [untimed(v) for v in doc] if isinstance(doc, list) else doc


def assert_same_checks(fleet: list[Outcome[Any]], local: list[Outcome[Any]]) -> None:
    assert_alike(fleet, local, lambda report: untimed(report.to_json()))


@pytest.fixture
def damaged_store(tmp_path: Path) -> tuple[Path, tuple[Path, Path]]:
    """An Ollama store whose model blob has one bit flipped in row 5 of types.f32.weight (a finite value
    still): the store's digest says the download is damaged."""
    from ollama_support import ollama_store

    blob, projector = ollama_store(tmp_path / "store", (FIXTURES / "all_types.gguf").read_bytes(),
                                   (FIXTURES / "ple_q8_0.gguf").read_bytes())
    with open(blob, "r+b") as f:
        f.seek(F32_AT + 5 * 512 * 4)
        byte = f.read(1)
        f.seek(F32_AT + 5 * 512 * 4)
        f.write(bytes([byte[0] ^ 1]))
    return tmp_path / "store", (blob, projector)


def test_check_on_the_cluster_is_the_local_check_a_task_per_file_and_path(
        client: Any, poisoned: str, damaged_store: tuple[Path, tuple[Path, Path]], tmp_path: Path) -> None:
    from ggaudit.check.run import check
    from ggaudit.fleet import check_on

    store, (blob, projector) = damaged_store
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 8)
    targets = ["ollama:tiny", poisoned, str(bad), str(tmp_path / "absent.gguf")]
    with distributed.get_task_stream(client) as stream:
        fleet = check_on(client, targets, store=str(store))
    assert_same_checks(fleet, run_models(targets, lambda t: check(t, store=str(store))))
    assert [o.result.verdict if o.result else None for o in fleet] == ["damaged", "nonfinite", None, None]
    assert [f.path for f in fleet[0].result.files] == [str(blob), str(projector)]
    assert str(fleet[2].error).startswith(f"{bad}: ") and "No such file" in str(fleet[3].error)
    # A task plans each target; then a task per file and read path (a path refused here is a task that says
    # so): three files, three paths.
    names = [t["key"].rpartition("-")[0] for t in stream.data]
    assert (names.count("ggaudit-plan_check"), names.count("ggaudit-check_pass")) == (4, 9)


def test_check_on_the_cluster_a_file_no_path_could_read_is_that_target_s_error(
        client: Any, poisoned: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Decided where the passes' results merge, not in a task: the target's outcome is the error a local
    # check raises, and the next target is checked all the same.
    from ggaudit.check import run as check_run
    from ggaudit.errors import NothingChecked
    from ggaudit.fleet import check_on
    from ggaudit.evidence.readers import DirectIOUnavailable

    real = check_run.open_reader

    def refused_for_poisoned(path: str, mode: str) -> Any:
        if os.path.basename(path) == "poisoned.gguf":
            raise DirectIOUnavailable(path, f"{mode} refused here")
        return real(path, mode)

    monkeypatch.setattr(check_run, "open_reader", refused_for_poisoned)
    targets = [poisoned, str(FIXTURES / "all_types.gguf")]
    fleet = check_on(client, targets)
    assert_same_checks(fleet, run_models(targets, check_run.check))
    assert isinstance(fleet[0].error, NothingChecked)
    assert str(fleet[0].error) == (f"{poisoned}: modes: no read path could read it (buffered refused here; mmap "
                                   "refused here; direct refused here): nothing was checked")
    assert fleet[1].result is not None and fleet[1].result.verdict == "unverified"


def test_check_on_the_cluster_a_pass_that_raised_is_run_again(client: Any, poisoned: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from ggaudit.check import run as check_run
    from ggaudit.fleet import check_on

    real, calls = check_run.read_pass, []

    def eio_once_on_mmap(reader: Any, consumers: Any, **keywords: Any) -> Any:
        calls.append(reader.mode)
        if reader.mode == "mmap" and calls.count("mmap") == 1:
            raise OSError(5, "Input/output error")       # a network share's transient EIO
        return real(reader, consumers, **keywords)

    monkeypatch.setattr(check_run, "read_pass", eio_once_on_mmap)
    fleet = check_on(client, poisoned)
    assert calls.count("mmap") == 2
    assert_same_checks(fleet, [Outcome(poisoned, result=check_run.check(poisoned))])
    assert fleet[0].result is not None and fleet[0].result.verdict == "nonfinite"


def test_cli_check_on_a_local_cluster_of_its_own(poisoned: str) -> None:
    import json

    args = ["check", "--json", poisoned, str(FIXTURES / "all_types.gguf")]
    local = run_cli(args)
    before = _children()
    fleet = run_cli([*args, "--dask", "local:1"])
    assert (fleet.exit_code, local.exit_code) == (1, 1), (fleet.stderr, fleet.exception)
    doc = json.loads(fleet.stdout)
    assert untimed(doc) == untimed(json.loads(local.stdout))
    assert [m["verdict"] for m in doc["models"]] == ["nonfinite", "unverified"]
    deadline = time.monotonic() + 10
    while _children() - before and time.monotonic() < deadline:     # a worker may take a moment to exit
        time.sleep(0.1)
    assert _children() - before == set()


def test_cli_check_dask_refuses_anomalies_before_it_starts_a_cluster() -> None:
    from support import assert_one_line_error

    result = run_cli(["check", "--dask", "local", "--anomalies", str(FIXTURES / "all_types.gguf")])
    assert_one_line_error(result, "--anomalies: reads blocks again where the results are merged: not on a Dask "
                                  "cluster")
