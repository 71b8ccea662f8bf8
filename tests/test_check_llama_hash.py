"""``ggaudit check --manifest M`` where M is llama.cpp's ``llama-gguf-hash`` output: its lines decide which read
path delivered the right bytes (``reference: manifest``), per tensor, as ggaudit's tensor manifest does.

The lines are written by ``ggaudit manifest --manifest-format llama-gguf-hash`` (what llama-gguf-hash prints:
``printf("%-8s  %-s  %s\\n", type, hex, name)`` per tensor, then the model line, examples/gguf-hash/gguf-hash.cpp
in ggml-org/llama.cpp). fixtures/ple_q8_0.gguf is the model: per_layer_token_embd.weight is Q8_0, whose 34-byte
block is an fp16 scale then 32 int8 quants, so the byte flipped (byte 6 of block 1 of row 100) is a quant.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash
from jsonschema import Draft202012Validator

import ggaudit
from ggaudit.errors import NothingChecked
from ggaudit.format.blocks import GGMLQuantizationType as T
from ggaudit.format.build import TensorSpec, encode_tensor_info, gguf_bytes
from ggaudit.format.layout import open_model

from fault_support import faulted_env, run_ggaudit
from platforms import needs_linux
from support import run_cli
# The same flip as the tests from below: byte 6 of block 1 of row 100 of the PLE table.
from test_from_below import flip_offset, flipped

FIXTURE = Path(__file__).parent.parent / "fixtures" / "ple_q8_0.gguf"
PLE, EMBD = "per_layer_token_embd.weight", "token_embd.weight"
ROW, BLOCK, K, MASK = 100, 1, 6, 0x10
NO_ROWS = "not available: llama-gguf-hash gives one digest per tensor, so a difference is located to the tensor"


def tensor_bytes(data: bytes, name: str) -> bytes:
    t = open_model(FIXTURE).tensor(name)
    return data[t.offset:t.end]


def llama_manifest(tmp_path: Path, *types: str) -> Path:
    """The lines llama-gguf-hash prints for the fixture, written by `ggaudit manifest` (one file, two tensors)."""
    out = tmp_path / "model.llama-hash.txt"
    args = ["manifest", str(FIXTURE), "--manifest-format", "llama-gguf-hash", "-o", str(out)]
    result = run_cli([*args, *(["--hash", ",".join(types)] if types else [])])
    assert result.exit_code == 0, result.stderr
    return out


SCHEMA = json.loads(resources.files("ggaudit").joinpath("schema/cli-output.schema.json").read_text("utf-8"))


def check_json(*args: object) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Exit code, report and first file's entry of `ggaudit check --json ARGS`, its JSON validated."""
    result = run_cli(["check", "--json", *map(str, args)])
    doc = json.loads(result.stdout)
    assert [e.message for e in Draft202012Validator(SCHEMA).iter_errors(doc)] == []
    report: dict[str, Any] = doc["models"][0]
    return result.exit_code, report, report["files"][0]


def conclusion(entry: dict[str, Any], code: str) -> dict[str, Any]:
    [found] = [c for c in entry["conclusions"] if c["code"] == code]
    return dict(found)


def test_intact_file_matches_the_llama_gguf_hash_lines_by_tensor_and_model_line(tmp_path: Path) -> None:
    model = tmp_path / "copy.gguf"       # another path than the lines name: matched by tensor name
    shutil.copyfile(FIXTURE, model)
    manifest = llama_manifest(tmp_path, "sha256", "xxh64")
    code, report, entry = check_json(model, "--manifest", manifest)
    assert (code, report["verdict"], report["reference"], report["ok"]) == (0, "intact", "manifest", True)
    assert (entry["right"], entry["wrong"], entry["manifest"]) == (["buffered", "mmap", "direct"], [], None)
    matched = conclusion(entry, "matches-manifest")
    data = FIXTURE.read_bytes()
    all_tensor_data = tensor_bytes(data, EMBD) + tensor_bytes(data, PLE)     # header order is file order here
    assert matched["evidence"] == {
        "format": "llama-gguf-hash", "source": "the llama-gguf-hash manifest model.llama-hash.txt",
        "paths": ["buffered", "mmap", "direct"], "tensors": 2, "algorithms": {"sha256": 2},
        "model": {"algorithm": "sha256", "digest": hashlib.sha256(all_tensor_data).hexdigest(), "line": 6,
                  "compared": True, "why_not": None}}
    text = run_cli(["check", str(model), "--manifest", str(manifest)]).stdout.splitlines()[0]
    assert text.startswith(f"{model}: intact: every tensor's bytes match the manifest's lines")


