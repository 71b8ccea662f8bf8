"""``--format junit``: JUnit XML that parses whatever the names hold, with exact tests/failures/errors/skipped
counts per suite (a target) and in all, for scan, verify, rows and diff, and a failed target."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from gguf import GGMLQuantizationType as T

from ggaudit.outcomes import Outcome
from ggaudit.cli.reporters import Rendering, reporter
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.rows import replay as R
from ggaudit.evidence.readers import Reader, open_reader
from ggaudit.escaping import escape
from rows_support import make_table
from scan_support import finite_tensor
from test_report_sarif import _Shifted, run, two_findings_model

COUNTS = ("tests", "failures", "errors", "skipped")


def parsed(text: str) -> ET.Element:
    root = ET.fromstring(text)
    assert root.tag == "testsuites"
    return root


def counts(element: ET.Element, names: tuple[str, ...] = COUNTS) -> tuple[int, ...]:
    return tuple(int(element.attrib[n]) for n in names)


def cases(suite: ET.Element) -> list[tuple[str, str]]:
    """Each test case's name and outcome (pass, failure, error or skipped)."""
    found = []
    for case in suite.iter("testcase"):
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "pass")
        found.append((case.attrib["name"], outcome))
    return found


def _layered(path: Path) -> None:
    """two_findings_model with its tensors in layers: the NaN in blk.0, the -Inf in blk.1, the clean one outside."""
    two_findings_model(path, first="blk.0.a.weight", second="blk.1.b.weight")


