"""``--format html``: one self-contained page (no URL but links within it, every tag closed, each SVG valid XML), the
map placing each planted finding at its offset, the tensor table, the histogram showing a planted huge
scale, the rows strip marking the mismatching row, hostile names escaped, and every report type rendered."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from ggaudit.outcomes import Outcome
from ggaudit.cli.reporters import NAMES, html as html_reporter, junit as junit_reporter, sarif as sarif_reporter
from ggaudit.cli.reporters._svg import MAP_WIDTH, STRIP_LABEL, map_x, strip_x
from ggaudit.errors import ReadError
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.format.layout import open_model
from ggaudit.rows import replay as R
from ggaudit.evidence.readers import Reader, open_reader
from support import FIXTURES, run_cli
from rows_support import Wrapped, crossing, make_table

HOSTILE = "<script>\u202eevil"
_VOID = {"meta", "br", "hr", "img", "input", "link", "wbr"}


class _Balanced(HTMLParser):
    """Checks that every element is closed, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v or "" for k, v in attrs if k in ("src", "href", "xlink:href", "action")]
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v or "" for k, v in attrs if k in ("src", "href", "xlink:href", "action")]

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-5:])
        self.stack.pop()


def check_page(page: str) -> list[ET.Element]:
    """The page is well formed and fetches nothing; returns its SVGs, parsed as XML."""
    assert page.startswith("<!DOCTYPE html>")
    parser = _Balanced()
    parser.feed(page)
    parser.close()
    assert parser.stack == []
    # In-page links only (the first screen's index of targets: #target-N); nothing fetched.
    assert [u for u in parser.urls if not re.fullmatch(r"#target-\d+", u)] == []
    assert not re.search(r"url\s*\(|https?:|@import|<script|<link|<img|<iframe", page, re.I)
    return [ET.fromstring(svg) for svg in re.findall(r"<svg\b.*?</svg>", page, re.S)]


def _f16(x: float) -> bytes:
    return np.float16(x).tobytes()


