"""``check``'s outputs agree with its verdict (issue 35): every verdict ``check`` can give, each made with real
files (a read path made to deliver a NaN the file does not hold by a reader that fills two bytes, as
tests/rows_support.py's readers break one thing), crossed with every format (text, json, sarif, junit, html)
and every ``--fail-on`` name. The text verdict, the JSON ``verdict``, SARIF's results, JUnit's failures and
the exit under each ``--fail-on`` all come from the report's one set of diagnostics; a value a wrong read
path delivered is a read-path finding (``check/nonfinite-delivered``), never the scan's ``nan``, which says
the file holds it. The oracle below is worked out from what each case is, not from a run.

Then the verdict sentences: what a NaN is and whose, a structure finding's verdict and next step, a split
set's per-file lines once with their files, and where a read-path verdict's paths first differ, the
command that replays those rows, and whether a store's engine read right."""

from __future__ import annotations

import hashlib
import html
import json
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from ggaudit.check.report import CheckReport
from ggaudit.check.run import check
from ggaudit.cli.reporters import Rendering, exit_status, fail_on_kinds, fail_on_names, reporter
from ggaudit.cli.reporters.junit import xml_text
from ggaudit.evidence.readers import Reader, open_reader
from ggaudit.format.blocks import GGMLQuantizationType as T
from ggaudit.format.build import TensorSpec, gguf_bytes
from ggaudit.format.layout import open_model
from ggaudit.kinds import family, selects
from ggaudit.outcomes import Outcome
from fault_support import faulted_env, run_ggaudit
from ollama_support import ollama_store
from platforms import needs_linux
from rows_support import Wrapped
from support import write_split_set

FIXTURES = Path(__file__).parent.parent / "fixtures"
CLEAN, STORED_NAN = FIXTURES / "ple_q8_0.gguf", FIXTURES / "all_types-f32-nan.gguf"
PLE = "per_layer_token_embd.weight"
SARIF = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
FORMATS = ("text", "json", "sarif", "junit", "html")
#: The two bytes of block 2's fp16 scale d in row 100 of the PLE table: 0xffff there is a NaN.
ROW = 100


def nan_scale_offset() -> int:
    table = open_model(CLEAN).tensor(PLE)
    return table.offset + ROW * table.row_bytes + 2 * 34


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Filled(Wrapped):
    """A read path that delivers ``data`` at ``at`` whatever the file holds there (the rest as it reads)."""

    def __init__(self, inner: Reader, at: int, data: bytes) -> None:
        super().__init__(inner)
        self.at, self.data = at, data

    def read_into(self, view: memoryview, offset: int) -> int:
        got = self.inner.read_into(view, offset)
        lo, hi = max(offset, self.at), min(offset + got, self.at + len(self.data))
        if lo < hi:
            view[lo - offset:hi - offset] = self.data[lo - self.at:hi - self.at]
        return got


def deliver_nan(monkeypatch: pytest.MonkeyPatch, model: Path, modes: tuple[str, ...]) -> None:
    """``modes`` (check's every read of ``model`` through them, the active tests' too) deliver 0xffff over
    the scale d of block 2 of row 100: a NaN the file does not hold."""

    def opened(path: str, mode: str) -> Reader:
        inner = open_reader(path, mode)
        return Filled(inner, nan_scale_offset(), b"\xff\xff") if mode in modes and path == str(model) else inner

    from ggaudit.check import run     # by name: ggaudit.check is the function

    monkeypatch.setattr(run, "open_reader", opened)


@dataclass(frozen=True)
class Case:
    """A verdict ``check`` gives: how to make it, the diagnostics' kinds in order, and the --fail-on names
    that fail it (any other exits 0)."""

    verdict: str
    make: Callable[[Path, pytest.MonkeyPatch], CheckReport]
    kinds: tuple[str, ...]
    fails_on: frozenset[str]


def _copy(folder: Path, source: Path = CLEAN, name: str = "model.gguf") -> Path:
    target = folder / name
    shutil.copyfile(source, target)
    return target


