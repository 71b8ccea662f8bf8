"""No expectation is dropped (issue 32, part 1): every store form, on a real layout, crossed with every
source in play (the store, a blob's own name, ``--sums``, ``--sha256``), each kept with its source and its
words; disagreeing ones all kept and found by ``conflicts``; what verify reports of a file before reading it
given to check as a Problem of verify's kind and words. And the property the one place buys: for every
store form, each digest verify checks a file against is one check expects of it, and the reverse."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

import ggaudit
from ggaudit.check.expect import expectations_for
from ggaudit.check.options import CheckOptions
from ggaudit.errors import UsageError
from ggaudit.stores.expected import (STALE, Expected, FileExpectations, Problem, conflicts, file_key,
                                     given_expectation, merged, named_expectations, store_expectations,
                                     sums_expectations)
from ggaudit.stores.published_digest import published_digest
from ggaudit.stores.registry import Roots, Store, find_store
from ggaudit.verify.report import VerifyReport

from ollama_support import MEDIA_MODEL, MEDIA_PROJECTOR, ollama_store
from platforms import needs_symlinks
from stores_support import (git_blob_sha1, gguf, gpt4all_folder, hf_local_dir, lmstudio_models, ollama_everything,
                            sha256)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
NAMED = "the sha256 its file name gives (a content-addressed blob)"
ETAG = "the etag of its Hugging Face download metadata"


def _store(name: str, root: Path | None = None, hf_cache: Path | None = None) -> Store:
    found = find_store(name, Roots(root, hf_cache))
    assert found is not None
    return found


def _layer(digest: str, media: str, size: int) -> Expected:
    return Expected(algorithm="sha256", digest=digest, source="store",
                    what=f"the Ollama manifest's digest of its {media} layer", size=size)


def _named(digest: str) -> Expected:
    return Expected(algorithm="sha256", digest=digest, source="blob-name", what=NAMED)


def _line(digest: str, n: int) -> Expected:
    return Expected(algorithm="sha256", digest=digest, source="sums", what=f"the checksum file's line {n}")


def _hf_snapshot(cache: Path, data: bytes, blob_name: str | None = None) -> tuple[Path, Path]:
    """models--org--tiny at COMMIT holding gguf/tiny.gguf, a link to its blob (named *blob_name*, by default
    its sha256); the link and the blob."""
    repo = cache / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT + "\n")
    blob = repo / "blobs" / (blob_name or sha256(data))
    blob.write_bytes(data)
    link = repo / "snapshots" / COMMIT / "gguf" / "tiny.gguf"
    link.parent.mkdir(parents=True)
    link.symlink_to(f"../../../blobs/{blob.name}")
    return link, blob


# --- Ollama ---------------------------------------------------------------------------------------------

def test_ollama_with_sums_not_listing_the_blob_keeps_the_layer_digest_and_the_blob_name(tmp_path: Path) -> None:
    model, projector = gguf(1), gguf(2)
    blob, proj = ollama_store(tmp_path / "models", model, projector)
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{'0' * 64}  other.gguf\n")
    store = _store("ollama:tiny", tmp_path / "models")
    found = expectations_for(store, [os.fspath(blob), os.fspath(proj)], CheckOptions(sums=sums))
    assert found == {
        file_key(blob): FileExpectations(path=os.fspath(blob), expected=(
            _layer(sha256(model), MEDIA_MODEL, len(model)), _named(sha256(model)))),
        file_key(proj): FileExpectations(path=os.fspath(proj), expected=(
            _layer(sha256(projector), MEDIA_PROJECTOR, len(projector)), _named(sha256(projector))))}
    assert conflicts(found[file_key(blob)].expected) == []
    # check compares every one of them, and the store's decides: not "unverified" for want of a sums line.
    report = ggaudit.check("ollama:tiny", store=tmp_path / "models", sums=sums, modes=("buffered", "direct"))
    assert [(e.what, e.digest) for e in report.files[0].expectations] == [
        (f"the Ollama manifest's digest of its {MEDIA_MODEL} layer", sha256(model)),
        ("the sha256 its file name gives (a content-addressed blob)", sha256(model))]
    assert (report.verdict, report.reference) == ("intact", "published")


def test_ollama_store_lists_every_blob_its_config_and_for_the_whole_store_the_orphans(tmp_path: Path) -> None:
    store = ollama_everything(tmp_path / "models")
    one = store_expectations(_store("ollama:chat", store.root))
    config = store.blob("chat.config")
    assert list(one) == [file_key(store.blob(r)) for r in ("chat.model", "chat.draft", "chat.config")]
    assert one[file_key(config)].expected == (Expected(
        algorithm="sha256", digest=config.name.removeprefix("sha256-"), source="store",
        what="the Ollama manifest's digest of its config", size=config.stat().st_size),)
    every = store_expectations(_store("ollama:*", store.root))
    assert every[file_key(store.orphan)] == FileExpectations(path=os.fspath(store.orphan), expected=(), problems=(
        Problem(kind="orphan", subject="blob", detail="no manifest of the store names this blob"),))


# --- checksum files, --sha256, a blob's name -------------------------------------------------------------

def test_sums_listing_a_file_twice_with_two_digests_keeps_both_and_conflicts_finds_the_pair(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(gguf(5))
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{sha256(model.read_bytes())}  m.gguf\n# a comment\n{'E' * 64}  ./m.gguf\n")
    found = expectations_for(None, [os.fspath(model)], CheckOptions(sums=sums))
    first, second = _line(sha256(model.read_bytes()), 1), _line("e" * 64, 3)
    assert found == {file_key(model): FileExpectations(path=os.fspath(model), expected=(first, second))}
    assert conflicts([first, second]) == [(first, second)]


@needs_symlinks
def test_sums_every_line_of_every_file_and_a_link_out_is_a_problem_with_its_digest(tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"s")
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a")
    (data / "out.bin").symlink_to(tmp_path / "secret")
    sums = data / "SUMS"
    sums.write_text(f"{sha256(b'a')}  a.bin\n{sha256(b's')}  out.bin\n")
    found = sums_expectations(sums)
    assert found[file_key(data / "a.bin")].expected == (_line(sha256(b"a"), 1),)
    out = found[file_key(data / "out.bin")]
    assert (out.expected, out.problems) == ((_line(sha256(b"s"), 2),), (Problem(
        kind="link", subject="out.bin", detail="line 2: resolves outside the checksum file's folder (a link "
                                               "pointing out): not followed"),))
    assert sums_expectations(sums, [data / "a.bin"]) == {file_key(data / "a.bin"): found[file_key(data / "a.bin")]}


def test_a_plain_path_with_a_blob_name_and_a_link_to_one(tmp_path: Path) -> None:
    data = gguf(6)
    blob = tmp_path / f"sha256-{sha256(data).upper()}"
    blob.write_bytes(data)
    assert expectations_for(None, [os.fspath(blob)], CheckOptions()) == {
        file_key(blob): FileExpectations(path=os.fspath(blob), expected=(_named(sha256(data)),))}
    plain = tmp_path / "model.gguf"
    plain.write_bytes(data)
    assert expectations_for(None, [os.fspath(plain)], CheckOptions())[file_key(plain)].expected == ()


@needs_symlinks
def test_a_link_whose_name_and_target_name_disagree_keeps_both(tmp_path: Path) -> None:
    blob = tmp_path / f"sha256-{'a' * 64}"
    blob.write_bytes(b"x")
    link = tmp_path / f"sha256-{'b' * 64}"
    link.symlink_to(blob.name)
    found = named_expectations([link])[file_key(link)].expected
    target = Expected(algorithm="sha256", digest="a" * 64, source="blob-name",
                      what="the sha256 its link's target's file name gives (a content-addressed blob)")
    assert found == (target, _named("b" * 64))
    assert conflicts(found) == [(target, _named("b" * 64))]


def test_sha256_given_is_one_expectation_of_one_file(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(gguf(7))
    given = Expected(algorithm="sha256", digest="ab" * 32, source="given", what="the sha256 given (--sha256)")
    assert given_expectation("AB" * 32) == given
    assert expectations_for(None, [os.fspath(model)], CheckOptions(sha256="ab" * 32)) == {
        file_key(model): FileExpectations(path=os.fspath(model), expected=(given,))}
    with pytest.raises(UsageError, match="is one file's digest, and the target has 2 files") as err:
        expectations_for(None, [os.fspath(model)] * 2, CheckOptions(sha256="ab" * 32))
    assert err.value.field == "sha256"
    with pytest.raises(UsageError, match="'xyz' is not a sha256: 64 hex digits"):
        given_expectation("xyz")


# --- Hugging Face ----------------------------------------------------------------------------------------

def test_hf_local_a_file_modified_after_its_download_keeps_its_etag_with_the_note(tmp_path: Path) -> None:
    d = hf_local_dir(tmp_path / "dl")
    store = _store(f"hf-local:{d.root}")
    found = store_expectations(store)
    assert found[file_key(d.stale)] == FileExpectations(path=os.fspath(d.stale), expected=(Expected(
        algorithm="git-sha1", digest=git_blob_sha1(b"# readme\n"), source="store", what=ETAG, note=STALE),))
    assert found[file_key(d.unlisted)].problems == (
        Problem(kind="warning", subject="notes.txt", detail="no download metadata: not checked"),)
    os.utime(d.good, (1_800_000_000.0, 1_800_000_000.0))
    assert expectations_for(store, [os.fspath(d.good)], CheckOptions())[file_key(d.good)].expected == (Expected(
        algorithm="sha256", digest=sha256(d.good.read_bytes()), source="store", what=ETAG, note=STALE),)
    # The verify side of the same data: a warning, and the digest still checked.
    report = ggaudit.verify(f"hf-local:{d.root}")
    assert f"{d.good}: {STALE}" in report.warnings
    assert [(c.path, c.ok) for c in report.checked if c.path == os.fspath(d.good)] == [(os.fspath(d.good), True)]


@needs_symlinks
def test_hf_snapshot_link_to_an_incomplete_blob_is_verifys_link_problem(tmp_path: Path) -> None:
    data = gguf(3)
    link, _ = _hf_snapshot(tmp_path / "hub", data, blob_name=f"{sha256(data)}.incomplete")
    store = _store("hf:org/tiny", hf_cache=tmp_path / "hub")
    problem = Problem(kind="link", subject="gguf/tiny.gguf", detail="blob name is not a digest")
    assert expectations_for(store, [os.fspath(link)], CheckOptions()) == {
        file_key(link): FileExpectations(path=os.fspath(link), expected=(), problems=(problem,))}
    report = ggaudit.verify("hf:org/tiny", hf_cache=tmp_path / "hub")
    assert [(m.kind, m.path, m.subject, m.detail) for m in report.mismatches] == [
        ("link", os.fspath(link), problem.subject, problem.detail)]


@needs_symlinks
def test_hf_snapshot_link_to_a_missing_blob_is_a_broken_link_problem(tmp_path: Path) -> None:
    link, blob = _hf_snapshot(tmp_path / "hub", gguf(3))
    blob.unlink()
    found = store_expectations(_store("hf:org/tiny", hf_cache=tmp_path / "hub"))
    assert found == {file_key(link): FileExpectations(path=os.fspath(link), expected=(), problems=(
        Problem(kind="link", subject="gguf/tiny.gguf", detail="broken link: blob missing"),))}


@needs_symlinks
def test_hf_snapshot_blob_name_from_the_store_and_from_the_link_target(tmp_path: Path) -> None:
    data = gguf(3)
    link, _ = _hf_snapshot(tmp_path / "hub", data)
    found = expectations_for(_store("hf:org/tiny", hf_cache=tmp_path / "hub"), [os.fspath(link)], CheckOptions())
    assert found[file_key(link)].expected == (
        Expected(algorithm="sha256", digest=sha256(data), source="store", what="the Hugging Face cache's blob name"),
        Expected(algorithm="sha256", digest=sha256(data), source="blob-name",
                 what="the sha256 its link's target's file name gives (a content-addressed blob)"))


# --- the apps' folders -----------------------------------------------------------------------------------

def test_gpt4all_md5_and_size_from_its_model_list(tmp_path: Path) -> None:
    paths = gpt4all_folder(tmp_path / "g")
    store = _store("gpt4all:", tmp_path / "g")
    found = store_expectations(store)
    good = paths["good"]
    assert found[file_key(good)].expected == (Expected(
        algorithm="md5", digest=hashlib.md5(good.read_bytes()).hexdigest(), source="store",
        what="GPT4All's model list's md5", size=good.stat().st_size),)
    assert file_key(paths["other"]) not in found       # not listed: its structure is what verify checks


def test_lmstudio_keeps_no_digest_only_what_is_wrong_before_a_read(tmp_path: Path) -> None:
    paths = lmstudio_models(tmp_path / "models")
    good = _store("lmstudio:pub/good", tmp_path / "models")
    assert store_expectations(good) == {}
    assert expectations_for(good, [os.fspath(paths["good"])], CheckOptions()) == {
        file_key(paths["good"]): FileExpectations(path=os.fspath(paths["good"]), expected=())}
    missing = tmp_path / "models" / "pub" / "split" / "m-00002-of-00003.gguf"
    assert store_expectations(_store("lmstudio:pub/split", tmp_path / "models")) == {
        file_key(missing): FileExpectations(path=os.fspath(missing), expected=(), problems=(
            Problem(kind="missing", subject="pub/split/m-00002-of-00003.gguf",
                    detail="shard 2 of 3 of a split set not found"),))}


# --- the pure helpers -------------------------------------------------------------------------------------

def test_merged_keeps_every_expectation_once_and_conflicts_pairs_only_one_algorithm() -> None:
    store = _layer("a" * 64, MEDIA_MODEL, 3)
    named, sums = _named("a" * 64), _line("b" * 64, 2)
    md5 = Expected(algorithm="md5", digest="c" * 32, source="store", what="an md5")
    link = Problem(kind="link", subject="x", detail="broken link: blob missing")
    together = merged({"k": FileExpectations(path="p", expected=(store,), problems=(link,))},
                      {"k": FileExpectations(path="q", expected=(store, named, sums, md5), problems=(link,))},
                      {"j": FileExpectations(path="j", expected=())})
    assert together == {"k": FileExpectations(path="p", expected=(store, named, sums, md5), problems=(link,)),
                        "j": FileExpectations(path="j", expected=())}
    assert conflicts(together["k"].expected) == [(store, sums), (named, sums)]
    assert conflicts([sums, store, named]) == [(sums, store), (sums, named)]


def test_rows_published_digest_is_the_first_expectation(tmp_path: Path) -> None:
    model, projector = gguf(1), gguf(2)
    blob, _ = ollama_store(tmp_path / "models", model, projector)
    found = published_digest("ollama:tiny", os.fspath(blob), Roots(tmp_path / "models"))
    assert found is not None
    assert (found.algorithm, found.digest, found.what) == (
        "sha256", sha256(model), f"the Ollama manifest's digest of its {MEDIA_MODEL} layer")


# --- check and verify cannot disagree ---------------------------------------------------------------------

#: The algorithms of a whole file's digest (verify's Mismatch kind for a digest that differs is its algorithm).
DIGESTS = ("sha256", "md5", "git-sha1")


def _verified(report: VerifyReport) -> dict[str, set[tuple[str, str]]]:
    """What verify checked each file against, by file_key: (algorithm, the digest expected)."""
    found: dict[str, set[tuple[str, str]]] = {}
    for c in report.checked:
        if c.ok and c.algorithm in DIGESTS:
            found.setdefault(file_key(c.path), set()).add((c.algorithm, c.digest))
    for m in report.mismatches:
        if m.kind in DIGESTS and m.expected is not None:
            found.setdefault(file_key(m.path), set()).add((m.kind, m.expected))
    return found


def _expected_by_check(store: Store | None, paths: list[str], options: CheckOptions,
                       sources: tuple[str, ...]) -> dict[str, set[tuple[str, str]]]:
    found = expectations_for(store, paths, options)
    return {key: {(e.algorithm, e.digest) for e in f.expected if e.source in sources}
            for key, f in found.items() if any(e.source in sources for e in f.expected)}


def _agree(report: VerifyReport, store: Store | None, options: CheckOptions | None = None,
           sources: tuple[str, ...] = ("store",)) -> None:
    """verify's digest for each file it checked is the one check expects of it from *sources*, and every
    file check finds an expectation for there is one verify checked."""
    verified = _verified(report)
    assert verified
    paths = sorted({c.path for c in report.checked} | {m.path for m in report.mismatches if m.kind in DIGESTS})
    assert _expected_by_check(store, paths, options or CheckOptions(), sources) == verified


def test_check_and_verify_agree_on_every_ollama_blob(tmp_path: Path) -> None:
    store = ollama_everything(tmp_path / "models")
    for name in ("ollama:chat", "ollama:imagegen", "ollama:*"):
        _agree(ggaudit.verify(name, store=store.root), _store(name, store.root))


@needs_symlinks
def test_check_and_verify_agree_on_a_hf_snapshot(tmp_path: Path) -> None:
    link, blob = _hf_snapshot(tmp_path / "hub", gguf(3))
    with open(blob, "r+b") as f:
        f.write(b"X")
    report = ggaudit.verify("hf:org/tiny", hf_cache=tmp_path / "hub")
    assert not report.ok
    _agree(report, _store("hf:org/tiny", hf_cache=tmp_path / "hub"))
    assert file_key(link) in _verified(report)


def test_check_and_verify_agree_on_hf_local_gpt4all_and_sums(tmp_path: Path) -> None:
    d = hf_local_dir(tmp_path / "dl")
    _agree(ggaudit.verify(f"hf-local:{d.root}"), _store(f"hf-local:{d.root}"))
    gpt4all_folder(tmp_path / "g")
    _agree(ggaudit.verify("gpt4all:", store=tmp_path / "g"), _store("gpt4all:", tmp_path / "g"))
    sums = tmp_path / "dl" / "SUMS"
    sums.write_text(f"{sha256(d.good.read_bytes())}  model.gguf\n{'0' * 64}  model.gguf\n{'1' * 64}  README.md\n")
    _agree(ggaudit.verify(sums=sums), None, CheckOptions(sums=sums), ("sums",))


def test_check_and_verify_agree_on_a_blob_name_and_a_sha256_given(tmp_path: Path) -> None:
    data = gguf(6)
    blob = tmp_path / f"sha256-{sha256(data)}"
    blob.write_bytes(data)
    _agree(ggaudit.verify(blob), None, CheckOptions(), ("blob-name",))
    _agree(ggaudit.verify(blob, sha256="0" * 64), None, CheckOptions(sha256="0" * 64), ("given",))


@needs_symlinks
def test_verify_takes_a_links_target_blob_name_as_check_does(tmp_path: Path) -> None:
    """A link named model.gguf to a content-addressed blob: check expected the blob's name of it, verify said
    the name held no sha256 (exit 2); now both check it against the name of the file it leads to."""
    data = gguf(6)
    blob = tmp_path / f"sha256-{sha256(data)}"
    blob.write_bytes(data)
    link = tmp_path / "model.gguf"
    link.symlink_to(blob.name)
    report = ggaudit.verify(link)
    assert [(c.path, c.subject, c.digest, c.ok) for c in report.checked] == [
        (os.fspath(link), "blob name", sha256(data), True)]
    _agree(report, None, CheckOptions(), ("blob-name",))