@pytest.fixture
def model(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    """Planted: NaN in f32 element 5, +Inf in element 2 of a tensor with a hostile name, a Q8_0 block
    (3) whose scale is 60000 (2^15, an outlier past --max-abs 1000), and 100 bytes after the last tensor."""
    q8 = b"".join(_f16(60000.0 if b == 3 else 0.01) + bytes([1]) * 32 for b in range(8))
    f32 = np.ones(16, "<f4")
    f32[5] = np.nan
    f16 = np.ones(8, "<f2")
    f16[2] = np.inf
    specs = [TensorSpec("embd", T.Q8_0, (64, 4), q8), TensorSpec("w.f32", T.F32, (16,), f32.tobytes()),
             TensorSpec(HOSTILE, T.F16, (8,), f16.tobytes()), TensorSpec("ints", T.I32, (4,), bytes(16))]
    path = tmp_path / "m.gguf"
    offsets = write_gguf(path, specs)
    with open(path, "ab") as f:
        f.write(b"\xab" * 100)
    planted = {"outlier": offsets["embd"] + 3 * 34, "nan": offsets["w.f32"] + 5 * 4, "+inf": offsets[HOSTILE] + 4}
    return path, planted


@pytest.fixture
def page(model: tuple[Path, dict[str, int]], tmp_path: Path) -> str:
    out = tmp_path / "report.html"
    result = run_cli(["scan", model[0], "--max-abs", "1000", "--format", "html", "-o", out])
    assert result.exit_code == 1, (result.output, result.stderr)
    return out.read_text("utf-8")


def _svgs(page: str, css: str) -> list[ET.Element]:
    return [s for s in check_page(page) if s.get("class") == css]


def test_html_is_a_format_and_helpers_are_not() -> None:
    assert "html" in NAMES and not any(n.startswith("_") for n in NAMES)


def test_map_places_each_finding_at_its_offset(model: tuple[Path, dict[str, int]], page: str) -> None:
    path, planted = model
    size = path.stat().st_size          # the trailing bytes (a structure finding) reach the end of the file
    (svg,) = _svgs(page, "map")
    marks = {int(g.get("data-offset", -1)): g for g in svg.iter("g")}
    for kind, offset in planted.items():
        mark = marks[offset]
        css = {"outlier": "outlier", "nan": "nan", "+inf": "pinf"}[kind]
        assert mark.get("class") == f"mark {css}"
        assert abs(float(mark.find("rect").get("x")) - offset * MAP_WIDTH / size) < 0.01  # type: ignore[union-attr]
        title = mark.findtext("title") or ""
        assert title.startswith(f"{kind} at file ") and f"offset {offset}, length" in title
    trailing = size - 100
    assert marks[trailing].get("class") == "mark structure"
    assert abs(float(marks[trailing].find("rect").get("x")) - map_x(trailing, size)) < 0.01  # type: ignore[union-attr]
    assert len(marks) == 4


def test_tensor_table_lists_every_tensor(page: str) -> None:
    table = page[page.index("<h3>Tensors</h3>"):page.index("<h3>Map of")]
    names = re.findall(r'<tr(?: class="hit")?><td class="mono">(.*?)</td>', table)
    assert names == ["embd", "w.f32", "&lt;script&gt;\\u202eevil", "ints"]
    assert table.count('<tr class="hit">') == 3


def test_histogram_shows_the_huge_scale(page: str) -> None:
    figures = re.findall(r"<figure>(.*?)</figure>", page, re.S)
    (embd,) = [f for f in figures if "<figcaption>embd (Q8_0), field d (f16)" in f]
    svg = ET.fromstring(embd[:embd.index("</svg>") + 6])
    bars = {r.get("data-bucket"): int(r.get("data-count", 0)) for r in svg.iter("rect")}
    # 0.01 is 2^-7 <= x < 2^-6 (seven blocks); 60000 is 2^15 (one); the powers between are drawn empty.
    assert bars == {"-7": 7, "15": 1}
    rects = {r.get("data-bucket"): r for r in svg.iter("rect")}
    assert float(rects["15"].get("height", 0)) >= 3 and float(rects["15"].get("x", 0)) > float(rects["-7"].get("x", 0))
    assert len(figures) == 3      # one per float field: embd d, w.f32 and the f16 tensor's values


def test_hostile_name_is_escaped(page: str) -> None:
    assert HOSTILE not in page and "\u202e" not in page and "<script" not in page
    assert "&lt;script&gt;\\u202eevil" in page


def test_text_report_lines_are_on_the_page(model: tuple[Path, dict[str, int]], page: str) -> None:
    text = run_cli(["scan", model[0], "--max-abs", "1000"]).output
    from html import escape

    for line in text.splitlines():
        assert escape(line) in page, line


def test_the_scan_section_lists_metadata_and_template_findings_as_lines(tmp_path: Path) -> None:
    path = tmp_path / "h.gguf"
    template = "{{ ''.__class__ }}\u202e"      # code execution, and a bidi control hidden after it
    write_gguf(path, [TensorSpec("blk.0.attn_norm.weight", T.F32, (4,), bytes(16))],
               {"general.architecture": "llama", "llama.block_count": 2, "tokenizer.chat_template": template})
    out = tmp_path / "report.html"
    assert run_cli(["scan", path, "--format", "html", "-o", out]).exit_code == 1
    page = out.read_text("utf-8")
    check_page(page)
    section = page[page.index('<section id="target-1">'):]
    facts = re.findall(r"<tr><td>(metadata|chat template) findings</td><td class=\"mono\">(\d+)</td></tr>", section)
    assert facts == [("metadata", "1"), ("chat template", "2")]
    header = re.search(r"<h3>Metadata and chat templates</h3>\s*<ol>(.*?)</ol>", section)
    assert header is not None
    lines = re.findall(r"<li><code>(.*?)</code></li>", header.group(1))
    meta = open_model(path).metadata
    text_at = meta["tokenizer.chat_template"].offset + 8      # the string's u64 length, then its text
    wheres = [f"metadata llama.block_count = 2 at file {path} offset {meta['llama.block_count'].offset}: ",
              f"template tokenizer.chat_template line 1 column 7 at file {path} offset {text_at + 6}: ",
              f"template tokenizer.chat_template line 1 column 19 at file {path} offset {text_at + 18}: "]
    # Each line starts with where, then ": " and what (a Windows path holds a colon of its own).
    assert [line[:len(where)] for line, where in zip(lines, wheres, strict=True)] == wheres
    assert "error underscore-attribute: attribute &#x27;__class__&#x27;" in lines[1]
    assert "warning bidi: bidi control U+202E" in lines[2] and "\u202e" not in page


class _FlipRow(Wrapped):
    """The mmap path with one byte of the file flipped: a read path that delivers the wrong bytes."""

    def __init__(self, inner: Reader, at: int) -> None:
        super().__init__(inner)
        self.at = at

    def read_into(self, view: memoryview, offset: int) -> int:
        n = self.inner.read_into(view, offset)
        if offset <= self.at < offset + n:
            view[self.at - offset] ^= 0xFF
        return n


def test_rows_strip_marks_checked_crossing_and_mismatching_rows(tmp_path: Path) -> None:
    table = make_table(tmp_path, T.IQ4_NL, ne0=160, n_rows=300)
    at = table.offset(100) + 7

    def factory(path: str, mode: str) -> Reader:
        inner = open_reader(path, mode)
        return _FlipRow(inner, at) if mode == "mmap" else inner

    report = R.check_rows(table.path, range(50, 150), modes=("buffered", "mmap"),
                          options=R.RowsOptions(reader_factory=factory))
    assert [m.row for m in report.mismatches] == [100]
    page = html_reporter.report([Outcome(model=table.path, result=report)])
    (svg,) = _svgs(page, "strip")
    (mark,) = [g for g in svg.iter("g") if g.get("class") == "mark mismatch"]
    assert mark.get("data-row") == "100"
    assert abs(float(mark.find("rect").get("x")) - strip_x(100, 300)) < 0.01  # type: ignore[union-attr]
    assert f"offset {at} (0x{at:x})" in (mark.findtext("title") or "")
    unit = MAP_WIDTH / 300
    lanes: dict[str, list[tuple[float, float]]] = {}
    for r in svg.iter("rect"):
        if r.get("class") in ("checked", "page", "sector"):
            lanes.setdefault(r.get("class", ""), []).append((float(r.get("x", 0)), float(r.get("width", 0))))
    assert lanes["checked"] == [(pytest.approx(STRIP_LABEL + 50 * unit, abs=0.01), pytest.approx(100 * unit, abs=0.01))]
    page_rows = [round((x - STRIP_LABEL) / unit) for x, _ in lanes["page"]]
    assert page_rows == crossing(table) and all(w == pytest.approx(unit, abs=0.01) for _, w in lanes["page"])


def test_rows_summaries_say_whose_cache_and_ring_ran_only_with_those_stages(tmp_path: Path) -> None:
    """HTML's summary, JUnit's suite output (the text report) and SARIF's target properties."""
    table = make_table(tmp_path, T.IQ4_NL, ne0=160, n_rows=300)
    cached = R.check_rows(table.path, [4, 9], modes=("buffered",), options=R.RowsOptions(cache_rows=1))
    plain = R.check_rows(table.path, [4, 9], modes=("buffered",))
    text = ("the cache stages ran ggaudit's own row cache and buffer ring: what correct ones deliver over these read "
            "paths on this machine, not the engine's (to run its own: docs/rows.md#for-engine-developers)")
    assert cached.exercised is not None and cached.exercised.text == text and plain.exercised is None
    for report, said in ((cached, True), (plain, False)):
        outcome = [Outcome(model=table.path, result=report)]
        page = html_reporter.report(outcome)
        assert (f"<tr><td>cache and buffer ring</td><td>{text.replace(chr(39), '&#x27;')}</td></tr>" in page) is said
        assert page.count("own row cache and buffer ring") == 2 * said   # the summary's row, the text report's note
        (out,) = ET.fromstring(junit_reporter.report(outcome)).iter("system-out")
        assert (f"note: {text}" in (out.text or "").splitlines()) is said
        (target,) = json.loads(sarif_reporter.report(outcome))["runs"][0]["properties"]["targets"]
        assert target.get("exercised") == (cached.exercised.to_json() if said else None)


def _cli_page(tmp_path: Path, args: Sequence[object], status: int) -> str:
    out = tmp_path / "r.html"
    result = run_cli([*args, "--format", "html", *(["--report"] if args[0] == "manifest" else ["-o"]), out])
    assert result.exit_code == status, (result.output, result.stderr, result.exception)
    page = out.read_text("utf-8")
    check_page(page)
    return page


def test_every_command_renders(tmp_path: Path) -> None:
    clean, nan = FIXTURES / "all_types.gguf", FIXTURES / "all_types-f32-nan.gguf"
    info = _cli_page(tmp_path, ["info", clean], 0)
    assert info.count('<svg class="map"') == 1 and "types.q4_k.weight" in info
    manifest = tmp_path / "m.json"
    assert "wrote" in _cli_page(tmp_path, ["manifest", clean, "-o", manifest], 0)
    assert "<h3>Mismatches</h3>" in _cli_page(tmp_path, ["verify", nan, "--manifest", manifest], 1)
    diff = _cli_page(tmp_path, ["diff", clean, nan], 1)
    assert "<h3>Differences</h3>" in diff and "types.f32.weight" in diff
    rows = _cli_page(tmp_path, ["rows", FIXTURES / "ple_iq4_nl.gguf", "--random", "20"], 0)
    assert "checked (not located)" in rows


def test_a_failed_target_shows_its_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.gguf"
    page = _cli_page(tmp_path, ["scan", FIXTURES / "all_types.gguf", missing], 2)
    assert page.count('<span class="status s-error">error</span></h2>') == 1
    assert "cannot open" in page and "2 targets: 0 with findings, 1 clean, 1 error" in page
    err = html_reporter.report([Outcome(model="x", error=ReadError("a\u202e<b>", "bad", offset=3))])
    assert "\u202e" not in err and "a\\u202e&lt;b&gt;" in err


def test_big_tables_are_cut(model: tuple[Path, dict[str, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    import ggaudit

    monkeypatch.setattr(html_reporter, "MAX_ROWS", 2)
    monkeypatch.setattr(html_reporter, "MAX_HISTOGRAMS", 1)
    page = html_reporter.report([Outcome(model="m", result=ggaudit.scan(model[0], histograms=True, workers=0))])
    flagged = page[page.index("<h3>Tensors</h3>"):page.index("<details>")]   # then the clean ones, folded
    assert flagged.count("<tr") == 3 and "w.f32" in flagged and "embd" not in flagged
    clean = page[page.index("<details>"):page.index("</details>")]
    assert clean.count("<tr") == 3 and "2 tensors without findings" in clean and "w.f32" not in clean
    assert "... histograms of 2 more tensors not drawn" in page