def _intact(folder: Path, _: pytest.MonkeyPatch) -> CheckReport:
    return check(str(_copy(folder)), sha256=sha256(CLEAN))


def _cache_verified(folder: Path, _: pytest.MonkeyPatch) -> CheckReport:
    return check(str(_copy(folder)), sha256=sha256(CLEAN), modes=("buffered", "mmap"))


def _unverified(folder: Path, _: pytest.MonkeyPatch) -> CheckReport:
    return check(str(_copy(folder)))


def _damaged(folder: Path, _: pytest.MonkeyPatch) -> CheckReport:
    model = _copy(folder)
    with open(model, "r+b") as f:
        f.seek(nan_scale_offset() + 6)       # a quant of block 2 of row 100: finite whatever it holds
        f.write(bytes([f.read(1)[0] ^ 0x10]))
    return check(str(model), sha256=sha256(CLEAN))


def _nonfinite(folder: Path, _: pytest.MonkeyPatch) -> CheckReport:
    return check(str(_copy(folder, STORED_NAN)), sha256=sha256(STORED_NAN))


def _read_path_decided(folder: Path, monkeypatch: pytest.MonkeyPatch) -> CheckReport:
    model = _copy(folder)
    deliver_nan(monkeypatch, model, ("mmap",))
    return check(str(model), sha256=sha256(CLEAN))


def _read_path_undecided(folder: Path, monkeypatch: pytest.MonkeyPatch) -> CheckReport:
    model = _copy(folder)
    deliver_nan(monkeypatch, model, ("buffered", "mmap"))     # the page cache's paths; nothing published
    return check(str(model))


def _structure(folder: Path, _: pytest.MonkeyPatch) -> CheckReport:
    model = _copy(folder)
    with open(model, "ab") as f:
        f.write(b"MZ\x90\x00" + b"\x00" * 60)       # an executable's first bytes appended to the model
    return check(str(model))


READ_PATH_FINDINGS = ("check/read-path-differs", "check/nonfinite-delivered")
CASES = {
    "intact": Case("intact", _intact, (), frozenset()),
    "cache-verified": Case("cache-verified", _cache_verified, (), frozenset()),
    # A note only, in a report that is ok: nothing fails it, --fail-on note neither (notes are not findings).
    "unverified": Case("unverified", _unverified, ("check/no-published-reference",), frozenset()),
    "damaged": Case("damaged", _damaged, ("check/differs-from-published",), frozenset({"digest", "error"})),
    "nonfinite": Case("nonfinite", _nonfinite, ("nan",), frozenset({"nonfinite", "error", "nan"})),
    "read-path, decided": Case("read-path", _read_path_decided, READ_PATH_FINDINGS,
                               frozenset({"read-path", "error", "check/nonfinite-delivered"})),
    # The note that nothing was published is no digest finding: --fail-on digest does not fail on it.
    "read-path, undecided": Case("read-path", _read_path_undecided,
                                 ("check/no-published-reference", *READ_PATH_FINDINGS),
                                 frozenset({"read-path", "error", "note", "check/nonfinite-delivered"})),
    "structure": Case("structure", _structure, ("check/no-published-reference", "trailing"),
                      frozenset({"structure", "error", "note"})),
}


def rendered(report: CheckReport) -> dict[str, str]:
    outcome = [Outcome(report.target, result=report)]
    return {fmt: reporter(fmt)(outcome, Rendering(fmt=fmt)) for fmt in FORMATS}


def junit_verdict(text: str) -> ET.Element:
    (suite,) = ET.fromstring(text)
    return next(c for c in suite if c.tag == "testcase" and c.attrib["name"] == "verdict")


