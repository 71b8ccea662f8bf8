"""`ggaudit rows` when the read paths disagree about a row (issue 35, section 2): the verdict says whose bytes
are finite when nothing decides which are the file's, the next step gives the commands that decide (and only
those not tried yet), each row is printed once with the stages that delivered it, and the HTML page counts
the NaN a read path delivered apart from the values stored.

Below the process, tests/faultlayer.c makes the direct path deliver 0xffff (an f16 NaN) as block 1's scale of
row 100 of fixtures/ple_q8_0.gguf (copied): per_layer_token_embd.weight is Q8_0, 1024 rows of 170 bytes at
offset 23712; the page cache (buffered, mmap) delivers the file's bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shlex
import shutil
from pathlib import Path

import pytest

from ggaudit.rows.classify import RowMismatch, RowPlace
from ggaudit.rows.wording import describe_row_mismatches
from fault_support import faulted_env, rows, run_ggaudit
from platforms import needs_linux

FIXTURE = Path(__file__).parent.parent / "fixtures" / "ple_q8_0.gguf"
PLE = "per_layer_token_embd.weight"
ROW, RB, BASE = 100, 170, 23712
SCALE = BASE + ROW * RB + 34          # block 1's f16 d of row 100
NAN_SCALE = dict(offset=SCALE, length=2, byte=0xFF)
CROSSING = "mismatched rows crossing: 4096-byte page 0, 512-byte sector 0, 64 KiB 0"
UNDECIDED = ("the selected row is finite as the reference read, buffered and mmap delivered it; direct delivered "
             "other bytes of row 100, holding NaN/Inf (first at block 1, column 32), and nothing decides which are "
             "the file's")


@pytest.fixture
def model(ddir: Path) -> Path:
    target = ddir / "model.gguf"
    shutil.copyfile(FIXTURE, target)
    return target


def _replay(model: Path) -> str:
    return f"ggaudit rows {model} --tensor {PLE} --ids {ROW}"


def _next(model: Path, *, sha256: bool = True, manifest: bool = True) -> str:
    ways = ([f"give the file's published sha256 (`{_replay(model)} --sha256 HEX`)"] if sha256 else []) + \
        ([f"make a tensor manifest where the model works (`ggaudit manifest MODEL -o model.manifest.json` there) "
          f"and replay the rows against it here (`{_replay(model)} --manifest model.manifest.json`)"]
         if manifest else [])
    return f"next: to decide which bytes of 1 row are the file's, {' or '.join(ways)}"


def _facts(page: str) -> dict[str, str]:
    return dict(re.findall(r"<tr><td>([^<]*)</td><td[^>]*>([^<]*)</td></tr>", page))


@needs_linux
def test_nothing_decides_so_the_verdict_says_whose_bytes_are_finite_and_the_row_is_printed_once(model: Path) -> None:
    env = faulted_env(model, "direct", "fill", **NAN_SCALE)
    done = run_ggaudit(["rows", str(model), "--ids", str(ROW), "--cache-rows", "16", "--prefetch"], env)
    lines = done.stdout.splitlines()
    assert done.code == 1, done.stderr
    # Six deliveries of the same bytes (gather, the cache's miss, hit and two pressure passes, prefetch): one row.
    assert [line for line in lines if line.startswith("mismatch: ")] == [
        "mismatch: direct row 100 [garbage] (gather, cache-miss, cache-hit, cache-pressure twice, prefetch)"]
    assert "  2 bytes differ; decoded row finite: expected yes, actual no (first NaN/Inf at block 1, column 32)" \
        in lines
    assert lines[-2:] == [_next(model), f"result: 6 mismatches (garbage 6), 0 short reads; {CROSSING}; {UNDECIDED}"]
    assert "in the file" not in lines[-1]
    # The JSON keeps every delivery, each saying nothing decided.
    code, report = rows(model, env, "--ids", str(ROW), "--cache-rows", "16", "--prefetch")
    assert (code, [m["stage"] for m in report["mismatches"]]) == (1, [
        "gather", "cache-miss", "cache-hit", "cache-pressure", "cache-pressure", "prefetch"])
    assert {m["reference"] for m in report["mismatches"]} == {"buffered"}


@needs_linux
def test_several_undecided_rows_are_named_and_the_next_step_replays_them_on_the_paths_run(model: Path) -> None:
    env = faulted_env(model, "direct", "fill", offset=BASE + 99 * RB, length=3 * RB, byte=0xFF)
    done = run_ggaudit(["rows", str(model), "--ids", "98-102", "--modes", "direct,mmap"], env)
    lines = done.stdout.splitlines()
    replay = f"ggaudit rows {model} --tensor {PLE} --ids 99-101 --modes direct,mmap"
    assert (done.code, [line for line in lines if line.startswith("mismatch: ")]) == (1, [
        f"mismatch: direct row {row} [filled] (gather)" for row in (99, 100, 101)])
    assert lines[-2:] == [
        f"next: to decide which bytes of 3 rows are the file's, give the file's published sha256 (`{replay} --sha256 "
        "HEX`) or make a tensor manifest where the model works (`ggaudit manifest MODEL -o model.manifest.json` "
        f"there) and replay the rows against it here (`{replay} --manifest model.manifest.json`)",
        "result: 3 mismatches (filled 3), 0 short reads; mismatched rows crossing: 4096-byte page 1, 512-byte sector "
        "1, 64 KiB 0; the 5 selected rows are finite as the reference read and mmap delivered them; direct delivered "
        "other bytes of 3 rows (99, 100, 101), holding NaN/Inf in 3 of them (first: row 99, block 0, column 0), and "
        "nothing decides which are the file's"]


@needs_linux
def test_the_next_steps_commands_are_real_and_each_decides_the_row(ddir: Path, tmp_path: Path) -> None:
    """The commands the next step prints, run as printed (HEX, MODEL and the manifest's name filled in); the
    file's path, which holds a space, is one word of them."""
    (ddir / "my models").mkdir()
    model = ddir / "my models" / "model.gguf"
    shutil.copyfile(FIXTURE, model)
    env = faulted_env(model, "direct", "fill", **NAN_SCALE)
    step = run_ggaudit(["rows", str(model), "--ids", str(ROW)], env).stdout.splitlines()[-2]
    assert f"`ggaudit rows '{model}' --tensor {PLE} --ids {ROW} --sha256 HEX`" in step
    by_sha, make, by_manifest = (shlex.split(c) for c in re.findall(r"`([^`]*)`", step))
    manifest = str(tmp_path / "model.manifest.json")
    filled = {"HEX": hashlib.sha256(model.read_bytes()).hexdigest(), "MODEL": str(model),
              "model.manifest.json": manifest}
    by_sha, make, by_manifest = ([filled.get(word, word) for word in c] for c in (by_sha, make, by_manifest))
    assert [c[0] for c in (by_sha, make, by_manifest)] == ["ggaudit"] * 3
    decided = run_ggaudit(by_sha[1:], env)
    assert decided.code == 1, decided.stderr
    assert decided.stdout.splitlines()[-1] == f"result: 1 mismatch (garbage 1), 0 short reads; {CROSSING}; " \
                                              "the selected row is finite in the file"
    assert "\nnext: " not in decided.stdout
    made = run_ggaudit(make[1:], None)     # where the model works: no fault
    assert made.code == 0, made.stderr
    code, report = rows(model, env, *by_manifest[3:])
    [m] = report["mismatches"]
    assert (code, m["mode"], m["reference"], report["nonfinite_rows"]) == (1, "direct", "manifest", 0)


@needs_linux
def test_the_next_step_offers_only_what_was_not_tried(model: Path, tmp_path: Path) -> None:
    env = faulted_env(model, "direct", "fill", **NAN_SCALE)
    other = hashlib.sha256(b"another file").hexdigest()
    tried = run_ggaudit(["rows", str(model), "--ids", str(ROW), "--sha256", other], env)
    assert tried.code == 1, tried.stderr
    assert tried.stdout.splitlines()[-2] == _next(model, sha256=False)
    # A manifest of another copy (row 100 differs in block 0): no delivery of the row matches its row group.
    changed = bytearray(model.read_bytes())
    changed[BASE + ROW * RB + 5] ^= 0x01
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(bytes(changed))
    manifest = tmp_path / "copy.manifest.json"
    assert run_ggaudit(["manifest", str(copy), "-o", str(manifest)], None).code == 0
    with_manifest = run_ggaudit(["rows", str(model), "--ids", str(ROW), "--manifest", str(manifest)], env)
    lines = with_manifest.stdout.splitlines()
    assert lines[-2] == _next(model, manifest=False)
    assert lines[-1].endswith(UNDECIDED)
    assert any(line.endswith("or direct reads are wrong on this machine; the tensor manifest decides nothing: no "
                             "delivery of the row, put in its row group, gives the group's digest") for line in lines)
    both = run_ggaudit(["rows", str(model), "--ids", str(ROW), "--manifest", str(manifest), "--sha256", other], env)
    assert (both.code, both.stdout.splitlines()[-1].endswith(UNDECIDED), "\nnext: " in both.stdout) == (1, True, False)


@needs_linux
def test_the_page_counts_the_nan_a_path_delivered_apart_from_the_values_stored(model: Path) -> None:
    env = faulted_env(model, "direct", "fill", **NAN_SCALE)
    page = model.parent / "rows.html"
    assert run_ggaudit(["rows", str(model), "--ids", "99-101", "-o", str(page)], env).code == 1
    facts = _facts(page.read_text(encoding="utf-8"))
    assert facts["rows holding NaN/Inf"] == "0 of 3 tested as the reference read, buffered and mmap delivered them"
    assert facts["NaN/Inf delivered"] == ("direct delivered 1 row holding NaN/Inf (first: row 100, block 1, column "
                                          "32): nothing decides whether it is the file&#x27;s bytes")
    # Decided by the blob's name (its sha256): the delivered NaN is not the file's, the stored rows are.
    blob = model.parent / f"sha256-{hashlib.sha256(model.read_bytes()).hexdigest()}"
    shutil.copyfile(model, blob)
    env = faulted_env(blob, "direct", "fill", **NAN_SCALE)
    done = run_ggaudit(["rows", str(blob), "--ids", "99-101", "-o", str(page), "-o", "-"], env)
    assert done.stdout.splitlines()[-1] == f"result: 1 mismatch (garbage 1), 0 short reads; {CROSSING}; " \
                                           "the 3 selected rows are finite in the file"
    facts = _facts(page.read_text(encoding="utf-8"))
    assert facts["rows holding NaN/Inf"] == "0 of 3 tested"
    assert facts["NaN/Inf delivered"] == ("direct delivered 1 row holding NaN/Inf (first: row 100, block 1, column "
                                          "32): not the file&#x27;s bytes (decided by published)")


def test_a_clean_page_has_no_delivered_line(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    shutil.copyfile(FIXTURE, model)
    page = tmp_path / "rows.html"
    assert run_ggaudit(["rows", str(model), "--ids", "99-101", "--modes", "buffered,mmap", "-o", str(page)],
                       None).code == 0
    facts = _facts(page.read_text(encoding="utf-8"))
    assert (facts["rows holding NaN/Inf"], "NaN/Inf delivered" in facts) == ("0 of 3 tested", False)


# --- the grouping, with plain records -------------------------------------------------------------------

GATHER = RowMismatch(kind="garbage", mode="direct", stage="gather", file="m.gguf", tensor=PLE, row=ROW,
                     row_offset=BASE + ROW * RB, length=RB, byte=34, offset=SCALE, block=1, column=32,
                     expected="94 1d", actual="ff ff", differing=2, expected_finite=True, actual_finite=False,
                     actual_nonfinite=RowPlace(1, 32), detail="bytes found nowhere near the row")


def test_stages_that_delivered_the_same_bytes_are_one_entry_and_others_stay_apart() -> None:
    hit = dataclasses.replace(GATHER, stage="cache-hit",
                              detail="cached from a wrong read (gather, garbage): bytes found nowhere near the row")
    pressure = dataclasses.replace(GATHER, stage="cache-pressure",
                                   detail="cached from a wrong read: bytes found nowhere near the row")
    other = dataclasses.replace(GATHER, stage="prefetch", actual="00 ff")       # other bytes: its own entry
    mmap = dataclasses.replace(GATHER, mode="mmap")                             # another path: its own entry
    told = dataclasses.replace(GATHER, stage="cache-miss", detail="cached from a wrong read: the bytes of row 7")
    lines = describe_row_mismatches([GATHER, hit, other, hit, mmap, pressure, told])
    assert [line for line in lines if line.startswith("mismatch: ")] == [
        "mismatch: direct row 100 [garbage] (gather, cache-hit twice, cache-pressure)",
        "mismatch: direct row 100 [garbage] (prefetch)",
        "mismatch: mmap row 100 [garbage] (gather)",
        "mismatch: direct row 100 [garbage] (cache-miss)"]              # another detail: its own entry
    assert lines[6] == "  bytes found nowhere near the row"       # the first stage's detail, said once
    assert (len(lines), lines[-1]) == (4 * 7, "  cached from a wrong read: the bytes of row 7")
