"""``scan(..., hashes=("sha256",))`` and ``ggaudit scan --sha256``: one read feeds the hash and the scan.

Each byte of the file is read exactly once (every ``os.preadv`` is recorded), the digest equals
hashlib's of the file, and the findings are exactly those of a scan without hashing, whatever the
chunk size cuts.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as T

from ggaudit.scan import run as scan_module
from ggaudit.io import positioned
from ggaudit.format.blocks import LAYOUTS
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.cli import main
from ggaudit.errors import UsageError
from ggaudit.format.layout import open_model
from ggaudit.scan.run import scan

from support import all_types_specs, write_split_set
from scan_support import finite_tensor, poke

Q4K_OFFSET_OF = "blk.0.ffn_down.weight"


def _model(path: Path) -> dict[str, int]:
    """Every type, plus a Q4_K tensor with a +inf and a NaN scale and an F32 tensor with a -inf."""
    q4k = LAYOUTS[T.Q4_K]
    quant = finite_tensor(T.Q4_K, (512, 40), 1)
    poke(quant, q4k, 7 * 2 + 1, q4k.fields[0], 0x7C00)      # row 7, block 1: d = +inf
    poke(quant, q4k, 31 * 2, q4k.fields[1], 0x7E01)         # row 31, block 0: dmin = NaN
    floats = finite_tensor(T.F32, (300, 9), 2)
    floats[(5 * 300 + 123) * 4:(5 * 300 + 124) * 4] = (0xFF800000).to_bytes(4, "little")  # row 5, col 123
    return write_gguf(path, [*all_types_specs(rows=3),
                             TensorSpec(Q4K_OFFSET_OF, T.Q4_K, (512, 40), bytes(quant)),
                             TensorSpec("output.weight", T.F32, (300, 9), bytes(floats))])


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _comparable(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("stats", "digests")}


@pytest.fixture()
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[os.stat_result, int, int]]:
    """Every (file's stat, offset, bytes read) of ggaudit's positioned reads from the moment it is requested."""
    log: list[tuple[os.stat_result, int, int]] = []
    real_pread_into, real_pread = positioned.pread_into, positioned.pread

    def pread_into(fd: int, view: memoryview, offset: int) -> int:
        n = real_pread_into(fd, view, offset)
        log.append((os.fstat(fd), offset, n))
        return n

    def pread(fd: int, n: int, offset: int) -> bytes:
        data = real_pread(fd, n, offset)
        log.append((os.fstat(fd), offset, len(data)))
        return data

    monkeypatch.setattr(positioned, "pread_into", pread_into)
    monkeypatch.setattr(positioned, "pread", pread)
    return log


def _assert_read_once(log: list[tuple[os.stat_result, int, int]], path: Path) -> None:
    mine = sorted((offset, n) for st, offset, n in log if os.path.samestat(st, path.stat()))
    pos = 0
    for offset, n in mine:
        assert offset == pos, f"byte {pos} of {path} read {'twice' if offset < pos else 'never'}"
        pos += n
    assert pos == path.stat().st_size


@pytest.mark.parametrize("chunk", [4097, 8 << 20])
def test_one_read_gives_sha256_and_the_same_findings(tmp_path: Path, chunk: int,
                                                     reads: list[tuple[os.stat_result, int, int]],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.gguf"
    offsets = _model(path)
    monkeypatch.setattr(scan_module, "STREAM_CHUNK_BYTES", chunk)    # 4097: every block cut somewhere
    model = open_model(path)            # the header is parsed before the reads are counted
    reads.clear()
    hashed = scan(model, hashes=("sha256",))
    _assert_read_once(reads, path)
    assert [(d.path, d.size, dict(d.digests)) for d in hashed.digests] == [
        (str(path), path.stat().st_size, {"sha256": _sha256(path)})]
    plain = scan(path)
    assert _comparable(hashed.to_json()) == _comparable(plain.to_json())
    assert "digests" not in plain.to_json()
    found = {(t.name, f.kind, f.row, f.column, f.block, f.field, f.offset, f.bits)
             for t in hashed.tensors for f in t.findings}
    assert found == {
        (Q4K_OFFSET_OF, "+inf", 7, 256, 1, "d", offsets[Q4K_OFFSET_OF] + 15 * 144, "0x7c00"),
        (Q4K_OFFSET_OF, "nan", 31, 0, 0, "dmin", offsets[Q4K_OFFSET_OF] + 62 * 144 + 2, "0x7e01"),
        ("output.weight", "-inf", 5, 123, 123, "value", offsets["output.weight"] + (5 * 300 + 123) * 4,
         "0xff800000"),
    }
    assert hashed.counts == {"nan": 1, "+inf": 1, "-inf": 1, "outlier": 0}


def test_split_set_gets_one_sha256_per_shard_each_read_once(tmp_path: Path,
                                                            reads: list[tuple[os.stat_result, int, int]]) -> None:
    shards = write_split_set(tmp_path)
    model = open_model(shards[1])
    reads.clear()
    report = scan(model, hashes=("sha256", "xxh3-128"))
    for shard in shards:
        _assert_read_once(reads, shard)
    assert [d.path for d in report.digests] == [str(s) for s in shards]
    assert [d.digests["sha256"] for d in report.digests] == [_sha256(s) for s in shards]
    assert [d.size for d in report.digests] == [s.stat().st_size for s in shards]


def test_bad_requests_are_usage_errors(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _model(path)
    with pytest.raises(UsageError, match="unknown digest algorithm 'md5'"):
        scan(path, hashes=("md5",))
    with pytest.raises(UsageError, match="workers must be 0 or None"):
        scan(path, hashes=("sha256",), workers=2)


def test_fail_fast_keeps_the_findings_and_says_the_digest_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _model(path)
    hashed = scan(path, hashes=("sha256",), fail_fast=True)
    plain = scan(path, fail_fast=True)
    assert _comparable(hashed.to_json()) == {**_comparable(plain.to_json()), "warnings": [
        *plain.warnings, "stopped at the first finding (fail_fast): no digests for 1 of 1 files"]}
    assert hashed.digests == () and hashed.to_json()["digests"] == []


def _cli(*args: object) -> Any:
    return CliRunner().invoke(main, ["scan", *map(str, args)])


def test_cli_text_adds_one_sha256sum_style_line_per_file(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _model(path)
    plain, hashed = _cli(path), _cli(path, "--sha256")
    assert (plain.exit_code, hashed.exit_code) == (1, 1)
    lines = plain.stdout.splitlines()
    assert hashed.stdout.splitlines() == [lines[0], f"sha256  {_sha256(path)}  {path}", *lines[1:]]
    assert hashed.stderr == ""


def test_cli_json_adds_digests_and_keeps_every_other_key(tmp_path: Path) -> None:
    shards = write_split_set(tmp_path)
    plain = json.loads(_cli(shards[0], "--json").stdout)["models"][0]
    hashed = json.loads(_cli(shards[0], "--json", "--sha256").stdout)["models"][0]
    assert hashed["digests"] == [{"path": str(s), "size": s.stat().st_size, "sha256": _sha256(s)} for s in shards]
    assert _comparable(hashed) == _comparable(plain)
    assert list(hashed)[:len(plain)] == list(plain)


def test_cli_several_models_each_with_its_sha256(tmp_path: Path) -> None:
    a = tmp_path / "a.gguf"
    _model(a)
    write_split_set(tmp_path)
    b = tmp_path / "split-00001-of-00002.gguf"
    both = _cli(a, b, "--sha256", "--jobs", 2)
    assert both.exit_code == 1, both.output
    assert both.stdout == (_cli(a, "--sha256").stdout + _cli(b, "--sha256").stdout
                           + "2 models: 1 with findings, 1 clean, 0 errors\n")
    assert f"sha256  {_sha256(a)}  {a}" in both.stdout.splitlines()