@pytest.mark.parametrize("name", CASES)
def test_every_output_and_every_fail_on_agree_with_the_verdict(name: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES[name]
    report = case.make(tmp_path, monkeypatch)
    diagnostics = list(report.diagnostics())
    assert (report.verdict, tuple(d.kind for d in diagnostics)) == (case.verdict, case.kinds)
    out = rendered(report)
    # text: the first line is the headline, the last the verdict.
    lines = out["text"].splitlines()
    assert lines[0] == report.summary().headline and lines[-1].startswith(f"verdict: {case.verdict} (")
    # json: the same verdict, and clean exactly when nothing fails the run.
    (model,) = json.loads(out["json"])["models"]
    assert (model["verdict"], json.loads(out["json"])["status"]) == (case.verdict, "findings" if case.kinds and
                                                                      case.fails_on else "clean")
    # sarif: a result per diagnostic, of its kind and level, in the schema.
    log = json.loads(out["sarif"])
    jsonschema.Draft4Validator(SARIF).validate(log)
    results = log["runs"][0]["results"]
    assert [(r["ruleId"], r["level"]) for r in results] == [(d.kind, d.severity) for d in diagnostics]
    # junit: the verdict's case fails with the verdict and every finding but the notes, or passes.
    verdict = junit_verdict(out["junit"])
    failure = verdict.find("failure")
    findings = [xml_text(d.message) for d in diagnostics if d.severity != "note"]
    if case.fails_on:
        assert failure is not None and failure.attrib["type"] == case.verdict
        assert (failure.text or "").split("\n") == "\n".join(findings).split("\n")
    else:
        assert failure is None and findings == []
    # html: the page opens with the same headline.
    assert html.escape(report.summary().headline) in out["html"]
    # the exit under every --fail-on: what the oracle says, and what SARIF's results select.
    for names in (None, *fail_on_names(), "nan", "check/nonfinite-delivered"):
        fail_on = None if names is None else fail_on_kinds((names,))
        status = exit_status([Outcome(report.target, result=report)], fail_on)
        expected = bool(case.fails_on) if names is None else names in case.fails_on
        assert status == (1 if expected else 0), names
        if names is not None and not report.ok:
            assert expected == any(selects(frozenset({names}), r["ruleId"], r["level"]) for r in results), names


@pytest.mark.parametrize("name", ["read-path, decided", "read-path, undecided"])
def test_a_nan_only_a_wrong_path_delivered_is_the_paths_finding_in_every_format(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = CASES[name].make(tmp_path, monkeypatch)
    [delivered] = [d for d in report.diagnostics() if d.kind == "check/nonfinite-delivered"]
    at = nan_scale_offset()
    assert (delivered.file, delivered.offset, delivered.length, delivered.tensor, delivered.row, delivered.block,
            delivered.field, delivered.extras["bits"], delivered.extras["path"]) == (
        str(tmp_path / "model.gguf"), at, 2, PLE, ROW, 2, "d", "0xffff", "mmap")
    assert family(delivered.kind) == "read-path"
    out = rendered(report)
    rules = {r["id"]: r["help"]["text"] for r in json.loads(out["sarif"])["runs"][0]["tool"]["driver"]["rules"]}
    assert "nan" not in rules and "get the file again" not in rules["check/nonfinite-delivered"].lower()
    assert not any(c["code"] == "stored-nonfinite" for c in json.loads(out["json"])["models"][0]["conclusions"])


def test_a_stored_nan_is_never_the_paths_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = CASES["nonfinite"].make(tmp_path, monkeypatch)
    assert [d.kind for d in report.diagnostics()] == ["nan"] and report.delivered == ()


# --- the same from below: the LD_PRELOAD fault layer (tests/faultlayer.c) under `python -m ggaudit check` -------

@needs_linux
def test_fail_on_nonfinite_passes_and_read_path_fails_when_only_the_mapping_delivers_a_nan(tmp_path: Path) -> None:
    model = _copy(tmp_path)
    env = faulted_env(model, "mmap", "fill", offset=nan_scale_offset(), length=2, byte=0xFF)
    args = ["check", str(model), "--sha256", sha256(CLEAN), "-q"]
    assert run_ggaudit([*args, "--fail-on", "nonfinite"], env).code == 0
    assert run_ggaudit([*args, "--fail-on", "read-path"], env).code == 1
    done = run_ggaudit(["check", str(model), "--sha256", sha256(CLEAN), "--format", "sarif"], env)
    results = json.loads(done.stdout)["runs"][0]["results"]
    assert (done.code, [r["ruleId"] for r in results]) == (1, list(READ_PATH_FINDINGS))
    # Each at its bytes: the first byte the paths differ at, and the scale the mapping delivered as NaN.
    regions = [r["locations"][0]["physicalLocation"]["region"] for r in results]
    assert [(g["byteOffset"], g["byteLength"]) for g in regions] == [(nan_scale_offset(), 1), (nan_scale_offset(), 2)]


# --- the verdict in words ------------------------------------------------------------------------------------

def test_a_nan_the_damaged_file_holds_is_said_where_it_is(tmp_path: Path) -> None:
    model = _copy(tmp_path, STORED_NAN)
    with open(model, "r+b") as f:
        f.seek(30000)
        f.write(b"\x01")
    report = check(str(model), sha256=sha256(STORED_NAN))
    assert report.summary().headline == (f"{model}: damaged: the file on disk is not the one published; and the "
                                         "file holds 1 NaN: tensor types.f32.weight, row 3")


def test_a_nan_only_the_mapping_delivered_is_said_in_the_headline(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    report = CASES["read-path, decided"].make(tmp_path, monkeypatch)
    model, at = tmp_path / "model.gguf", nan_scale_offset()
    assert report.summary().headline == (
        f"{model}: this machine reads the file differently depending on the read path: mmap reads deliver other "
        f"bytes than buffered and direct reads, first at offset {at}: tensor {PLE}, row {ROW} (in rows 0-1023, whose "
        f"digests differ); mmap reads delivered 1 NaN (tensor {PLE}, row {ROW}) that the file does not hold")
    assert report.next_steps[0] == (
        "replay the rows where the paths first differ through each read path, to see what each delivers: "
        f"`ggaudit rows {model} --tensor {PLE} --ids {ROW} --modes buffered,mmap,direct`")
    lines = report.summary().lines
    assert lines[-1] == "verdict: read-path (reference: published; paths compared: buffered, mmap, direct)"
    assert f"  nan at file {model} offset {at}, length 2: tensor {PLE}, row {ROW}, block 2, columns 64..95, field " \
           "d: expected finite, got 0xffff (nan), as mmap reads delivered it (the file's bytes there are what " \
           "buffered and direct read)" in lines


def test_the_replay_command_is_one_rows_takes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command the read-path verdict suggests runs: rows replays that row and finds mmap delivers it wrong."""
    from click.testing import CliRunner
    from ggaudit.cli import main

    report = CASES["read-path, decided"].make(tmp_path, monkeypatch)
    command = report.next_steps[0].split("`")[1].split()
    assert command[:2] == ["ggaudit", "rows"]
    monkeypatch.setattr("ggaudit.rows.replay.open_reader",
                        lambda path, mode: Filled(open_reader(path, mode), nan_scale_offset(), b"\xff\xff")
                        if mode == "mmap" else open_reader(path, mode))
    done = CliRunner().invoke(main, [*command[1:], "--json"])
    (rows,) = json.loads(done.stdout)["models"]
    assert done.exit_code == 1, done.output
    assert {(m["mode"], m["row"]) for m in rows["mismatches"]} == {("mmap", ROW)}


def test_an_appended_payload_is_a_structure_verdict_with_its_own_next_step(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    report = CASES["structure"].make(tmp_path, monkeypatch)
    model, end = tmp_path / "model.gguf", CLEAN.stat().st_size
    assert report.summary().headline == (
        f"{model}: structure: the file holds 64 bytes of data after the last tensor at offset {end}, which no "
        "tensor reads (buffered, mmap and direct reads agree on them; nothing published says whether the "
        "publisher's file holds them)")
    [step] = report.next_steps
    assert step == (f"this file holds 64 bytes no tensor owns (trailing) at offset {end} of {model}, starting "
                    f"4d5a9000{'00' * 12}: an engine loads the model without noticing them; find out what they are "
                    "(`ggaudit scan FILE` lists each region) and check the file against its published sha256 "
                    "(`--sha256 HEX`, `--sums FILE`) to tell a file changed here from the publisher's own; a manifest "
                    "made from this file would only record them")


def test_an_appended_payload_to_the_published_file_says_so(tmp_path: Path) -> None:
    model = _copy(tmp_path)
    with open(model, "ab") as f:
        f.write(b"MZ" + b"\x00" * 30)
    report = check(str(model), sha256=sha256(model))
    assert report.verdict == "structure" and report.summary().headline.endswith(
        "which no tensor reads (every byte matches what was published, these bytes included)")
    assert report.next_steps[0].startswith(f"the published file holds 32 bytes no tensor owns (trailing) at offset "
                                           f"{CLEAN.stat().st_size} of {model}, starting 4d5a")


def test_a_split_sets_per_file_lines_are_said_once_each_with_its_files(tmp_path: Path) -> None:
    first, second = write_split_set(tmp_path)
    report = check(str(first))
    said = [line for line in report.summary().lines if line.startswith("- ")]
    assert said[:2] == [
        f"- {first} and {second}: no published reference: the file can only be checked against itself",
        f"- {first} and {second}: buffered, mmap and direct reads delivered the same bytes (the page cache and the "
        "device agree)"]
    assert len(said) == len(set(said))
    # The page's conclusions and its copy of the text report say it once each, with the files; its index of
    # findings, one per file (SARIF's results too), each naming its file.
    page = rendered(report)["html"]
    unref = "no published reference: the file can only be checked against itself"
    assert page.count(html.escape(f"{first} and {second}: {unref}")) == 2
    assert [page.count(f"<code>{html.escape(f'{shard}: {unref}')}</code>") for shard in (first, second)] == [1, 1]
    assert page.count(unref) == 4
    assert [d.message for d in report.diagnostics() if d.kind == "check/no-published-reference"] == [
        f"{first}: {unref}", f"{second}: {unref}"]


# --- a store's engine: whether the path it reads through read right ----------------------------------------

def _projector() -> bytes:
    data, _ = gguf_bytes([TensorSpec("mm.weight", T.F32, (16, 4), np.arange(64, dtype="<f4").tobytes())],
                         {"general.architecture": "clip"})
    return data


def _ollama(folder: Path) -> Path:
    blob, _ = ollama_store(folder / "ollama", CLEAN.read_bytes(), _projector(), name="clef-flash")
    return blob


@pytest.mark.parametrize("wrong, said", [
    (("mmap",), "Ollama reads through mmap by default, one of the paths that delivered the wrong bytes: Ollama "
                "gets them"),
    (("buffered",), "Ollama reads through mmap by default, which delivered the right bytes: Ollama gets the "
                    "file's bytes")])
def test_a_store_target_says_whether_its_engines_path_read_right(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 wrong: tuple[str, ...], said: str) -> None:
    blob = _ollama(tmp_path)
    deliver_nan(monkeypatch, blob, wrong)
    report = check("ollama:clef-flash", store=str(tmp_path / "ollama"))
    assert report.verdict == "read-path" and report.summary().headline.endswith("; " + said)
    assert report.next_steps[0].endswith(f"--ids {ROW} --modes buffered,mmap,direct --store {tmp_path / 'ollama'}`")


def test_an_intact_files_words_are_kept(tmp_path: Path) -> None:
    """Outputs the issue does not ask to change stay as they were: an intact file's headline."""
    model = _copy(tmp_path)
    lines = rendered(check(str(model), sha256=sha256(CLEAN)))["text"].splitlines()
    assert lines[0] == (f"{model}: intact: every byte matches what was published, and buffered, mmap and direct "
                        "reads deliver the same bytes")
