"""``ggaudit check``: the pure decision of which read path delivered a file's right bytes (cases (a)-(f) of
issue 25 and their siblings), and the whole check end to end on fixtures and a real Ollama store layout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import ggaudit
from ggaudit.check.decide import decide_file
from ggaudit.check.facts import AGREEMENT, MANIFEST, PUBLISHED, Eviction, Expectation, Needs, Observed, Probes
from ggaudit.errors import UsageError
from ggaudit.format.layout import open_model
from ggaudit.verify.manifests.tensor import TensorDigest, build_tensor_manifest, write_tensor_manifest

from ollama_support import ollama_store
from support import FIXTURES, run_cli

GOOD, BAD, OTHER = "a" * 64, "b" * 64, "c" * 64
PUB = Expectation(algorithm="sha256", digest=GOOD, source=PUBLISHED, what="the published digest")
MAN = Expectation(algorithm="sha256", digest=GOOD, source=MANIFEST, what="the manifest's sha256")


def tensor(groups: tuple[str, ...]) -> TensorDigest:
    """A 6-row tensor in 3 row groups of 2 rows (16-byte rows) at offset 1024."""
    return TensorDigest("blk.0.ffn_down.weight", "m.gguf", "F32", (4, 6), 1024, 96, 16, 6, 2, "".join(groups), groups)


RIGHT_TENSORS = (tensor(("g0", "g1", "g2")),)
WRONG_TENSORS = (tensor(("g0", "XX", "g2")),)      # rows 2-3 changed


def seen(mode: str, ok: bool, *, digest: bool | None = None) -> Observed:
    """What ``mode`` read: the right bytes (fingerprint R) or other ones (W); the sha256 on the paths that
    compute it (buffered and direct; ``digest`` overrides)."""
    computes = mode != "mmap" if digest is None else digest
    digests = {"sha256": GOOD if ok else BAD} if computes else {}
    return Observed(mode=mode, fingerprint="R" if ok else "W", digests=digests,
                    tensors=RIGHT_TENSORS if ok else WRONG_TENSORS)


def codes(decision: object) -> list[str]:
    return [c.code for c in decision.conclusions]  # type: ignore[attr-defined]


def conclusion(decision: object, code: str) -> dict[str, object]:
    return next(dict(c.evidence) for c in decision.conclusions if c.code == code)  # type: ignore[attr-defined]


# --- the pure decision: cases (a)-(f) ---------------------------------------------------------------

def test_a_all_paths_agree_and_match_published_is_intact() -> None:
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", True), seen("direct", True)], published=PUB)
    assert (d.verdict, d.reference, d.right, d.wrong) == ("intact", PUBLISHED, ("buffered", "mmap", "direct"), ())
    assert codes(d) == ["matches-published", "read-paths-agree"]
    assert conclusion(d, "read-paths-agree") == {"paths": ["buffered", "mmap", "direct"], "independent": True}


def test_b_all_agree_none_matches_is_damaged_with_tensor_and_rows_from_the_manifest() -> None:
    d = decide_file("m.gguf", [seen("buffered", False), seen("mmap", False), seen("direct", False)], published=PUB,
                    expected_tensors=RIGHT_TENSORS)
    assert (d.verdict, d.reference, d.right) == ("damaged", PUBLISHED, ())
    assert codes(d) == ["differs-from-published", "read-paths-agree"]
    found = conclusion(d, "differs-from-published")
    assert (found["expected"], found["actual"]) == (GOOD, BAD)
    # Row group 1 of 2-row groups: rows 2-3, bytes 1024 + 2*16 for 32 bytes.
    assert found["tensors"] == [{"tensor": "blk.0.ffn_down.weight", "rows": [2, 3], "offset": 1056, "length": 32,
                                 "kind": "tensor-data"}]


def test_c_mmap_differs_buffered_and_direct_match_published() -> None:
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", False), seen("direct", True)], published=PUB)
    assert (d.verdict, d.reference, d.right, d.wrong, d.decided) == (
        "read-path", PUBLISHED, ("buffered", "direct"), ("mmap",), True)
    assert codes(d) == ["matches-published", "read-path-differs"]
    assert conclusion(d, "read-path-differs") == {"paths": ["mmap"], "agree": ["buffered", "direct"],
                                                  "reference": PUBLISHED, "decided": True,
                                                  "tensors": ["blk.0.ffn_down.weight"],
                                                  "where": [{"tensor": "blk.0.ffn_down.weight", "rows": [2, 3],
                                                             "offset": 1056, "length": 32, "kind": "tensor-data"}]}
    text = d.conclusions[1].text
    assert "memory mapping" in text and "blk.0.ffn_down.weight" in text and "the file on disk is intact" in text


def test_d_page_cache_paths_agree_and_differ_from_direct_which_matches() -> None:
    d = decide_file("m.gguf", [seen("buffered", False), seen("mmap", False), seen("direct", True)], published=PUB)
    assert (d.verdict, d.right, d.wrong) == ("read-path", ("direct",), ("buffered", "mmap"))
    assert "page cache holds other bytes than the disk" in d.conclusions[1].text


def test_e_direct_differs_the_page_cache_paths_match_undecided_until_the_eviction_test() -> None:
    """The page cache holds what was published and direct reads deliver other bytes: a wrong direct path, or a
    device holding other bytes under a cached file. The reads alone do not tell: the eviction test is asked for."""
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", True), seen("direct", False)], published=PUB)
    assert (d.verdict, d.right, d.wrong, d.decided) == ("read-path", ("buffered", "mmap"), ("direct",), False)
    assert d.needs == Needs(evict=("buffered", "direct"))
    text = d.conclusions[1].text
    assert "either the device holds other bytes than the page cache" in text and "or direct reads are wrong" in text


def evicted(outcome: str | None, why: str | None = None) -> Probes:
    return Probes(eviction=Eviction(cached="buffered", device="direct", offset=1056, outcome=outcome, why=why,
                                    cached_hex="00 01", device_hex="10 01", after_hex="00 01" if outcome ==
                                    "page-cache" else "10 01"))


def test_e_the_eviction_test_reading_the_published_bytes_from_the_device_blames_direct() -> None:
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", True), seen("direct", False)], published=PUB,
                    tested=evicted("page-cache"))
    assert (d.verdict, d.right, d.wrong, d.decided, d.needs) == (
        "read-path", ("buffered", "mmap"), ("direct",), True, Needs())
    assert d.conclusions[1].text.startswith("direct reads deliver wrong bytes on this machine for tensors "
                                            "blk.0.ffn_down.weight; the page cache and the device")


def test_e_the_eviction_test_reading_the_direct_bytes_is_a_device_holding_other_bytes() -> None:
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", True), seen("direct", False)], published=PUB,
                    tested=evicted("device"))
    assert (d.verdict, d.right, d.wrong, d.decided) == ("damaged", ("buffered", "mmap"), ("direct",), True)
    assert codes(d) == ["matches-published", "device-differs"]
    assert conclusion(d, "device-differs")["eviction"] == {
        "paths": ["buffered", "direct"], "offset": 1056, "outcome": "device", "why": None, "cached": "00 01",
        "device": "10 01", "after": "10 01"}


def test_e_no_eviction_says_both_explanations_and_why_not() -> None:
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", True), seen("direct", False)], published=PUB,
                    tested=evicted(None, "not made (--no-evict): nothing was evicted"))
    assert (d.verdict, d.decided, d.needs) == ("read-path", False, Needs())
    assert d.conclusions[1].text.endswith("the eviction test could not be made: not made (--no-evict): nothing "
                                          "was evicted")


def test_f_no_reference_page_cache_disagrees_with_direct_gives_both_explanations() -> None:
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", True), seen("direct", False)])
    assert (d.verdict, d.reference, d.right, d.wrong, d.decided) == ("read-path", None, (), ("direct",), False)
    assert codes(d) == ["no-published-reference", "read-path-differs"]
    evidence = conclusion(d, "read-path-differs")
    assert (evidence["paths"], evidence["agree"], evidence["decided"]) == (["direct"], ["buffered", "mmap"], False)
    text = d.conclusions[1].text
    assert "page cache holds other bytes than the disk" in text and "direct reads are wrong" in text


# --- their siblings ----------------------------------------------------------------------------------

def test_no_reference_every_path_agrees_is_unverified() -> None:
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", True), seen("direct", True)])
    assert (d.verdict, d.reference, d.wrong) == ("unverified", None, ())
    assert codes(d) == ["no-published-reference", "read-paths-agree"]


def test_direct_skipped_two_page_cache_paths_agreeing_say_nothing_of_the_disk() -> None:
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", True)])
    assert d.verdict == "unverified"
    assert conclusion(d, "read-paths-agree") == {"paths": ["buffered", "mmap"], "independent": False}
    assert "says nothing of the disk" in d.conclusions[1].text


def test_direct_skipped_buffered_and_mmap_disagree_undecided() -> None:
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", False)])
    assert (d.verdict, d.decided, d.wrong, d.reference) == ("read-path", False, ("mmap",), None)
    assert "which bytes are the file's is not known" in d.conclusions[1].text


def test_direct_skipped_published_decides_mmap_is_wrong() -> None:
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", False)], published=PUB)
    assert (d.verdict, d.reference, d.right, d.wrong) == ("read-path", PUBLISHED, ("buffered",), ("mmap",))


def test_no_reference_buffered_and_direct_agree_decide_by_agreement_that_mmap_is_wrong() -> None:
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", False), seen("direct", True)])
    assert (d.verdict, d.reference, d.right, d.wrong, d.decided) == (
        "read-path", AGREEMENT, ("buffered", "direct"), ("mmap",), True)


def test_no_reference_mmap_and_direct_agree_buffered_is_wrong() -> None:
    d = decide_file("m.gguf", [seen("buffered", False), seen("mmap", True), seen("direct", True)])
    assert (d.reference, d.right, d.wrong) == (AGREEMENT, ("mmap", "direct"), ("buffered",))


def test_no_reference_three_different_reads_undecided() -> None:
    third = Observed(mode="direct", fingerprint="Z", digests={"sha256": OTHER}, tensors=RIGHT_TENSORS)
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", False), third])
    assert (d.verdict, d.decided, d.wrong) == ("read-path", False, ("mmap", "direct"))


def test_manifest_decides_when_nothing_is_published() -> None:
    right = decide_file("m.gguf", [seen("buffered", True), seen("mmap", True), seen("direct", True)], manifest=MAN)
    assert (right.verdict, right.reference) == ("intact", MANIFEST)
    assert codes(right) == ["matches-manifest", "read-paths-agree"]
    wrong = decide_file("m.gguf", [seen("buffered", False), seen("mmap", False), seen("direct", False)], manifest=MAN,
                        expected_tensors=RIGHT_TENSORS)
    assert (wrong.verdict, wrong.reference) == ("damaged", MANIFEST)
    assert conclusion(wrong, "differs-from-manifest")["tensors"][0]["rows"] == [2, 3]  # type: ignore[index]


def test_published_and_manifest_disagreeing_the_published_digest_decides() -> None:
    other = Expectation(algorithm="sha256", digest=OTHER, source=MANIFEST, what="the manifest's sha256")
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", True), seen("direct", True)], published=PUB,
                    manifest=other)
    assert (d.verdict, d.reference) == ("intact", PUBLISHED)
    assert codes(d)[-1] == "manifest-differs-from-published"
    assert conclusion(d, "manifest-differs-from-published") == {"algorithm": "sha256", "manifest": OTHER,
                                                                "published": GOOD}


def test_damaged_and_a_path_deviating_too_names_both_once_its_second_read_is_hashed() -> None:
    """mmap computes no published digest: its bytes, other than the others', are hashed in a second read
    before anything is decided (it could be the one path that delivered what was published)."""
    odd = Observed(mode="mmap", fingerprint="Z", tensors=RIGHT_TENSORS)
    reads = [seen("buffered", False), odd, seen("direct", False)]
    first = decide_file("m.gguf", reads, published=PUB)
    assert (first.verdict, first.decided, first.needs) == ("read-path", False, Needs(rehash=("mmap",)))
    again = Probes(rehashed={"mmap": Observed(mode="mmap", fingerprint="Z", digests={"sha256": OTHER})})
    d = decide_file("m.gguf", reads, published=PUB, tested=again)
    assert (d.verdict, d.needs) == ("damaged", Needs())
    assert codes(d) == ["differs-from-published", "read-path-differs"]
    assert conclusion(d, "read-path-differs")["paths"] == ["mmap"]
    assert conclusion(d, "differs-from-published")["read"] == "direct"     # the device's read is the disk's


def test_a_fault_common_to_buffered_and_direct_credits_mmap_once_hashed() -> None:
    """Buffered and direct deliver the same other bytes; mmap, the one right path, computed no digest: hashed
    again, it is credited, and the path-by-path verdict blames buffered and direct, not mmap."""
    right_mmap = Observed(mode="mmap", fingerprint="R", tensors=RIGHT_TENSORS)
    reads = [seen("buffered", False), right_mmap, seen("direct", False)]
    again = Probes(rehashed={"mmap": Observed(mode="mmap", fingerprint="R", digests={"sha256": GOOD})})
    d = decide_file("m.gguf", reads, published=PUB, tested=again)
    assert (d.verdict, d.right, d.wrong, d.decided) == ("read-path", ("mmap",), ("buffered", "direct"), False)
    assert d.needs == Needs(evict=("mmap", "direct"))
    assert codes(d) == ["matches-published", "read-path-differs"]


def test_a_second_read_that_delivers_other_bytes_is_not_compared() -> None:
    odd = Observed(mode="mmap", fingerprint="Z", tensors=RIGHT_TENSORS)
    again = Probes(rehashed={"mmap": Observed(mode="mmap", fingerprint="Y", digests={"sha256": GOOD})})
    d = decide_file("m.gguf", [seen("buffered", False), odd, seen("direct", False)], published=PUB, tested=again)
    assert (d.verdict, d.decided, codes(d)) == ("read-path", False, ["not-compared", "read-path-differs"])
    assert "its second read delivered other bytes than its first" in d.conclusions[0].text


def test_a_reference_no_path_computed_asks_for_a_second_read_hashed() -> None:
    d = decide_file("m.gguf", [seen("mmap", True)], published=PUB)
    assert (d.decided, d.needs) == (False, Needs(rehash=("mmap",)))


def test_one_page_cache_path_matching_published_is_verified_as_the_page_cache_delivers_it() -> None:
    d = decide_file("m.gguf", [seen("buffered", True)], published=PUB, skipped="the filesystem refuses direct I/O")
    assert (d.verdict, codes(d)) == ("cache-verified", ["matches-published", "device-not-read"])
    assert "direct reads were skipped (the filesystem refuses direct I/O)" in d.conclusions[1].text


def test_one_device_read_matching_published_is_intact() -> None:
    d = decide_file("m.gguf", [seen("direct", True)], published=PUB)
    assert (d.verdict, codes(d)) == ("intact", ["matches-published"])


def test_direct_on_a_filesystem_serving_it_from_the_page_cache_is_no_witness_of_a_device() -> None:
    tmpfs = Observed(mode="direct", fingerprint="R", digests={"sha256": GOOD}, tensors=RIGHT_TENSORS,
                     source="page-cache", source_why="a tmpfs keeps files in the page cache")
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", True), tmpfs], published=PUB)
    assert (d.verdict, codes(d)) == ("cache-verified", ["matches-published", "read-paths-agree", "device-not-read"])
    assert conclusion(d, "read-paths-agree") == {"paths": ["buffered", "mmap", "direct"], "independent": False}
    unpublished = decide_file("m.gguf", [seen("buffered", True), seen("mmap", False), tmpfs])
    assert (unpublished.reference, unpublished.decided) == (None, False)     # no independent pair agrees


def test_every_published_expectation_is_compared_and_a_conflict_is_a_finding() -> None:
    store = Expectation(algorithm="sha256", digest=GOOD, source=PUBLISHED, what="the Ollama manifest's digest")
    sums = Expectation(algorithm="sha256", digest=OTHER, source=PUBLISHED, what="the checksum file's line 2")
    d = decide_file("m.gguf", [seen("buffered", True), seen("mmap", True), seen("direct", True)],
                    published=(sums, store))
    assert d.verdict == "damaged"
    assert codes(d) == ["matches-published", "read-paths-agree", "expectations-conflict", "differs-from-published"]
    assert conclusion(d, "matches-published")["source"] == "the Ollama manifest's digest"
    assert conclusion(d, "differs-from-published")["source"] == "the checksum file's line 2"


# --- end to end ------------------------------------------------------------------------------------

def _store(tmp_path: Path) -> tuple[Path, Path, Path]:
    model = (FIXTURES / "all_types.gguf").read_bytes()
    blob, projector = ollama_store(tmp_path / "store", model, (FIXTURES / "ple_q8_0.gguf").read_bytes())
    return tmp_path / "store", blob, projector


def _check_json(*args: object) -> tuple[int, dict[str, object]]:
    result = run_cli(["check", "--json", *args])
    doc = json.loads(result.stdout)
    return result.exit_code, doc["models"][0]


def test_ollama_store_intact(tmp_path: Path) -> None:
    store, blob, projector = _store(tmp_path)
    code, report = _check_json("ollama:tiny", "--store", store)
    assert (code, report["verdict"], report["reference"], report["ok"]) == (0, "intact", "published", True)
    files = report["files"]
    assert [f["path"] for f in files] == [str(blob), str(projector)]  # type: ignore[index, union-attr]
    for f in files:  # type: ignore[union-attr]
        assert f["published"]["digest"] == Path(f["path"]).name.removeprefix("sha256-")
        modes = [p["mode"] for p in f["paths"]]
        assert modes + [s["mode"] for s in f["skipped"]] == ["buffered", "mmap", "direct"]
        assert {p["bytes"] for p in f["paths"]} == {Path(f["path"]).stat().st_size}
    text = run_cli(["check", "ollama:tiny", "--store", store]).stdout.splitlines()
    assert text[0].startswith("ollama:tiny: intact")


def test_ollama_damaged_blob_names_the_tensor_and_rows(tmp_path: Path) -> None:
    store, blob, _ = _store(tmp_path)
    manifest = tmp_path / "known-good.manifest.json"
    write_tensor_manifest(build_tensor_manifest(blob), manifest)
    t = open_model(blob).tensor("types.f32.weight")
    row = 5
    with open(blob, "r+b") as f:        # the lowest mantissa bit of one element: a finite value still
        f.seek(t.offset + row * t.row_bytes)
        byte = f.read(1)
        f.seek(t.offset + row * t.row_bytes)
        f.write(bytes([byte[0] ^ 1]))
    code, report = _check_json("ollama:tiny", "--store", store, "--manifest", manifest)
    assert (code, report["verdict"], report["reference"]) == (1, "damaged", "published")
    differs = next(c for c in report["conclusions"] if c["code"] == "differs-from-published")  # type: ignore[union-attr]
    assert differs["evidence"]["file"] == str(blob)
    rpg = max(1, (1 << 20) // t.row_bytes)
    first = row // rpg * rpg
    rows = [first, min(first + rpg, t.n_rows) - 1]
    assert differs["evidence"]["tensors"] == [{"tensor": "types.f32.weight", "rows": rows,
                                              "offset": t.offset + first * t.row_bytes,
                                              "length": (rows[1] - rows[0] + 1) * t.row_bytes, "kind": "tensor-data"}]
    assert "ollama pull tiny" in report["next_steps"][0] and "ollama rm" in report["next_steps"][0]  # type: ignore[index]


def test_stored_nan_is_nonfinite_with_tensor_row_column_bits(tmp_path: Path) -> None:
    code, report = _check_json(FIXTURES / "all_types-f32-nan.gguf")
    assert (code, report["verdict"], report["scan_path"]) == (1, "nonfinite", "mmap")
    stored = next(c for c in report["conclusions"] if c["code"] == "stored-nonfinite")  # type: ignore[union-attr]
    found = stored["evidence"]["findings"]
    # fixtures/README.md: the one fault of this copy, and where it is.
    assert [(f["tensor"], f["row"], f["column"], f["bits"], f["offset"], f["kind"]) for f in found] == [
        ("types.f32.weight", 3, 100, "0x7fc00000", 9744, "nan")]


def test_no_reference_is_unverified_and_exit_0(tmp_path: Path) -> None:
    plain = tmp_path / "model.gguf"
    shutil.copyfile(FIXTURES / "all_types.gguf", plain)
    code, report = _check_json(plain)
    assert (code, report["verdict"], report["reference"], report["ok"]) == (0, "unverified", None, True)
    found = [c["code"] for c in report["conclusions"]]  # type: ignore[union-attr]
    assert (found[0], found[-1]) == ("no-published-reference", "nothing-wrong")


def test_sha256_given_decides_and_a_wrong_one_is_damaged(tmp_path: Path) -> None:
    import hashlib
    plain = tmp_path / "model.gguf"
    shutil.copyfile(FIXTURES / "all_types.gguf", plain)
    digest = hashlib.sha256(plain.read_bytes()).hexdigest()
    assert ggaudit.check(plain, sha256=digest).verdict == "intact"
    report = ggaudit.check(plain, sha256="0" * 64)
    assert (report.verdict, report.ok) == ("damaged", False)


def test_library_paths_given_are_compared_in_house_order(tmp_path: Path) -> None:
    report = ggaudit.check(FIXTURES / "all_types.gguf", modes=("mmap", "buffered"))
    assert report.modes == ("buffered", "mmap")
    assert [p.stats.mode for p in report.files[0].reads] == ["buffered", "mmap"]


def test_bad_modes_is_exit_2() -> None:
    result = run_cli(["check", FIXTURES / "all_types.gguf", "--modes", "buffered,tape"])
    assert result.exit_code == 2 and "--modes" in result.stderr and "tape" in result.stderr
    with pytest.raises(UsageError, match="choose from"):
        ggaudit.CheckOptions(modes=())


def test_stored_nan_in_the_published_file_says_where_and_to_tell_the_publisher() -> None:
    import hashlib
    path = FIXTURES / "all_types-f32-nan.gguf"
    report = ggaudit.check(path, sha256=hashlib.sha256(path.read_bytes()).hexdigest(), modes=("buffered", "mmap"))
    assert (report.verdict, report.reference) == ("nonfinite", "published")
    # fixtures/README.md: the one NaN of this copy.
    assert report.next_steps == ("the publisher's file holds NaN at tensor types.f32.weight row 3 column 100 (offset "
                                 "9744, bits 0x7fc00000): report it to the publisher, with this report; downloading "
                                 "it again gives the same bytes",)
