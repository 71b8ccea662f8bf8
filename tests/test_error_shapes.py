"""Every way a target can fail has one JSON shape, valid against the shipped schema, whatever the command.

Each command that takes --json (check, verify, rows, scan, info, diff, manifest) is driven into each kind of
error it can end a target with: a file that is not GGUF (bad magic: FormatError), a missing file or a folder
(ReadError), a malformed checksum file, tensor manifest or Ollama manifest (ManifestError), an option value the
target cannot take (UsageError), a target holding nothing to check (NothingChecked), and a read failing with
EIO below the process (the fault layer, tests/faultlayer.c: ReadError, for check, rows and verify). Each
document must validate against ggaudit/schema/cli-output.schema.json and be exactly the one failed target
expected (kind, message, path, offset, field), exit 2, its message the one line on stderr.

The ``kind`` is always one of the schema's five public names: an error class ggaudit keeps inside (a read
path's ``FailedRead``, as check's passes raise it, ``DirectIOUnavailable``) is said as its nearest public
class. Not every pair exists: verify reports a missing file or a damaged header as a finding (exit 1, shown
here too), and info, diff and manifest check nothing, so they have no NothingChecked.

In-process (CliRunner) but for the fault layer, which is preloaded into one child process that runs its
three commands.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gguf import GGMLQuantizationType as T

from ggaudit.cli.reporters.json import PUBLIC_ERRORS, SCHEMA as OUTPUT_SCHEMA, public_kind
from ggaudit.errors import GGAuditError, NothingChecked
from ggaudit.evidence.readers import DirectIOUnavailable, FailedRead
from ggaudit.evidence.paths import CACHE_CHUNK_BYTES as CHUNK_BYTES
from ggaudit.format.build import write_gguf

from fault_support import faulted_env
from platforms import needs_linux
from rows_support import make_table
from support import FIXTURES, run_cli
from test_json_schema import SCHEMA, errors
from test_rows_read_errors import _commands

CLEAN = FIXTURES / "all_types.gguf"
PLE = FIXTURES / "ple_iq4_nl.gguf"
SPLIT = FIXTURES / "split-00001-of-00002.gguf"
OLLAMA = Path("manifests/registry.ollama.ai/library/tiny/latest")
#: What a scan of a file with no tensor, vocabulary or chat template says (it checked nothing).
NO_HEADER_CHECKED = "holds no tensor, vocabulary or chat template; nothing was checked"
KINDS = SCHEMA["$defs"]["failed"]["properties"]["error"]["properties"]["kind"]["enum"]


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder of bad inputs, made once: bad.gguf (magic XXXX), none.gguf (no tensor), SUMS (a line that is
    no checksum line), GONE (names only an absent file), bad.json (not JSON), ollama/ (a store whose manifest of
    tiny is not JSON), empty/ (a folder store holding nothing), noids.json (an empty list of row IDs), clean.json
    (the tensor manifest of CLEAN)."""
    folder = tmp_path_factory.mktemp("bad")
    (folder / "bad.gguf").write_bytes(b"XXXX" + bytes(28))
    write_gguf(folder / "none.gguf", [], {"general.architecture": "llama"})
    (folder / "SUMS").write_text("garbage line\n")
    (folder / "GONE").write_text(f"{'0' * 64}  gone.bin\n")
    (folder / "bad.json").write_text("not json\n")
    (folder / "ollama" / OLLAMA).parent.mkdir(parents=True)
    (folder / "ollama" / OLLAMA).write_text("not json\n")
    (folder / "empty").mkdir()
    (folder / "noids.json").write_text("[]\n")
    assert run_cli(["manifest", CLEAN, "-o", folder / "clean.json"]).exit_code == 0
    return folder


def failed(kind: str, path: Path | str | None, text: str, *, offset: int | None = None,
           field: str | None = None) -> dict[str, Any]:
    """The error entry expected: its message the parts joined as every error line joins them."""
    parts = [str(path) if path is not None else None, None if offset is None else f"offset {offset}", field, text]
    return {"message": ": ".join(p for p in parts if p is not None), "path": None if path is None else str(path),
            "offset": offset, "field": field, "kind": kind}


