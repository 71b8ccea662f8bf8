"""The library's front door (issue 12): ``import ggaudit`` gives every entry point, each takes a path,
``ollama:NAME``, ``hf:ORG/NAME`` or an opened Model, and bad arguments are GGAuditErrors naming the
parameter."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib
import inspect
import os
import pkgutil
import pydoc
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import ggaudit
from ollama_support import ollama_store
from platforms import needs_symlinks
from support import REPO, write_small_model, write_split_set

COMMIT = "c0ffee" + "0" * 34
ROW = 68        # write_small_model: Q8_0 rows of 64 columns


#: The names of the front door: the entry points, their options, what they return and the findings in it, a
#: model as opened, an engine's own reads under check_rows, small GGUFs for an engine's tests, the errors.
FRONT_DOOR = [
    "CacheFactory", "CheckOptions", "CheckReport", "Checked", "Diagnostic", "DiffOptions", "DiffReport", "FileCheck",
    "Finding", "FindingKind", "FormatError", "GGAuditError", "GGMLQuantizationType", "GGUFFile", "GivenIds",
    "HeaderChecks", "ManifestError", "MetaValue", "MetadataFinding", "Mismatch", "Mode", "Model", "NothingChecked",
    "ReadError", "Reader", "ReaderFactory", "RowCache", "RowMismatch", "RowSelection", "RowsOptions", "RowsReport",
    "ScanOptions", "ScanReport", "StructureFinding", "TemplateFinding", "TemplateRule", "Tensor", "TensorManifest",
    "TensorScan", "TensorSpec", "UsageError", "Verdict", "VerifyOptions", "VerifyReport", "__version__",
    "build_manifest", "check", "check_rows", "diff", "open_model", "scan", "verify", "write_gguf", "write_manifest"]


def test_the_front_door_exports_every_entry_point() -> None:
    assert ggaudit.__all__ == FRONT_DOOR            # sorted, each once
    assert all(hasattr(ggaudit, name) for name in ggaudit.__all__)
    assert set(ggaudit.__all__) <= set(dir(ggaudit))
    for name in ("FormatError", "ManifestError", "NothingChecked", "ReadError", "UsageError"):
        assert issubclass(getattr(ggaudit, name), ggaudit.GGAuditError)
    with pytest.raises(AttributeError, match="module 'ggaudit' has no attribute 'scanner'"):
        ggaudit.scanner  # noqa: B018


def _type_checking_imports() -> dict[str, str]:
    """What ``ggaudit/__init__.py`` imports under ``if TYPE_CHECKING:``, as name -> "module:attribute"."""
    tree = ast.parse(Path(ggaudit.__file__).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    return {a.asname or a.name: f"ggaudit.{node.module}:{a.name}"
            for node in block.body if isinstance(node, ast.ImportFrom) for a in node.names}


def test_what_type_checkers_see_is_what_loads() -> None:
    """The names a type checker reads under TYPE_CHECKING are the lazy names, from the same modules, and
    every one is the object its module defines (its options, reports, protocol types from where they are)."""
    from ggaudit import _LAZY

    assert _type_checking_imports() == _LAZY
    eager = {"FormatError", "GGAuditError", "ManifestError", "NothingChecked", "ReadError", "UsageError", "__version__"}
    assert sorted([*_LAZY, *eager]) == FRONT_DOOR
    for name, where in _LAZY.items():
        module, _, attribute = where.partition(":")
        assert getattr(ggaudit, name) is getattr(importlib.import_module(module), attribute), name
    from ggaudit.evidence.readers import Reader
    from ggaudit.format.blocks import GGMLQuantizationType
    from ggaudit.format.build import GGMLQuantizationType as from_build
    from ggaudit.rows.gather import RowCache
    assert (ggaudit.Reader, ggaudit.RowCache, ggaudit.GGMLQuantizationType, from_build) == (
        Reader, RowCache, GGMLQuantizationType, GGMLQuantizationType)
    assert "GGMLQuantizationType" in importlib.import_module("ggaudit.format.build").__all__


def _submodules() -> list[str]:
    """Every module of ggaudit that imports on this system (fleet needs dask; io.windows, Windows)."""
    return sorted(m.name for m in pkgutil.walk_packages(ggaudit.__path__, "ggaudit.")
                  if not m.name.startswith(("ggaudit.fleet", "ggaudit.io.windows")))


#: Printed by a fresh interpreter after its imports: what each of the three names is.
SAY_WHAT = ("import inspect\n"
            "print(*(f'{f.__module__}.{f.__name__}' if inspect.isfunction(f) else repr(f)"
            " for f in (ggaudit.scan, ggaudit.verify, ggaudit.check)))")


@pytest.mark.parametrize("first", ["pass", "from ggaudit.scan import kernel", "import ggaudit.scan.workers",
                                   "import ggaudit.stores.sums", "ggaudit.scan; ggaudit.verify",
                                   "from ggaudit.verify import dispatch", "from ggaudit.check import decide",
                                   "import ggaudit.check.run", "from ggaudit import scan, verify, check"])
def test_scan_verify_and_check_are_the_functions_whatever_was_imported_first(first: str, tmp_path: Path) -> None:
    """ggaudit.scan, ggaudit.verify and ggaudit.check are plain functions, and stay so after an import of
    their packages' modules, in a fresh interpreter after any import order; they run."""
    model = write_small_model(tmp_path / "m.gguf")
    manifest = tmp_path / "m.json"
    ggaudit.write_manifest(ggaudit.build_manifest(model), manifest)
    code = (f"import ggaudit; {first}; import ggaudit\n"
            f"print(ggaudit.scan({str(model)!r}).ok, ggaudit.verify({str(model)!r}, manifest={str(manifest)!r}).ok,"
            f" ggaudit.check({str(model)!r}, manifest={str(manifest)!r}, modes='buffered').verdict)\n" + SAY_WHAT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    # buffered only: the manifest matched as the page cache delivers it (the device was not read past it)
    assert out.stdout.splitlines() == ["True True cache-verified",
                                       "ggaudit.scan.run.scan ggaudit.verify.dispatch.verify ggaudit.check.run.check"
                                       ], out.stderr


def test_importing_every_module_leaves_the_functions_and_the_packages_importable() -> None:
    """After every module of ggaudit is imported (the import system binds each package to its parent's name
    as it goes), the three names are still the functions; the packages are in sys.modules, and their modules
    are imported by name (``from ggaudit.scan import run``), not reached through the function."""
    modules = _submodules()
    assert {"ggaudit.scan", "ggaudit.scan.run", "ggaudit.verify.dispatch", "ggaudit.check.run"} <= set(modules)
    code = ("import importlib, sys, ggaudit\n"
            f"for name in {modules!r}: importlib.import_module(name)\n" + SAY_WHAT + "\n"
            "from ggaudit.scan import run\n"
            "from ggaudit.scan.report import TensorScan\n"
            "print(run.scan is ggaudit.scan, TensorScan.__module__, sys.modules['ggaudit.scan'].__name__)\n"
            "try:\n    ggaudit.scan.run\nexcept AttributeError as err:\n    print(err)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.splitlines() == [
        "ggaudit.scan.run.scan ggaudit.verify.dispatch.verify ggaudit.check.run.check",
        "True ggaudit.scan.report ggaudit.scan",
        "'function' object has no attribute 'run'"], out.stderr


@pytest.mark.parametrize("function, first_parameters, first_line", [
    ("scan", ["model", "tensors", "deep"], "Scan a model's tensors for NaN, Inf and (with ``max_abs``) outliers."),
    ("verify", ["target", "manifest", "sums"], "Check bytes against the digests they should have, and say where "
                                               "they differ."),
    ("check", ["target", "manifest", "sums"], "Read every byte of every file of ``target`` (a path, a store name, "
                                              "or a Model) through each read"),
    ("diff", ["path_a", "path_b", "fail_fast"], "Open both models (a path, any shard of a split set, "
                                                "``ollama:NAME``, ``hf:ORG/NAME`` or a Model)"),
])
def test_the_front_door_functions_show_their_signature_and_docstring(function: str, first_parameters: list[str],
                                                                     first_line: str) -> None:
    entry = getattr(ggaudit, function)
    assert inspect.isfunction(entry)
    parameters = inspect.signature(entry).parameters
    assert list(parameters)[:3] == first_parameters
    assert list(parameters)[-2:] == ["options", "progress"]
    assert not any(p.kind is p.VAR_KEYWORD for p in parameters.values())       # no **keywords: Any
    assert inspect.getdoc(entry).startswith(first_line)  # type: ignore[union-attr]
    shown = pydoc.plain(pydoc.render_doc(entry))
    assert shown.splitlines()[2].startswith(f"{entry.__name__}(" + first_parameters[0])   # not a package page
    assert "PACKAGE CONTENTS" not in shown and first_line.split(" (")[0] in " ".join(shown.split())


JOBS_AND_OPTIONS = [("scan", "ScanOptions"), ("verify", "VerifyOptions"), ("check", "CheckOptions"),
                    ("diff", "DiffOptions")]


@pytest.mark.parametrize("function, options", JOBS_AND_OPTIONS)
def test_each_job_s_keyword_parameters_are_its_options_fields(function: str, options: str) -> None:
    """The options written out as keywords cannot drift from the options object: the same names, in the
    same order, with the same defaults (the same objects: a default left alone is not "given") and types."""
    entry, kind = getattr(ggaudit, function), getattr(ggaudit, options)
    keywords = [p for p in inspect.signature(entry).parameters.values()
                if p.kind is p.KEYWORD_ONLY and p.name not in ("options", "progress")]
    fields = dataclasses.fields(kind)
    assert [p.name for p in keywords] == [f.name for f in fields]
    assert all(p.default is f.default for p, f in zip(keywords, fields, strict=True))
    hints, field_hints = typing.get_type_hints(entry), typing.get_type_hints(kind)
    assert [hints[p.name] for p in keywords] == [field_hints[f.name] for f in fields]


#: The fleet's entry points (issue 36), their options, and the parameters of the run on a cluster after ``options``.
FLEET_JOBS = [("scan_on", "ScanOptions", ["store", "task_bytes", "retries"]),
              ("verify_on", "VerifyOptions", ["retries"]), ("check_on", "CheckOptions", ["retries"])]
#: A value of each option a cluster refuses that is not its default, and so is refused in an options object.
REFUSED_VALUES = {"anomalies": True, "workers": 0}


def _keyword_hints(entry: typing.Callable[..., object], names: list[str]) -> dict[str, object]:
    """The types of ``entry``'s parameters ``names``, resolved in its module (the rest of its signature, its
    client, names Dask's types, which are imported only for type checkers)."""
    holder = type("Keywords", (), {"__annotations__": {n: entry.__annotations__[n] for n in names},
                                   "__module__": entry.__module__})
    return typing.get_type_hints(holder)


@pytest.mark.parametrize("function, options, run_parameters", FLEET_JOBS)
def test_each_fleet_job_s_keyword_parameters_are_its_options_fields_but_what_a_cluster_refuses(
        function: str, options: str, run_parameters: list[str]) -> None:
    """scan_on, verify_on and check_on take the fields of their options as typed keyword parameters (the
    same names, order, default objects and types) but the ones the cluster refuses, each with its reason,
    which on_fleet gives when an options object asks for one; then options and the run's own parameters."""
    import ggaudit.fleet
    from ggaudit.fleet.run import REFUSED_ON_FLEET

    entry, kind = getattr(ggaudit.fleet, function), getattr(ggaudit, options)
    parameters = list(inspect.signature(entry).parameters.values())
    assert not any(p.kind is p.VAR_KEYWORD for p in parameters)       # no **keywords: Any
    keywords = [p for p in parameters if p.kind is p.KEYWORD_ONLY]
    names = [p.name for p in keywords]
    assert names[names.index("options") + 1:] == run_parameters
    fields = [f for f in dataclasses.fields(kind) if f.name not in REFUSED_ON_FLEET]
    offered = keywords[:names.index("options")]
    assert [p.name for p in offered] == [f.name for f in fields]
    assert all(p.default is f.default for p, f in zip(offered, fields, strict=True))
    field_hints = typing.get_type_hints(kind)
    assert _keyword_hints(entry, [f.name for f in fields]) == {f.name: field_hints[f.name] for f in fields}
    refused = sorted({f.name for f in dataclasses.fields(kind)} & set(REFUSED_ON_FLEET))
    assert refused == {"scan_on": ["anomalies", "workers"], "verify_on": [], "check_on": ["anomalies"]}[function]
    for name in refused:
        with pytest.raises(ggaudit.UsageError) as caught:
            ggaudit.fleet.on_fleet(kind(**{name: REFUSED_VALUES[name]}))
        assert str(caught.value) == f"{name}: {REFUSED_ON_FLEET[name]}"
        assert REFUSED_ON_FLEET[name].endswith(": not on a Dask cluster")


#: An engine's fleet run as a type checker reads it: what it accepts, and each misuse it must catch.
FLEET_TEST = """\
from distributed import Client

import ggaudit
from ggaudit.fleet import check_on, manifest_on, scan_on, verify_on


def run(client: Client) -> None:
    scan_on(client, ["a.gguf", "b.gguf"], deep=True, limit=5, task_bytes=4096, store="/share/ollama")
    scan_on(client, "a.gguf", options=ggaudit.ScanOptions(deep=True), retries=0)
    verify_on(client, "a.gguf", manifest="a.json", fail_fast=True, cache=False)
    check_on(client, "a.gguf", modes=("buffered", "direct"), evict=False)
    manifest_on(client, "a.gguf", group_bytes=4096)
    scan_on(client, "a.gguf", deeep=True)
    scan_on(client, "a.gguf", limit="5")
    scan_on(client, "a.gguf", anomalies=True)
    scan_on(client, "a.gguf", workers=2)
    verify_on(client, "a.gguf", manifset="a.json")
    check_on(client, "a.gguf", modes=["bufered"])
    check_on(client, "a.gguf", anomalies=True)
    manifest_on(client, "a.gguf", group_bytes="4096")
"""


def _needs_mypy() -> None:
    """mypy is the lint extra's, not the test extra's: the README's test command may run without it, and
    .ci/run runs these tests again once the lint extra is installed."""
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[lint]')")


def _mypy_errors(tmp_path: Path, name: str, source: str) -> tuple[list[str], str]:
    """``mypy --strict`` on ``source`` written as ``name``: each error as "LINE: CODE]", and mypy's output."""
    _needs_mypy()
    (tmp_path / name).write_text(source, encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--hide-error-context",
                          "--cache-dir", str(tmp_path / "cache"), str(tmp_path / name)],
                         capture_output=True, text=True, cwd=REPO)
    errors = [line.split(": error: ")[0].rsplit(":", 1)[1] + ": " + line.rsplit("[", 1)[1]
              for line in out.stdout.splitlines() if ": error: " in line]
    return errors, out.stdout