def test_a_flipped_byte_in_one_tensor_is_damaged_naming_that_tensor_its_algorithm_and_digests(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    data, at = FIXTURE.read_bytes(), flip_offset()
    model.write_bytes(flipped(data, at))
    code, report, entry = check_json(model, "--manifest", llama_manifest(tmp_path, "xxh3"))
    assert (code, report["verdict"], report["reference"], entry["wrong"]) == (
        1, "damaged", "manifest", ["buffered", "mmap", "direct"])
    differs = conclusion(entry, "differs-from-manifest")
    table = open_model(FIXTURE).tensor(PLE)
    bad = flipped(data, at)
    assert differs["evidence"]["tensors"] == [   # token_embd.weight is intact: only the flipped tensor is named
        {"tensor": PLE, "rows": None, "offset": table.offset, "length": table.nbytes, "kind": "tensor-data",
         "algorithm": "xxh3", "expected": xxhash.xxh3_64_hexdigest(tensor_bytes(data, PLE)),
         "actual": xxhash.xxh3_64_hexdigest(tensor_bytes(bad, PLE)), "line": 2}]
    assert differs["evidence"]["row_ranges"] == NO_ROWS
    assert differs["evidence"]["model"] == {
        "algorithm": "xxh3", "digest": xxhash.xxh3_64_hexdigest(tensor_bytes(data, EMBD) + tensor_bytes(data, PLE)),
        "line": 3, "compared": True, "why_not": None,
        "actual": xxhash.xxh3_64_hexdigest(tensor_bytes(bad, EMBD) + tensor_bytes(bad, PLE))}
    assert f"the tensors that differ (whole tensors: llama-gguf-hash gives no row ranges): {PLE}" in differs["text"]
    assert conclusion(entry, "read-paths-agree")["evidence"]["paths"] == ["buffered", "mmap", "direct"]


def swapped(tmp_path: Path) -> Path:
    """Two tensors whose header lists them in the reverse of their order in the file (each tensor info names
    its offset, so the header's order is free: gguf-py's GGUFReader reads such a file as well)."""
    specs = [TensorSpec("a.weight", T.F32, (8,), np.arange(8, dtype="<f4").tobytes()),
             TensorSpec("b.weight", T.F32, (8,), np.arange(8, 16, dtype="<f4").tobytes())]
    data, at = gguf_bytes(specs)
    rel = [at[s.name] - at["a.weight"] for s in specs]
    infos = [encode_tensor_info(s.name, s.ggml_type, s.shape, r) for s, r in zip(specs, rel, strict=True)]
    path = tmp_path / "swapped.gguf"
    path.write_bytes(data.replace(infos[0] + infos[1], infos[1] + infos[0]))
    assert [t.name for t in open_model(path).tensors] == ["b.weight", "a.weight"]
    return path


def test_tensors_out_of_header_order_the_model_line_is_not_compared_and_the_tensors_decide(tmp_path: Path) -> None:
    """No type llama-gguf-hash gives composes from each tensor's digest, and one read front to back cannot feed
    a digest of the tensors in header order when the file stores them in another: that line is said not to be
    compared, and the tensors' lines decide."""
    model = swapped(tmp_path)
    manifest = tmp_path / "swapped.txt"
    assert run_cli(["manifest", str(model), "--manifest-format", "llama-gguf-hash", "-o", str(manifest)]).exit_code == 0
    code, report, entry = check_json(model, "--manifest", manifest)
    assert (code, report["verdict"], report["reference"]) == (0, "intact", "manifest")
    evidence = conclusion(entry, "matches-manifest")["evidence"]
    assert (evidence["tensors"], evidence["model"]["compared"], evidence["model"]["line"]) == (2, False, 3)
    assert evidence["model"]["why_not"].startswith("the file stores its tensors' data in another order than its header")
    data = bytearray(model.read_bytes())
    data[open_model(model).tensor("a.weight").offset] ^= 1
    model.write_bytes(bytes(data))
    code, report, entry = check_json(model, "--manifest", manifest)
    assert (code, report["verdict"]) == (1, "damaged")
    assert [t["tensor"] for t in conclusion(entry, "differs-from-manifest")["evidence"]["tensors"]] == ["a.weight"]


def test_a_manifest_naming_nothing_of_the_target_is_nothing_checked(tmp_path: Path) -> None:
    lines = tmp_path / "other.txt"
    lines.write_text(f"xxh64     {'0' * 16}  other.gguf:blk.0.attn_q.weight\nxxh64     {'0' * 16}  other.gguf\n")
    with pytest.raises(NothingChecked, match="names nothing of"):
        ggaudit.check(FIXTURE, manifest=lines)
    assert run_cli(["check", str(FIXTURE), "--manifest", str(lines)]).exit_code == 2


@needs_linux
def test_a_flip_on_the_direct_path_only_is_a_read_path_the_manifest_decides(ddir: Path, tmp_path: Path) -> None:
    model = ddir / "model.gguf"
    shutil.copyfile(FIXTURE, model)
    manifest = llama_manifest(tmp_path, "sha1")
    env = faulted_env(model, "direct", "flip", offset=flip_offset(), mask=MASK)
    done = run_ggaudit(["check", str(model), "--manifest", str(manifest), "--json"], env)
    assert done.code == 1, done.stderr
    report = json.loads(done.stdout)["models"][0]
    entry = report["files"][0]
    assert (report["verdict"], report["reference"], entry["right"], entry["wrong"], entry["decided"]) == (
        "read-path", "manifest", ["buffered", "mmap"], ["direct"], True)
    differs = conclusion(entry, "read-path-differs")
    assert {k: v for k, v in differs["evidence"].items() if k not in ("file", "where")} == {
        "paths": ["direct"], "agree": ["buffered", "mmap"], "reference": "manifest", "decided": True,
        "tensors": [PLE], "first": {"offset": flip_offset(), "tensor": PLE, "row": 100}}
    assert differs["text"].startswith(f"direct reads deliver wrong bytes on this machine for tensors {PLE}")
    assert conclusion(entry, "matches-manifest")["evidence"]["paths"] == ["buffered", "mmap"]


def test_published_decides_and_lines_of_another_file_are_said_to_differ_from_it() -> None:
    """The pure decision: buffered and direct match the published sha256; the manifest's line for one tensor is
    another digest than both read: the published digest decides, and the manifest is said to be of another file."""
    from ggaudit.check.decide import PUBLISHED, Expectation, LineDigest, ManifestLines, Observed, decide_file
    published = Expectation(algorithm="sha256", digest="a" * 64, source=PUBLISHED, what="the published digest")
    lines = ManifestLines(tensors={PLE: LineDigest("xxh64", "1" * 16, 2)}, model=None, model_why=None, missing=(),
                          unnamed=(), what="the llama-gguf-hash manifest m.txt")
    seen = [Observed(mode=m, fingerprint="R", digests={"sha256": "a" * 64}, lines={PLE: "2" * 16})
            for m in ("buffered", "direct")]
    d = decide_file("m.gguf", seen, published=published, lines=lines)
    assert (d.verdict, d.reference, [c.code for c in d.conclusions]) == (
        "intact", "published", ["matches-published", "read-paths-agree", "manifest-differs-from-published"])
    assert dict(d.conclusions[-1].evidence) == {"format": "llama-gguf-hash", "published": "a" * 64, "tensors": [PLE]}
