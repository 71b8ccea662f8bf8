"""The library's front door (issue 12): ``import ggaudit`` gives every entry point, each takes a path,
``ollama:NAME``, ``hf:ORG/NAME`` or an opened Model, and bad arguments are GGAuditErrors naming the
parameter."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as T

import ggaudit
from ollama_support import ollama_store
from platforms import needs_symlinks
from support import write_small_model, write_split_set

COMMIT = "c0ffee" + "0" * 34
ROW = 68        # write_small_model: Q8_0 rows of 64 columns


def test_the_front_door_exports_every_entry_point() -> None:
    assert sorted(ggaudit.__all__) == sorted([
        "CheckOptions", "CheckReport", "DiffOptions", "DiffReport", "Finding", "FormatError", "GGAuditError",
        "ManifestError", "Model", "ReadError", "RowSelection", "RowsOptions", "RowsReport", "ScanOptions", "ScanReport",
        "TensorManifest", "UsageError", "VerifyOptions", "VerifyReport", "__version__", "build_manifest", "check",
        "check_rows", "diff", "open_model", "scan", "verify", "write_manifest"])
    assert all(hasattr(ggaudit, name) for name in ggaudit.__all__)
    assert set(ggaudit.__all__) <= set(dir(ggaudit))
    for name in ("FormatError", "ManifestError", "ReadError", "UsageError"):
        assert issubclass(getattr(ggaudit, name), ggaudit.GGAuditError)
    with pytest.raises(AttributeError, match="module 'ggaudit' has no attribute 'scanner'"):
        ggaudit.scanner  # noqa: B018


def test_importing_ggaudit_loads_no_job_until_one_is_used() -> None:
    """``import ggaudit`` costs its version and its errors: numpy, gguf, click and the jobs load on use."""
    code = ("import sys, ggaudit; heavy = lambda: sorted(m for m in sys.modules if m.split('.')[0] in "
            "('numpy', 'gguf', 'click', 'xxhash') or m.startswith(('ggaudit.scan.', 'ggaudit.rows', 'ggaudit.cli')));"
            "print(heavy()); ggaudit.open_model; print('ggaudit.stores.locate' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]", "True"]


@pytest.mark.parametrize("first", ["from ggaudit.scan import kernel", "import ggaudit.scan.workers",
                                   "import ggaudit.stores.sums", "ggaudit.scan; ggaudit.verify",
                                   "from ggaudit.verify import dispatch", "from ggaudit.check import decide",
                                   "import ggaudit.check.run"])
def test_scan_verify_and_check_are_callable_whatever_was_imported_first(first: str, tmp_path: Path) -> None:
    """ggaudit.scan, ggaudit.verify and ggaudit.check are folders of modules and the functions at once (a
    package that is called runs its entry point), in a fresh interpreter after any import order."""
    model = write_small_model(tmp_path / "m.gguf")
    manifest = tmp_path / "m.json"
    ggaudit.write_manifest(ggaudit.build_manifest(model), manifest)
    code = (f"import ggaudit; {first}; import ggaudit\n"
            f"print(ggaudit.scan({str(model)!r}).ok, ggaudit.verify({str(model)!r}, manifest={str(manifest)!r}).ok,"
            f" ggaudit.check({str(model)!r}, manifest={str(manifest)!r}, modes='buffered').verdict)\n"
            "print(*(p.entry().__module__ for p in (ggaudit.scan, ggaudit.verify, ggaudit.check)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    # buffered only: the manifest matched as the page cache delivers it (the device was not read past it)
    assert out.stdout.splitlines() == ["True True cache-verified",
                                       "ggaudit.scan.run ggaudit.verify.dispatch ggaudit.check.run"], out.stderr


def test_the_callable_packages_run_the_functions(tmp_path: Path) -> None:
    from ggaudit.scan import run

    model = write_small_model(tmp_path / "m.gguf", ggml_type=T.F32)
    data = bytearray(model.read_bytes())
    data[-4:] = b"\x00\x00\xc0\x7f"      # the last element: a quiet NaN
    model.write_bytes(bytes(data))
    called, direct = ggaudit.scan(model), run.scan(model)
    assert called.tensors == direct.tensors and not called.ok
    assert [(f.row, f.column, f.bits) for t in called.tensors for f in t.findings] == [(63, 63, "0x7fc00000")]
    with pytest.raises(ggaudit.UsageError) as caught:
        ggaudit.verify()
    assert str(caught.value).startswith("target: give a model")


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