def test_mypy_catches_each_misuse_of_the_fleet_s_options(tmp_path: Path) -> None:
    """mypy --strict on an engine's fleet run: the calls are accepted; a misspelled option, one of the wrong
    type, an option the cluster refuses and a read path that is none are errors, one per misuse (line 13 on)."""
    errors, out = _mypy_errors(tmp_path, "fleet_run.py", FLEET_TEST)
    assert errors == ["13: call-arg]", "14: arg-type]", "15: call-arg]", "16: call-arg]", "17: call-arg]",
                      "18: list-item]", "19: call-arg]", "20: arg-type]"], out


def test_keywords_equal_to_a_default_beside_options_are_refused_but_defaults_left_alone_are_not(
        tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    assert ggaudit.scan(model, options=ggaudit.ScanOptions(limit=1)).ok
    with pytest.raises(ggaudit.UsageError) as caught:
        ggaudit.check(model, options=ggaudit.CheckOptions(), modes=["buffered", "mmap", "direct"])
    assert str(caught.value) == ("options: given with the keywords modes: give the options in the CheckOptions or "
                                 "as keywords, not both")


def test_a_misspelled_option_is_a_type_error_as_python_says_it() -> None:
    with pytest.raises(TypeError, match=r"scan\(\) got an unexpected keyword argument 'deeep'"):
        ggaudit.scan(ALL_TYPES, deeep=True)  # type: ignore[call-arg]


def test_each_literal_names_the_values_of_its_table() -> None:
    from ggaudit.check.facts import VERDICTS
    from ggaudit.evidence.paths import MODES, PATHS
    from ggaudit.format.templates.rules import RULES
    from ggaudit.scan.report import KINDS

    assert typing.get_args(ggaudit.Mode) == MODES == tuple(PATHS) == ("buffered", "mmap", "direct")
    assert typing.get_args(ggaudit.Verdict) == VERDICTS
    assert typing.get_args(ggaudit.FindingKind) == KINDS == ("nan", "+inf", "-inf", "outlier", "anomaly")
    assert typing.get_args(ggaudit.TemplateRule) == RULES
    hints = typing.get_type_hints
    assert (hints(ggaudit.CheckReport)["verdict"], hints(ggaudit.Finding)["kind"],
            hints(ggaudit.TemplateFinding)["rule"]) == (ggaudit.Verdict, ggaudit.FindingKind, ggaudit.TemplateRule)


#: An engine's test as a type checker reads it: what it accepts, and each misuse it must catch.
ENGINE_TEST = """\
import ggaudit
import ggaudit.scan.run
from ggaudit.scan import workers
from ggaudit.scan.report import TensorScan

report = ggaudit.scan("m.gguf", deep=True, limit=5, options=None)
tensors: tuple[TensorScan, ...] = report.tensors
with workers.reader_pool():
    ggaudit.verify("m.gguf", manifest="m.json", fail_fast=True)
checked = ggaudit.check("m.gguf", modes=("buffered", "direct"))
ggaudit.scan("m.gguf", deeep=True)
ggaudit.scan("m.gguf", limit="5")
ggaudit.check("m.gguf", modes=["bufered"])
ggaudit.check_rows("m.gguf", [1], modes=["mmapp"])
ok = checked.verdict == "intactt"
nan = [f.kind == "NaN" for t in report.tensors for f in t.findings]
ggaudit.scan.run.scan("m.gguf")
"""


def test_mypy_accepts_the_front_door_and_catches_each_misuse(tmp_path: Path) -> None:
    """mypy --strict on an engine's test: the calls, the submodule imports and the types are accepted; a
    misspelled option, an option of the wrong type, a read path or a verdict or a kind that is none, and a
    module reached through the function are errors, one per misuse (line 11 on)."""
    errors, out = _mypy_errors(tmp_path, "engine_test.py", ENGINE_TEST)
    assert errors == ["11: call-arg]", "12: arg-type]", "13: list-item]", "14: list-item]",
                      "15: comparison-overlap]", "16: comparison-overlap]", "17: attr-defined]"], out


# --- open_model: every way of naming a model --------------------------------------------------------

def test_open_model_takes_a_path_a_pathlike_or_a_model(tmp_path: Path) -> None:
    path = write_small_model(tmp_path / "m.gguf")
    by_text, by_path = ggaudit.open_model(str(path)), ggaudit.open_model(path)
    assert by_text.source == by_path.source == str(path)
    assert ggaudit.open_model(by_text) is by_text
    assert [t.name for t in by_path.tensors] == ["token_embd.weight"]


def test_open_model_of_any_shard_opens_the_set(tmp_path: Path) -> None:
    shards = write_split_set(tmp_path)
    model = ggaudit.open_model(shards[1])
    assert [f.path for f in model.files] == [str(p) for p in shards]


@pytest.mark.parametrize("bad, kind", [(b"m.gguf", "bytes"), (5, "int"), (None, "NoneType")])
def test_open_model_refuses_what_is_not_a_model(bad: object, kind: str) -> None:
    with pytest.raises(ggaudit.UsageError) as caught:
        ggaudit.open_model(bad)  # type: ignore[arg-type]
    assert str(caught.value) == f"model: must be a path, ollama:NAME, hf:ORG/NAME or a Model, not {kind}"


def _store(tmp_path: Path) -> tuple[Path, Path, Path]:
    write_small_model(tmp_path / "model.gguf")
    write_small_model(tmp_path / "proj.gguf", name="v.weight", rows=8)
    store = tmp_path / "store"
    blob, projector = ollama_store(store, (tmp_path / "model.gguf").read_bytes(),
                                   (tmp_path / "proj.gguf").read_bytes())
    return store, blob, projector


def test_ollama_names_open_the_model_layer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, blob, _ = _store(tmp_path)
    assert ggaudit.open_model("ollama:tiny", store=store).source == str(blob)
    monkeypatch.setenv("OLLAMA_MODELS", str(store))        # the default store, for the entry points
    assert ggaudit.scan("ollama:tiny").ok
    assert ggaudit.scan("ollama:tiny").model == str(blob)


def _hf_cache(tmp_path: Path, files: dict[str, bytes]) -> Path:
    """A Hugging Face cache holding org/tiny at COMMIT with ``files`` (LFS blobs named by sha256)."""
    cache = tmp_path / "hub"
    repo = cache / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT + "\n")
    snap = repo / "snapshots" / COMMIT
    for rel, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / digest).write_bytes(data)
        (snap / rel).parent.mkdir(parents=True, exist_ok=True)
        (snap / rel).symlink_to("../" * (rel.count("/") + 2) + f"blobs/{digest}")
    return cache