def magic(folder: Path) -> dict[str, Any]:
    return failed("FormatError", folder / "bad.gguf", "not a GGUF file (its first bytes are "
                  "b'XXXX\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00'...; a GGUF starts with b'GGUF')",
                  offset=0, field="magic")


def gone(folder: Path) -> dict[str, Any]:
    return failed("ReadError", folder / "gone.gguf", "cannot open: No such file or directory")


def not_sums(folder: Path) -> dict[str, Any]:
    return failed("ManifestError", folder / "SUMS", "not a GNU, BSD or OpenSSL checksum line", field="line 1")


def not_lines(folder: Path) -> dict[str, Any]:
    """bad.json, read as check reads a manifest that is not ggaudit's JSON: as llama-gguf-hash lines."""
    return failed("ManifestError", folder / "bad.json", "'not json' is not 'TYPE  HEX  NAME'", field="line 1")


Case = Callable[[Path], tuple[list[Any], dict[str, Any]]]


def ollama_case(command: str) -> Case:
    """*command* on ollama:tiny of the store whose manifest is not JSON."""
    extra = {"manifest": ["-o", "-"], "diff": [CLEAN]}.get(command, [])
    return lambda b: ([command, "ollama:tiny", *extra, "--store", b / "ollama"],
                      failed("ManifestError", b / "ollama" / OLLAMA, "manifest is not JSON: Expecting value", offset=0))


#: id -> the arguments (after the command name, before --json) and the error entry expected, from the folder of
#: bad inputs. The target is the first argument but where the case says otherwise (TARGETS).
CASES: dict[str, Case] = {
    # FormatError: a file that is not GGUF. (verify: a damaged header is a finding, below.)
    "check-format": lambda b: (["check", b / "bad.gguf"], magic(b)),
    "rows-format": lambda b: (["rows", b / "bad.gguf", "--ids", "1"], magic(b)),
    "scan-format": lambda b: (["scan", b / "bad.gguf"], magic(b)),
    "info-format": lambda b: (["info", b / "bad.gguf"], magic(b)),
    "diff-format": lambda b: (["diff", CLEAN, b / "bad.gguf"], magic(b)),
    "manifest-format": lambda b: (["manifest", b / "bad.gguf", "-o", "-"], magic(b)),
    # ReadError: a missing file (verify: a folder where its manifest's model should be).
    "check-missing": lambda b: (["check", b / "gone.gguf"], gone(b)),
    "rows-missing": lambda b: (["rows", b / "gone.gguf", "--ids", "1"], gone(b)),
    "scan-missing": lambda b: (["scan", b / "gone.gguf"], gone(b)),
    "info-missing": lambda b: (["info", b / "gone.gguf"], gone(b)),
    "diff-missing": lambda b: (["diff", CLEAN, b / "gone.gguf"], gone(b)),
    "manifest-missing": lambda b: (["manifest", b / "gone.gguf", "-o", "-"], gone(b)),
    "verify-folder": lambda b: (["verify", b / "empty", "--manifest", b / "clean.json"],
                                failed("ReadError", b / "empty", "is a directory")),
    # ManifestError: a checksum file, a tensor manifest, an Ollama manifest that is malformed.
    "check-sums": lambda b: (["check", CLEAN, "--sums", b / "SUMS"], not_sums(b)),
    "check-manifest": lambda b: (["check", CLEAN, "--manifest", b / "bad.json"], not_lines(b)),
    "verify-sums": lambda b: (["verify", "--sums", b / "SUMS"], not_sums(b)),
    "rows-manifest": lambda b: (["rows", PLE, "--ids", "1", "--manifest", b / "bad.json"],
                                failed("ManifestError", b / "bad.json", "tensor manifest is not JSON: Expecting value",
                                       offset=0)),
    **{f"{command}-ollama-manifest": ollama_case(command) for command in ("scan", "info", "diff", "manifest")},
    # UsageError: an option value the target cannot take.
    "check-usage": lambda b: (["check", SPLIT, "--sha256", "0" * 64],
                              failed("UsageError", None, "is one file's digest, and the target has 2 files: check "
                                                         "each file on its own, or give --sums", field="--sha256")),
    "verify-usage": lambda b: (["verify", CLEAN], failed(
        "UsageError", CLEAN, "the file name holds no sha256; give --manifest, --sums, ollama:NAME or hf:ORG/NAME to "
                             "say what to check it against")),
    "rows-usage": lambda b: (["rows", PLE, "--ids", "1", "--tensor", "no.such.weight"],
                             failed("UsageError", PLE, "no tensor named 'no.such.weight'", field="--tensor")),
    "scan-usage": lambda b: (["scan", CLEAN, "--tensor", "nomatch*"],
                             failed("UsageError", CLEAN, "no tensor matches 'nomatch*'", field="--tensor")),
    "info-usage": lambda b: (["info", "lmstudio:", "--store", b / "empty"],
                             failed("UsageError", None, "lmstudio: holds 0 GGUF models; open one by its path",
                                    field="model")),
    "diff-usage": lambda b: (["diff", CLEAN, "lmstudio:", "--store", b / "empty"],
                             failed("UsageError", None, "lmstudio: holds 0 GGUF models; open one by its path",
                                    field="model")),
    "manifest-usage": lambda b: (["manifest", CLEAN, "-o", CLEAN, "--force"],
                                 failed("UsageError", CLEAN, "is an input of this run (all_types.gguf); an output "
                                                             "never replaces an input")),
    # NothingChecked: nothing to check (info, diff and manifest check nothing).
    "check-nothing": lambda b: (["check", b / "none.gguf"],
                                failed("NothingChecked", b / "none.gguf", NO_HEADER_CHECKED)),
    "scan-nothing": lambda b: (["scan", b / "none.gguf"],
                               failed("NothingChecked", b / "none.gguf", NO_HEADER_CHECKED)),
    "rows-nothing": lambda b: (["rows", PLE, "--ids-file", b / "noids.json"],
                               failed("NothingChecked", None, f"no rows selected by --ids-file {b / 'noids.json'}; "
                                                              "nothing was checked")),
    "verify-nothing-present": lambda b: (["verify", "--sums", b / "GONE", "--ignore-missing"],
                                         failed("NothingChecked", b / "GONE", "no file it names is present "
                                                "(--ignore-missing): no file was verified", field="--ignore-missing")),
    "verify-empty-store": lambda b: (["verify", "lmstudio:", "--store", b / "empty"],
                                     failed("NothingChecked", b / "empty", "the folder holds no GGUF file; nothing "
                                                                           "was checked")),
}

