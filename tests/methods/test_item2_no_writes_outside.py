"""Issue 42 item 2: a run writes inside its run folder, never into the working directory; a path it reads may
be anywhere and, when missing, stops the run with one line naming the field and the file.

The shared smoke run of every method (tests/smoke.py) runs from a fresh, empty working directory with its
storage in a temporary folder; whatever it left in that directory, it wrote outside its run folder. The smoke
presets set no write path, so each write-path field (Config.write_paths) gets its own small run below, from an
empty working directory too."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from methodlab.core import ConfigError
from methodlab.runners.local import run_local
from methodlab.specs.files import load_job
from tests.smoke import smoke_run


def test_smoke_run_writes_nothing_in_the_working_directory(method_smoke):
    slug, run = method_smoke
    assert run["cwd_writes"] == [], (
        f"{slug}'s smoke run wrote into the working directory: {run['cwd_writes'][:10]} "
        "(write with ctx.write_path(...): relative paths land in the run folder)")
    assert Path(run["run_dir"]).is_absolute() and (Path(run["run_dir"]) / "job.yaml").is_file()


@contextlib.contextmanager
def empty_cwd(root: Path):
    """chdir into a fresh empty folder (restored after); yields it."""
    cwd = root / "cwd"
    cwd.mkdir()
    before = os.getcwd()
    os.chdir(cwd)
    try:
        yield cwd
    finally:
        os.chdir(before)


def _run(tmp_path, cwd, slug, setting, config, smoke=False):
    loaded = load_job(None, data={"method": slug, "setting": setting, "config": config}, smoke=smoke)
    out = run_local(loaded, f"{slug}-{setting}", str(tmp_path / "store"), quiet=True)
    return Path(out["run_dir"]), sorted(str(p.relative_to(cwd)) for p in cwd.rglob("*"))


# (slug, setting, config, smoke preset, the file the write path puts inside the run folder)
WRITE_RUNS = [
    ("face", "train", {"stages": ["pretrain"], "stage_dir": "stages"}, True, "stages/stage_pretrain/config.json"),
    ("mtpp_threshold", "simulate", {"simulate_out": "easytpp", "n_train": 5, "n_val": 3, "n_test": 3, "seq_events": 6},
     False, "easytpp/train.json"),
    ("discrete_structure", "simulate", {"export_dir": "export"}, True, "export/train.csv"),
    ("ucan", "image_denoise", {"image_crop": 32, "image_iters": 2, "image_channels": 8, "output_path": "out/denoised.png"},
     False, "out/denoised.png"),
    ("unirl", "make_dataset", {"hidden": [16, 16], "eval_episodes": 1, "batch_size": 64, "torch_threads": 1,
                               "dataset": "generate:random:200",
                               "generation": {"kinds": ["random"], "n_transitions": 200, "out_dir": "datasets"}},
     False, "datasets/pendulum-v1-random.hdf5"),
]


@pytest.mark.parametrize("slug,setting,config,smoke,expected", WRITE_RUNS, ids=[f"{r[0]}.{r[1]}" for r in WRITE_RUNS])
def test_a_relative_write_path_lands_in_the_run_folder(tmp_path, slug, setting, config, smoke, expected):
    with empty_cwd(tmp_path) as cwd:
        run_dir, left = _run(tmp_path, cwd, slug, setting, config, smoke)
    assert left == [], f"{slug}.{setting} wrote into the working directory: {left}"
    assert (run_dir / expected).is_file(), f"{slug}.{setting}: {expected} not in the run folder {run_dir}"


def test_face_explain_writes_descriptors_in_the_run_folder(tmp_path, smoke_root):
    from methodlab.core.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(Path(smoke_run("face", smoke_root)["run_dir"]) / "checkpoints")
    with empty_cwd(tmp_path) as cwd:
        run_dir, left = _run(tmp_path, cwd, "face", "explain", {"init_from": str(ckpt), "stages": ["align"]}, True)
    assert left == [] and (run_dir / "descriptors.jsonl").stat().st_size > 0
    assert not (ckpt / "descriptors.jsonl").exists(), "explain wrote into the checkpoint it read"


def test_ucan_denoise_reads_relative_to_the_cwd_and_writes_in_the_run_folder(tmp_path, smoke_root):
    import numpy as np

    from methodlab.data.ucan_meshes import save_points

    ck = str(Path(smoke_run("ucan", smoke_root)["run_dir"]))  # a run folder: its newest checkpoint
    with empty_cwd(tmp_path) as cwd:
        save_points(cwd / "in.xyz", np.random.default_rng(0).normal(size=(200, 3)))
        run_dir, left = _run(tmp_path, cwd, "ucan", "denoise",
                             {"checkpoint_path": ck, "input_path": "in.xyz", "eval_patch_size": 128})
    assert left == ["in.xyz"], f"ucan.denoise wrote beside its input: {left}"
    assert (run_dir / "in_ucan.xyz").is_file()


# (slug, setting, config, smoke preset, the field the one-line error names)
MISSING_READS = [
    ("face", "train", {"stages": ["align"], "init_from": "nope/stage_map"}, True, "init_from"),
    ("face", "explain", {"stages": ["align"], "init_from": "nope/stage_align"}, True, "init_from"),
    ("mtpp_threshold", "calibrate", {"checkpoint_path": "nope/mtpp_threshold-hawkes"}, False, "checkpoint_path"),
    ("mtpp_threshold", "train", {"dataset": "file", "data_path": "nope/easytpp"}, False, "data_path"),
    ("ucan", "denoise", {"checkpoint_path": "nope/ucan-train_analytic", "input_path": "nope.xyz"}, False, "input_path"),
    ("ucan", "eval", {"checkpoint_path": "nope/ucan-train_analytic"}, True, "checkpoint_path"),
    ("ucan", "image_denoise", {"image_path": "nope.png"}, False, "image_path"),
    ("gyroatt", "train", {"dataset": "npz", "data_path": "nope/A01.npz"}, True, "data_path"),
    ("gyroatt", "evaluate", {"eval_checkpoint": "nope/gyroatt-acceptance"}, True, "eval_checkpoint"),
]


@pytest.mark.parametrize("slug,setting,config,smoke,field", MISSING_READS,
                         ids=[f"{r[0]}.{r[1]}.{r[4]}" for r in MISSING_READS])
def test_a_missing_read_path_is_one_line_naming_field_and_file(tmp_path, slug, setting, config, smoke, field):
    with empty_cwd(tmp_path) as cwd:
        with pytest.raises(ConfigError) as err:
            _run(tmp_path, cwd, slug, setting, config, smoke)
        left = sorted(p.name for p in cwd.iterdir())
    text = str(err.value)
    assert "\n" not in text and f"config.{field}" in text and str(config[field]) in text and "not found" in text, text
    assert left == []