@needs_symlinks
def test_hf_names_open_the_snapshot_s_one_model(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf").read_bytes()
    cache = _hf_cache(tmp_path, {"q8/tiny-Q8_0.gguf": model, "README.md": b"# tiny\n"})
    opened = ggaudit.open_model("hf:org/tiny", hf_cache=cache)
    assert opened.source == os.path.join(cache, "models--org--tiny", "snapshots", COMMIT, "q8", "tiny-Q8_0.gguf")
    assert [t.name for t in opened.tensors] == ["token_embd.weight"]


@needs_symlinks
def test_hf_snapshot_with_several_models_asks_for_one(tmp_path: Path) -> None:
    one = write_small_model(tmp_path / "a.gguf").read_bytes()
    two = write_small_model(tmp_path / "b.gguf", rows=8).read_bytes()
    shards = [p.read_bytes() for p in write_split_set(tmp_path)]
    cache = _hf_cache(tmp_path, {"a.gguf": one, "b.gguf": two, "s-00001-of-00002.gguf": shards[0],
                                 "s-00002-of-00002.gguf": shards[1]})
    with pytest.raises(ggaudit.UsageError) as caught:
        ggaudit.open_model("hf:org/tiny", hf_cache=cache)
    assert str(caught.value) == (f"model: hf:org/tiny@{COMMIT[:12]} holds 3 GGUF models: 'a.gguf', 'b.gguf', "
                                 "'s-00001-of-00002.gguf'; name one as hf:org/tiny:FILE")
    assert len(ggaudit.open_model("hf:org/tiny:b.gguf", hf_cache=cache).tensors[0].shape) == 2
    split = ggaudit.open_model("hf:org/tiny:s-00001-of-00002.gguf", hf_cache=cache)
    assert len(split.files) == 2
    with pytest.raises(ggaudit.UsageError) as caught:
        ggaudit.open_model("hf:org/tiny:c.gguf", hf_cache=cache)
    assert str(caught.value) == f"model: hf:org/tiny@{COMMIT[:12]} has no file 'c.gguf'"


# --- verify: one entry point, the check picked from what it is given --------------------------------

def test_verify_against_a_manifest_takes_a_path_or_a_model(tmp_path: Path) -> None:
    path = write_small_model(tmp_path / "m.gguf")
    manifest = tmp_path / "m.manifest.json"
    ggaudit.write_manifest(ggaudit.build_manifest(path, group_bytes=ROW * 8), manifest)
    assert ggaudit.verify(path, manifest=manifest).ok
    assert ggaudit.verify(ggaudit.open_model(path), manifest=manifest).ok
    data = bytearray(path.read_bytes())
    data[-ROW * 3] ^= 0x01          # a quant byte of row 61: rows 56-63 are its group
    path.write_bytes(bytes(data))
    report = ggaudit.verify(str(path), manifest=str(manifest))
    assert not report.ok
    assert [(m.kind, m.tensor, m.rows) for m in report.mismatches if m.tensor] == [
        ("tensor-data", "token_embd.weight", (56, 63))]


def test_verify_an_ollama_model_sums_and_a_blob(tmp_path: Path) -> None:
    store, blob, _ = _store(tmp_path)
    assert ggaudit.verify("ollama:tiny", store=store).ok
    assert ggaudit.verify(blob).ok
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{hashlib.sha256(blob.read_bytes()).hexdigest()}  store/blobs/{blob.name}\n")
    assert ggaudit.verify(sums=sums).ok
    blob.write_bytes(blob.read_bytes()[:-1] + b"\xff")
    assert not ggaudit.verify("ollama:tiny", store=store).ok
    assert not ggaudit.verify(sums=sums).ok


@pytest.mark.parametrize("kwargs, message", [
    ({}, "target: give a model (a path, ollama:NAME, hf:ORG/NAME or a Model) or sums"),
    ({"target": "m.gguf", "sums": "SUMS"}, "sums: takes no target and no manifest"),
    ({"target": 3}, "target: must be a path, ollama:NAME, hf:ORG/NAME or a Model, not int"),
])
def test_verify_refuses_what_it_cannot_check(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ggaudit.UsageError) as caught:
        ggaudit.verify(**kwargs)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_verify_of_an_opened_model_needs_a_manifest(tmp_path: Path) -> None:
    model = ggaudit.open_model(write_small_model(tmp_path / "m.gguf"))
    with pytest.raises(ggaudit.UsageError) as caught:
        ggaudit.verify(model)
    assert str(caught.value) == "target: an opened model is checked against a manifest: give manifest"


# --- build_manifest and diff take every kind of name too --------------------------------------------

def test_build_manifest_takes_a_path_a_store_name_a_model_or_several(tmp_path: Path) -> None:
    _, blob, projector = _store(tmp_path)
    by_path = ggaudit.build_manifest(blob)
    assert [f.name for f in by_path.files] == [blob.name]
    both = ggaudit.build_manifest([blob, ggaudit.open_model(projector)])
    assert [f.name for f in both.files] == [blob.name, projector.name]
    assert [t.name for t in both.tensors] == ["token_embd.weight", "v.weight"]
    with pytest.raises(ggaudit.UsageError) as caught:
        ggaudit.build_manifest(5)  # type: ignore[arg-type]
    assert str(caught.value) == "model: must be a path, a store name, a Model or a sequence of them, not int"


def test_build_manifest_of_an_ollama_name_holds_model_and_projector(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    store, blob, projector = _store(tmp_path)
    assert [f.name for f in ggaudit.build_manifest("ollama:tiny", store=store).files] == [blob.name, projector.name]
    monkeypatch.setenv("OLLAMA_MODELS", str(store))         # the default store
    assert [f.name for f in ggaudit.build_manifest("ollama:tiny").files] == [blob.name, projector.name]


def test_diff_takes_paths_and_models(tmp_path: Path) -> None:
    a = write_small_model(tmp_path / "a.gguf")
    b = write_small_model(tmp_path / "b.gguf")
    assert ggaudit.diff(a, ggaudit.open_model(b)).ok
    data = bytearray(b.read_bytes())
    data[-1] ^= 0x10
    b.write_bytes(bytes(data))
    assert not ggaudit.diff(str(a), str(b)).ok


# --- arguments: a str is one name, and counts are ints (issue 23, item 7) -------------------------------

ALL_TYPES = Path(__file__).resolve().parent.parent / "fixtures" / "all_types.gguf"


def test_one_string_is_one_pattern_or_name_never_its_letters(tmp_path: Path) -> None:
    one = ggaudit.scan(ALL_TYPES, tensors="types.f*")
    assert [t.name for t in one.tensors] == ["types.f32.weight", "types.f16.weight", "types.f64.weight"]
    assert one.tensors == ggaudit.scan(ALL_TYPES, tensors=["types.f*"]).tensors
    assert ggaudit.scan(ALL_TYPES, tensors=iter(["types.f16*", "types.bf16*"])).tensors == \
        ggaudit.scan(ALL_TYPES, tensors=("types.f16*", "types.bf16*")).tensors
    as_fp8 = ggaudit.scan(ALL_TYPES, tensors="types.i8*", as_fp8="types.i8.weight")
    assert as_fp8.tensors == ggaudit.scan(ALL_TYPES, tensors="types.i8*", as_fp8=["types.i8.weight"]).tensors
    hashed = ggaudit.scan(ALL_TYPES, tensors="types.q8_0*", hashes="sha256")
    assert (hashed.hashes, [d.digests for d in hashed.digests]) == (
        ("sha256",), [{"sha256": hashlib.sha256(ALL_TYPES.read_bytes()).hexdigest()}])


def test_run_models_takes_one_model_name_as_one_model() -> None:
    from ggaudit.outcomes import run_models

    assert [(o.model, o.result) for o in run_models("a.gguf", len)] == [("a.gguf", 6)]
    with pytest.raises(ggaudit.UsageError) as caught:
        run_models(["a", "b"], len, jobs=2.5)  # type: ignore[arg-type]
    assert str(caught.value) == "jobs: must be an integer, not float"


def test_write_manifest_refuses_one_input_given_as_a_string(tmp_path: Path) -> None:
    # Taken letter by letter, inputs="m.gguf" protected nothing: the manifest replaced the model.
    model = write_small_model(tmp_path / "m.gguf")
    before = model.read_bytes()
    with pytest.raises(ggaudit.UsageError) as caught:
        ggaudit.write_manifest(ggaudit.build_manifest(model), model, replace=True, inputs=str(model))
    assert str(caught.value) == f"{model}: is an input of this run (m.gguf); an output never replaces an input"
    assert model.read_bytes() == before


@pytest.mark.parametrize("kwargs, message", [
    ({"limit": 2.5}, "limit: must be an integer, not float"),
    ({"limit": True}, "limit: must be an integer, not bool"),
    ({"limit": "3"}, "limit: must be an integer, not str"),
    ({"limit": -1}, "limit: must be >= 0, not -1"),
    ({"workers": 1.5}, "workers: must be an integer, not float"),
    ({"workers": True}, "workers: must be an integer, not bool"),
    ({"workers": -1}, "workers: must be >= 0, not -1"),
    ({"max_abs": "1"}, "max_abs: must be a number or None, not str"),
    ({"max_abs": True}, "max_abs: must be a number or None, not bool"),
    ({"deep": 1}, "deep: must be True or False, not int"),
    ({"fail_fast": "yes"}, "fail_fast: must be True or False, not str"),
    ({"histograms": None}, "histograms: must be True or False, not NoneType"),
    ({"anomalies": 0}, "anomalies: must be True or False, not int"),
    ({"progress": 3}, "progress: must be callable or None, not int"),
    ({"tensors": 5}, "tensors: must be a string or a collection of them, not int"),
    ({"tensors": b"types.*"}, "tensors: must be a string or a collection of them, not bytes"),
    ({"tensors": ["types.*", 1]}, "tensors: each item must be a string, not int"),
    ({"as_fp8": [b"types.i8.weight"]}, "as_fp8: each item must be a string, not bytes"),
    ({"hashes": 256}, "hashes: must be a string or a collection of them, not int"),
])
def test_scan_refuses_arguments_of_the_wrong_type_naming_them(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ggaudit.UsageError) as caught:
        ggaudit.scan(ALL_TYPES, **kwargs)
    assert str(caught.value).removeprefix(f"{ALL_TYPES}: ") == message