#: The target each failed element names, where it is not the first argument after the command.
TARGETS: dict[str, Callable[[Path], Any]] = {
    "diff-format": lambda b: CLEAN, "diff-missing": lambda b: CLEAN, "diff-usage": lambda b: CLEAN,
    "verify-sums": lambda b: b / "SUMS", "verify-nothing-present": lambda b: b / "GONE",
}


def _expect_one_failed(result: Any, target: Any, entry: dict[str, Any]) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    doc = json.loads(result.stdout)
    assert errors(doc) == []
    assert doc == {"schema": OUTPUT_SCHEMA, "status": "error", "models": [{"target": str(target), "error": entry}]}
    assert result.stderr == f"ggaudit: error: {entry['message']}\n"


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_kind_of_error_of_each_command_is_one_valid_failed_target(case: str, bad: Path) -> None:
    args, entry = CASES[case](bad)
    result = run_cli([*args, "--json"])
    target = TARGETS[case](bad) if case in TARGETS else args[1]
    _expect_one_failed(result, target, entry)


def test_the_cases_reach_every_command_and_kind() -> None:
    """Every command with --json meets each kind it can end a target with: the five kinds of the schema, but
    FormatError for verify (a damaged header is its finding) and NothingChecked for info, diff and manifest."""
    reached = {(case.split("-")[0], CASES[case](Path("b"))[1]["kind"]) for case in CASES}
    commands = ("check", "verify", "rows", "scan", "info", "diff", "manifest")
    expected = {(c, k) for c in commands for k in KINDS} - {("verify", "FormatError")} - {
        (c, "NothingChecked") for c in ("info", "diff", "manifest")}
    assert reached == expected
    assert len(CASES) == 33


