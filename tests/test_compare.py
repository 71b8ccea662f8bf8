"""verify's one comparison (ggaudit/verify/compare.py): a map of what things should be against a map of what
was found, two plain dicts in and the differences out, as huggingface_hub's ``verify_maps`` compares a
repository's files with a folder's (``huggingface_hub/utils/_verification.py``: missing, extra, mismatches)."""

from __future__ import annotations

from ggaudit.verify.compare import Difference, Facts, compare_facts, compare_maps

SHA_A = "a" * 64
SHA_B = "b" * 64


def test_a_key_expected_and_not_found_is_missing_with_its_expected_digest() -> None:
    assert compare_maps({"model.gguf": Facts(size=10, digest=SHA_A)}, {}) == [
        Difference(key="model.gguf", kind="missing", expected=SHA_A, actual=None)]


def test_a_key_found_and_not_expected_is_extra_with_its_digest() -> None:
    assert compare_maps({}, {"mmproj.gguf": Facts(size=5, digest=SHA_B)}) == [
        Difference(key="mmproj.gguf", kind="extra", expected=None, actual=SHA_B)]


def test_a_size_that_differs_is_a_size_difference_and_nothing_else() -> None:
    assert compare_maps({"f": Facts(size=4096, digest=SHA_A)}, {"f": Facts(size=4095, digest=SHA_A)}) == [
        Difference(key="f", kind="size", expected=4096, actual=4095)]


def test_a_digest_that_differs_is_a_digest_difference_and_nothing_else() -> None:
    assert compare_maps({"f": Facts(size=7, digest=SHA_A)}, {"f": Facts(size=7, digest=SHA_B)}) == [
        Difference(key="f", kind="digest", expected=SHA_A, actual=SHA_B)]


def test_size_and_digest_both_differing_give_both_size_first() -> None:
    assert compare_facts("f", Facts(size=7, digest=SHA_A), Facts(size=8, digest=SHA_B)) == [
        Difference(key="f", kind="size", expected=7, actual=8),
        Difference(key="f", kind="digest", expected=SHA_A, actual=SHA_B)]


def test_a_fact_one_side_does_not_know_is_not_compared() -> None:
    # Hugging Face's cache gives no size, an unhashed file (its size already differed) no digest.
    assert compare_maps({"f": Facts(digest=SHA_A)}, {"f": Facts(size=3, digest=SHA_A)}) == []
    assert compare_maps({"f": Facts(size=3, digest=SHA_A)}, {"f": Facts(size=3)}) == []


def test_a_layout_that_differs_hides_the_digests_of_bytes_laid_out_otherwise() -> None:
    want, have = Facts(layout="Q4_K [256, 2]", digest=SHA_A), Facts(layout="Q4_K [256, 3]", digest=SHA_B)
    assert compare_facts("blk.0.attn_q.weight", want, have) == [
        Difference(key="blk.0.attn_q.weight", kind="layout", expected="Q4_K [256, 2]", actual="Q4_K [256, 3]")]


def test_differences_come_in_the_expected_maps_order_then_the_extras_in_the_found_maps() -> None:
    expected = {"c": Facts(digest="3"), "a": Facts(digest="1"), "b": Facts(digest="2")}
    found = {"z": Facts(digest="9"), "b": Facts(digest="x"), "c": Facts(digest="3"), "y": Facts(digest="8")}
    assert [(d.key, d.kind) for d in compare_maps(expected, found)] == [
        ("a", "missing"), ("b", "digest"), ("z", "extra"), ("y", "extra")]


def test_equal_maps_differ_in_nothing() -> None:
    same = {"f": Facts(size=1, layout="F32 [1]", digest=SHA_A), "g": Facts(size=2, digest=SHA_B)}
    assert compare_maps(same, dict(same)) == []