def test_scan_a_case_per_tensor_group_and_the_structure(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _layered(path)
    code, out, _ = run("scan", path, "--format", "junit", "--limit", "0")
    root = parsed(out)
    (suite,) = root
    assert code == 1 and suite.attrib["name"] == str(path)
    assert cases(suite) == [(f"structure of {path}", "pass"), ("tensors blk.0.*", "failure"),
                            ("tensors blk.1.*", "failure"), ("other tensors", "pass")]
    assert counts(suite) == (4, 2, 0, 0) and counts(root, COUNTS[:3]) == (4, 2, 0)
    failure = suite.find("testcase[@name='tensors blk.1.*']/failure")
    assert failure is not None and failure.attrib["type"] == "-inf"
    _, text, _ = run("scan", path, "--limit", "0")
    assert failure.attrib["message"] == next(line for line in text.splitlines()
                                             if line.startswith("tensor blk.1.b.weight "))
    assert failure.attrib["message"].startswith(
        "tensor blk.1.b.weight (Q8_0 [64, 2]): nan 0, +inf 0, -inf 1, outlier 0")
    assert failure.text == "... 1 more not listed (--limit)"        # --limit 0: counted, not listed


def test_scan_a_model_of_many_layers_is_a_case_per_layer_each_failing_tensor_said(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    clean = bytes(finite_tensor(T.F32, (8, 1), 4))
    nan = bytearray(clean)
    nan[4 * 5:4 * 6] = b"\x00\x00\xc0\x7f"            # element 5: a quiet NaN (0x7fc00000)
    names = ["token_embd.weight", *(f"blk.{n}.{t}.weight" for n in range(40) for t in ("attn_q", "attn_k", "ffn_up"))]
    damaged = {"blk.7.attn_k.weight", "blk.7.ffn_up.weight", "blk.31.attn_q.weight"}
    write_gguf(path, [TensorSpec(n, T.F32, (8, 1), bytes(nan) if n in damaged else clean) for n in names])
    code, out, _ = run("scan", path, "--format", "junit")
    (suite,) = parsed(out)
    assert code == 1 and counts(suite) == (42, 2, 0, 0)             # the structure, 40 layers, the others
    assert [c for c in cases(suite) if c[1] == "failure"] == [("tensors blk.7.*", "failure"),
                                                              ("tensors blk.31.*", "failure")]
    failure = suite.find("testcase[@name='tensors blk.7.*']/failure")
    assert failure is not None and failure.text is not None
    _, text, _ = run("scan", path)
    said = text.splitlines()
    at = [i for i, line in enumerate(said) if line.startswith("tensor blk.7.")]
    assert failure.attrib["message"] == f"2 of 3 tensors hold findings; first: {said[at[0]]}"
    assert said[at[0]].startswith("tensor blk.7.attn_k.weight (F32 [8, 1]): nan 1, +inf 0, -inf 0, outlier 0")
    # Each failing tensor's detail as the text report words it: its line, then its finding's.
    assert failure.text.splitlines() == [said[at[0]], said[at[0] + 1].strip(), said[at[1]], said[at[1] + 1].strip()]
    assert said[at[1] + 1].strip().startswith(f"nan at file {path} offset ")
    assert said[at[1] + 1].endswith(
        ": tensor blk.7.ffn_up.weight, row 0, column 5: expected finite, got 0x7fc00000 (nan)")


def test_scan_failure_lists_every_finding_line_and_integer_tensors_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _layered(path)
    more = tmp_path / "ints.gguf"
    write_gguf(more, [TensorSpec("ids", T.I32, (4, 1), bytes(16)),
                      TensorSpec("blk.0.f", T.F32, (8, 1), bytes(finite_tensor(T.F32, (8, 1), 1)))])
    with open(more, "ab") as f:
        f.write(b"PAYLOAD")
    code, out, _ = run("scan", path, more, "--format", "junit")
    root = parsed(out)
    first, second = root
    assert code == 1
    _, text, _ = run("scan", path)
    failure = first.find("testcase[@name='tensors blk.0.*']/failure")
    assert failure is not None and failure.text == next(line[2:] for line in text.splitlines() if line.startswith("  "))
    assert cases(second) == [(f"structure of {more}", "failure"), ("other tensors", "skipped"),
                             ("tensors blk.0.*", "pass")]
    assert counts(second) == (3, 1, 0, 1) and counts(root, COUNTS[:3]) == (7, 3, 0)
    system_out = second.find("system-out")
    assert system_out is not None and system_out.text is not None and "structure trailing at file" in system_out.text


def test_a_failed_target_is_a_suite_with_one_error(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    missing = tmp_path / "missing.gguf"
    _layered(path)
    code, out, err = run("scan", missing, path, "--format", "junit")
    root = parsed(out)
    failed, scanned = root
    assert code == 2 and failed.attrib["name"] == str(missing)
    assert counts(failed) == (1, 0, 1, 0) and counts(scanned) == (4, 2, 0, 0)
    assert counts(root, COUNTS[:3]) == (5, 2, 1)
    error = failed.find("testcase/error")
    assert error is not None and error.attrib["type"] == "ReadError"
    assert error.attrib["message"] == err.removeprefix("ggaudit: error: ").rstrip("\n")


def test_verify_a_case_per_file_and_subject(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    offsets = two_findings_model(path)
    assert run("manifest", path, "-o", tmp_path / "m.manifest")[0] == 0
    code, out, _ = run("verify", path, "--manifest", tmp_path / "m.manifest", "--format", "junit")
    (suite,) = parsed(out)
    assert code == 0 and cases(suite) == [("m.gguf", "pass")] and counts(suite) == (1, 0, 0, 0)
    with open(path, "r+b") as f:
        f.seek(offsets["clean.weight"])
        f.write(b"\xff" * 4)
    code, out, _ = run("verify", path, "--manifest", tmp_path / "m.manifest", "--format", "junit")
    root = parsed(out)
    (suite,) = root
    assert code == 1 and cases(suite) == [("m.gguf", "failure"), ("clean.weight", "failure")]
    assert counts(suite) == (2, 2, 0, 0) and counts(root, COUNTS[:3]) == (2, 2, 0)
    failure = suite.find("testcase[@name='clean.weight']/failure")
    assert failure is not None and failure.attrib["type"] == "tensor-data"
    assert failure.attrib["message"].startswith(f"MISMATCH tensor-data: file {path}, offset {offsets['clean.weight']}, "
                                                "length 32; tensor clean.weight")
    assert failure.text is not None and "\n  expected: " in failure.text


def test_rows_a_case_per_read_path_and_the_values(tmp_path: Path) -> None:
    table = make_table(tmp_path, T.IQ4_NL, ne0=160, n_rows=64)

    def shifted(path: str, mode: str) -> Reader:
        inner = open_reader(path, mode)
        return _Shifted(inner, table.tensor.row_bytes) if mode == "mmap" else inner

    report = R.check_rows(table.path, [3, 10, 20], modes=["buffered", "mmap"],
                          options=R.RowsOptions(reader_factory=shifted))
    root = parsed(reporter("junit")([Outcome(table.path, result=report)], Rendering(fmt="junit")))
    (suite,) = root
    assert cases(suite) == [("buffered (gather)", "pass"), ("mmap (gather)", "failure"), ("finite values", "pass")]
    assert counts(suite) == (3, 1, 0, 0) and counts(root, COUNTS[:3]) == (3, 1, 0)
    failure = suite.find("testcase[@name='mmap (gather)']/failure")
    assert failure is not None and failure.attrib["type"] == "misplaced"
    assert failure.text is not None and failure.text.count("mismatch: mmap row ") == 3


def test_diff_a_case_per_tensor_and_the_metadata(tmp_path: Path) -> None:
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    same = bytes(finite_tensor(T.F32, (8, 2), 1))
    changed = bytearray(same)
    changed[3] ^= 0x01
    write_gguf(a, [TensorSpec("same", T.F32, (8, 2), same), TensorSpec("data", T.F32, (8, 2), same),
                   TensorSpec("gone", T.F32, (8, 1), same[:32])])
    write_gguf(b, [TensorSpec("same", T.F32, (8, 2), same), TensorSpec("data", T.F32, (8, 2), bytes(changed))])
    code, out, _ = run("diff", a, b, "--format", "junit")
    root = parsed(out)
    (suite,) = root
    # B lost a tensor: its file is shorter, a structure difference too.
    assert code == 1 and cases(suite) == [("metadata", "pass"), ("structure", "failure"), ("gone", "failure"),
                                          ("data", "failure"), ("same", "pass")]
    assert counts(suite) == (5, 3, 0, 0) and counts(root, COUNTS[:3]) == (5, 3, 0)


def test_xml_stays_well_formed_whatever_the_names_hold(tmp_path: Path) -> None:
    folder = tmp_path / "&'; d\u00e9j\u00e0"      # <, > and " cannot be in a Windows name: the tensor's has them
    folder.mkdir()
    path = folder / "m.gguf"
    hostile = "evil\x00\x1b[2J\x07\u202e\ufffe\\\n]]>\"</testcase>&amp;.weight"
    two_findings_model(path, first=hostile)
    code, out, _ = run("scan", path, "--format", "junit")
    assert code == 1 and out.isascii()
    assert not any(ch in out for ch in "\x00\x1b\x07")
    root = parsed(out)
    (suite,) = root
    assert suite.attrib["name"] == str(path)
    assert cases(suite)[1] == ("other tensors", "failure") and counts(root, COUNTS[:3]) == (2, 1, 0)
    failure = suite.find("testcase/failure")
    assert failure is not None and failure.text is not None and f"tensor {escape(hostile)}, row 2" in failure.text
    assert failure.attrib["message"].startswith(f"2 of 3 tensors hold findings; first: tensor {escape(hostile)} ")