def test_what_verify_says_as_a_finding_is_a_valid_findings_document(bad: Path) -> None:
    """A missing file and a damaged header are verify's findings (exit 1), not failed targets."""
    for args, kind, detail in (
            (["verify", bad / "gone.gguf", "--sha256", "0" * 64], "missing", "file not found"),
            (["verify", bad / "bad.gguf", "--sha256", "0" * 64], "sha256", "sha256 differs")):
        result = run_cli([*args, "--json"])
        assert result.exit_code == 1, (result.stdout, result.stderr)
        doc = json.loads(result.stdout)
        assert errors(doc) == [] and doc["status"] == "findings"
        assert [(m["kind"], m["detail"]) for m in doc["models"][0]["mismatches"]] == [(kind, detail)]


@pytest.mark.parametrize(("args", "line"), [
    (["check", CLEAN, "--modes", "bogus"], "--modes: 'bogus': choose from buffered, mmap, direct"),
    (["rows", PLE, "--ids", "1", "--modes", ""], "--modes needs at least one of buffered,mmap,direct"),
    (["verify", "--sums", FIXTURES / "README.md", CLEAN], "--sums FILE takes no TARGET, no --manifest and no --sha256"),
])
def test_an_option_refused_before_any_target_prints_no_json(args: list[Any], line: str) -> None:
    """docs/json.md: an error found before any target is audited prints no JSON, one line, exit 2."""
    result = run_cli([*args, "--json"])
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"ggaudit: error: {line}\n")


@needs_linux
def test_a_read_failing_with_eio_below_the_process_is_a_read_error_for_check_rows_and_verify(
        tmp_path: Path) -> None:
    """EIO on every buffered read of row 7000 (past the 1 MiB the header parser reads). check's pass raises a
    read path's FailedRead, said as the public ReadError; rows compares nothing; verify's hash cannot finish."""
    table = make_table(tmp_path, T.Q8_0, 160, 8000)
    row, rb, size = table.offset(7000), table.tensor.row_bytes, os.path.getsize(table.path)
    sha = hashlib.sha256(Path(table.path).read_bytes()).hexdigest()
    env = faulted_env(table.path, "buffered", "eio", offset=row)
    commands = [["check", table.path, "--modes", "buffered", "--json"],
                ["rows", table.path, "--ids", "7000", "--modes", "buffered", "--json"],
                ["verify", table.path, "--sha256", sha, "--json"]]
    eio = os.strerror(errno.EIO)
    entries = [
        failed("ReadError", table.path, f"buffered read of {size - CHUNK_BYTES} bytes failed: {eio}",
               offset=CHUNK_BYTES),
        failed("ReadError", table.path, f"every read failed (buffered; first: buffered read of {rb} bytes failed: "
                                        f"{eio}); no row was compared", offset=row),
        failed("ReadError", table.path, f"read failed: {eio}", offset=0)]
    for (code, out, err), entry in zip(_commands(env, *commands), entries, strict=True):
        assert code == 2, (out, err)
        doc = json.loads(out)
        assert errors(doc) == []
        assert doc == {"schema": OUTPUT_SCHEMA, "status": "error", "models": [{"target": table.path, "error": entry}]}
        assert err == f"ggaudit: error: {entry['message']}\n"


def test_every_error_class_is_said_as_its_nearest_public_class() -> None:
    """The five names are the schema's; every subclass of GGAuditError ggaudit defines has one of them up its MRO."""
    assert [c.__name__ for c in PUBLIC_ERRORS] == KINDS
    seen, todo = [], [GGAuditError]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls is not GGAuditError and cls.__module__.startswith("ggaudit."):
            seen.append(cls)
    assert {FailedRead, DirectIOUnavailable} <= set(seen)
    for cls in seen:
        assert public_kind(cls("m.gguf", "x")) in KINDS, cls
    assert public_kind(FailedRead("m.gguf", "x", mode="mmap", errno=errno.EIO)) == "ReadError"
    assert public_kind(DirectIOUnavailable("m.gguf", "x")) == "ReadError"
    assert public_kind(NothingChecked("m.gguf", "x")) == "NothingChecked"
