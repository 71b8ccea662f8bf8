"""Summaries and caps of the text report: the last line of a run of several targets, -q (one line per
target), verify --limit with the count of the rest, and the line saying a manifest is another model's."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from jsonschema import Draft202012Validator

import ggaudit
from ggaudit.format.build import TensorSpec, write_gguf

from support import run_cli

VALIDATOR = Draft202012Validator(json.loads(
    resources.files("ggaudit").joinpath("schema/cli-output.schema.json").read_text("utf-8")))
N_TENSORS = 10


def _f32_model(path: Path, seed: int, *, nan_at: int | None = None) -> Path:
    """Ten F32 tensors of 8 values each, named as in both models; ``nan_at``: that element of the first a NaN."""
    rng = np.random.default_rng(seed)
    specs = []
    for i in range(N_TENSORS):
        values = rng.standard_normal(8).astype("<f4")
        if i == 0 and nan_at is not None:
            values[nan_at] = np.float32("nan")
        specs.append(TensorSpec(f"blk.{i}.attn_norm.weight", T.F32, (8,), values.tobytes()))
    write_gguf(path, specs, {"general.architecture": "llama"})
    return path


def test_several_models_end_with_a_count_and_quiet_shows_one_line_each(tmp_path: Path) -> None:
    clean, nan = _f32_model(tmp_path / "clean.gguf", 1), _f32_model(tmp_path / "nan.gguf", 1, nan_at=3)
    missing = tmp_path / "missing.gguf"
    full = run_cli(["scan", clean, nan, missing])
    assert full.exit_code == 2
    assert full.stdout.splitlines()[-1] == "3 models: 1 with findings, 1 clean, 1 error"
    assert "  nan at file" in full.stdout
    quiet = run_cli(["scan", clean, nan, missing, "-q"])
    assert quiet.exit_code == 2
    assert quiet.stdout.splitlines() == [f"model {clean}: clean", f"model {nan}: 1 finding (nan 1)",
                                         "3 models: 1 with findings, 1 clean, 1 error"]
    (error,) = quiet.stderr.splitlines()        # the error, still on stderr, as without -q
    assert error.startswith(f"ggaudit: error: {missing}: ") and full.stderr == quiet.stderr


def test_one_target_has_no_count_line_and_two_say_plural_errors(tmp_path: Path) -> None:
    clean = _f32_model(tmp_path / "clean.gguf", 1)
    alone = run_cli(["scan", clean, "-q"])
    assert (alone.exit_code, alone.stdout) == (0, f"model {clean}: clean\n")
    two = run_cli(["scan", tmp_path / "a.gguf", tmp_path / "b.gguf"])
    assert two.stdout == "2 models: 0 with findings, 0 clean, 2 errors\n"


def test_quiet_verify_and_diff_say_one_line(tmp_path: Path) -> None:
    model = _f32_model(tmp_path / "m.gguf", 1)
    manifest = tmp_path / "m.manifest.json"
    assert run_cli(["manifest", model, "-o", manifest]).exit_code == 0
    verified = run_cli(["verify", model, "--manifest", manifest, "-q"])
    assert (verified.exit_code, verified.stdout) == (0, f"verify manifest {model}: clean, 1 file checked\n")
    other = _f32_model(tmp_path / "other.gguf", 2)
    differ = run_cli(["diff", model, other, "-q"])
    assert (differ.exit_code, differ.stdout) == (1, f"diff {model} {other}: 10 tensors with other data\n")
    same = run_cli(["diff", model, model, "-q"])
    assert same.stdout == f"diff {model} {model}: same metadata and tensors\n"


def _against_other_model(tmp_path: Path) -> tuple[Path, Path]:
    """A manifest of one model, and another model (same tensor names and shapes, other values) named as it."""
    manifest = tmp_path / "m.manifest.json"
    (tmp_path / "first").mkdir()
    assert run_cli(["manifest", _f32_model(tmp_path / "first" / "m.gguf", 1), "-o", manifest]).exit_code == 0
    return _f32_model(tmp_path / "m.gguf", 2), manifest


def test_verify_against_another_model_is_capped_and_said(tmp_path: Path) -> None:
    model, manifest = _against_other_model(tmp_path)
    result = run_cli(["verify", model, "--manifest", manifest, "--limit", "2"])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if line.startswith("MISMATCH")] == [
        "MISMATCH sha256", "MISMATCH tensor-data"]
    assert lines[-3:] == [
        "... and 9 more mismatches (--limit)",
        "10 of 10 tensors differ from the manifest: this looks like another model (or another build of it), "
        "not damage to this one",
        f"summary: 1 file checked, 0 from the cache, {model.stat().st_size} bytes hashed, 11 mismatches"]
    none = run_cli(["verify", model, "--manifest", manifest, "--limit", "0", "-q"])
    assert none.stdout == (f"verify manifest {model}: 11 mismatches (sha256 1, tensor-data 10); "
                           "looks like another model\n")
    listed = run_cli(["verify", model, "--manifest", manifest, "--limit", "0"]).stdout.splitlines()
    assert not any(line.startswith("MISMATCH") for line in listed)
    assert listed[1] == "... and 11 more mismatches (--limit)"
    doc = json.loads(run_cli(["verify", model, "--manifest", manifest, "--limit", "1", "--json"]).stdout)
    assert VALIDATOR.is_valid(doc)
    report = doc["models"][0]
    assert (len(report["mismatches"]), report["another_model"]) == (11, True)
    assert (report["stats"]["tensors"], report["stats"]["tensors_differing"]) == (10, 10)


def test_the_default_limit_is_20(tmp_path: Path) -> None:
    model, manifest = _against_other_model(tmp_path)
    lines = run_cli(["verify", model, "--manifest", manifest]).stdout.splitlines()
    assert sum(line.startswith("MISMATCH") for line in lines) == 11
    assert not any(line.startswith("... and") for line in lines)


def test_damage_to_one_tensor_is_not_another_model(tmp_path: Path) -> None:
    model = _f32_model(tmp_path / "m.gguf", 1)
    manifest = tmp_path / "m.manifest.json"
    assert run_cli(["manifest", model, "-o", manifest]).exit_code == 0
    _f32_model(model, 1, nan_at=3)
    report = ggaudit.verify(model, manifest=manifest)
    assert (report.stats.tensors, report.stats.tensors_differing, report.another_model) == (10, 1, False)
    lines = run_cli(["verify", model, "--manifest", manifest]).stdout.splitlines()
    assert not any("another model" in line for line in lines)
    assert lines[-1] == f"summary: 1 file checked, 0 from the cache, {model.stat().st_size} bytes hashed, 2 mismatches"


def test_digests_without_tensors_never_say_another_model(tmp_path: Path) -> None:
    model = _f32_model(tmp_path / "m.gguf", 1)
    report = ggaudit.verify(model, sha256="0" * 64)
    assert (report.stats.tensors, report.stats.tensors_differing, report.another_model) == (0, 0, False)
