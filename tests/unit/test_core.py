"""Core contract: overrides, strict configs, atomic never-unpickling checkpoints, stdlib `platform`."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest
import torch

from methodlab.core import CheckpointError, ConfigError, load_checkpoint, save_checkpoint
from methodlab.core.checkpoint import latest_checkpoint
from methodlab.core.overrides import apply_overrides, parse_override
from methodlab.core.registry import get_spec


def test_stdlib_platform_not_shadowed(repo):
    out = subprocess.run([sys.executable, "-c", "import platform; print(platform.system())"], cwd=repo,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out in ("Linux", "Darwin", "Windows")
    assert not (repo / "platform" / "__init__.py").exists()


@pytest.mark.parametrize("text,key,value", [
    ("lr=3e-3", "lr", 3e-3), ("reg=none", "reg", "none"), ("a.b=2", "a.b", 2), ("betas=[0.9, 0.99]", "betas", [0.9, 0.99]),
    ("flag=true", "flag", True), ("x=null", "x", None), ("name=1e", "name", "1e"),
])
def test_parse_override(text, key, value):
    assert parse_override(text) == (key, value)


def test_apply_overrides_nested_and_copy():
    base = {"config": {"lr": 1.0}}
    out = apply_overrides(base, ["config.lr=2", "scaling.num_workers=2"])
    assert out == {"config": {"lr": 2}, "scaling": {"num_workers": 2}} and base == {"config": {"lr": 1.0}}
    with pytest.raises(ConfigError):
        parse_override("no-equals-sign")


def test_unknown_method_names_registered_ones():
    with pytest.raises(ConfigError, match="registered: .*grokking_flatness"):
        get_spec("nope")


def _save(d, step=1):
    return save_checkpoint(d, method="m", config={"a": 1}, weights={"w": torch.arange(4.0)},
                           torch_state={"opt": {"state": {}, "lr": 0.1}}, state={"step": step}, extras={"hist": [1, 2]})


def test_checkpoint_round_trip(tmp_path):
    d = _save(tmp_path / "ck")
    ck = load_checkpoint(d, method="m", load_torch_state=True)
    assert torch.equal(ck.weights["w"], torch.arange(4.0)) and ck.state["step"] == 1
    assert ck.torch_state["opt"]["lr"] == 0.1 and ck.extra("hist") == [1, 2]
    assert not list(tmp_path.glob(".ck.tmp-*")), "temp dir left behind"


def test_checkpoint_overwrite_is_atomic_and_latest_found(tmp_path):
    _save(tmp_path / "a", step=1)
    _save(tmp_path / "b", step=5)
    _save(tmp_path / "a", step=2)
    (tmp_path / ".c.tmp-123").mkdir()  # an interrupted write
    (tmp_path / ".c.tmp-123" / "config.json").write_text("{}")
    assert latest_checkpoint(tmp_path) == tmp_path / "b"


def test_truncated_weights_named(tmp_path):
    d = _save(tmp_path / "ck")
    w = d / "weights.safetensors"
    w.write_bytes(w.read_bytes()[:20])
    with pytest.raises(CheckpointError, match="weights.safetensors"):
        load_checkpoint(d)


def test_corrupt_config_named(tmp_path):
    d = _save(tmp_path / "ck")
    (d / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json"):
        load_checkpoint(d)


class Evil:
    def __reduce__(self):
        return (exec, ("import pathlib; pathlib.Path('PWNED').write_text('x')",))


def test_pickled_torch_state_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = _save(tmp_path / "ck")
    with open(d / "torch_state.pt", "wb") as fh:
        pickle.dump(Evil(), fh)
    with pytest.raises(CheckpointError, match="torch_state.pt"):
        load_checkpoint(d, load_torch_state=True)
    assert not (tmp_path / "PWNED").exists()


def test_wrong_method_refused(tmp_path):
    d = _save(tmp_path / "ck")
    with pytest.raises(CheckpointError, match="expected 'other'"):
        load_checkpoint(d, method="other")


def test_no_unsafe_loads_in_source(repo):
    import re

    bad = []
    for f in (repo / "platform").rglob("*.py"):
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if re.search(r"pickle\.loads?\(|yaml\.load\(|torch\.load\(", line) and "weights_only=True" not in line \
                    and "SafeLoader" not in line and "safe_load" not in line:
                bad.append(f"{f}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad)
    assert json  # json is the format everything else uses


def _ckpt(path, step: int, value: float = 1.0):
    return save_checkpoint(path, method="m", config={"a": 1}, weights={"w": torch.full((64,), value)},
                           state={"step": step})


def test_manifest_lists_every_file_and_a_flipped_byte_is_named(tmp_path):
    d = _ckpt(tmp_path / "c", 3)
    manifest = json.loads((d / "manifest.json").read_text())["files"]
    assert set(manifest) == {p.name for p in d.iterdir()} - {"manifest.json"}
    raw = bytearray((d / "weights.safetensors").read_bytes())
    raw[-5] ^= 0x01  # inside a float: safetensors still parses it, only the checksum can tell
    (d / "weights.safetensors").write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"weights\.safetensors: sha256 differs"):
        load_checkpoint(d)


def test_resume_falls_back_to_the_previous_good_checkpoint(tmp_path, capsys):
    good = _ckpt(tmp_path / "run" / "checkpoint_1", 1)
    bad = _ckpt(tmp_path / "run" / "checkpoint_2", 2)
    assert latest_checkpoint(tmp_path / "run") == bad
    state = json.loads((bad / "state.json").read_text())
    (bad / "state.json").write_text(json.dumps({**state, "note": "edited"}))
    assert latest_checkpoint(tmp_path / "run") == good
    assert "state.json" in capsys.readouterr().err  # says which file and that it fell back


def test_checkpoint_without_manifest_still_loads(tmp_path):
    d = _ckpt(tmp_path / "old", 1)
    (d / "manifest.json").unlink()  # written before manifests existed
    assert load_checkpoint(d).state["step"] == 1


def test_run_context_progress_shows_on_rank_0_only_and_not_when_quiet(capsys):
    from methodlab.core.context import RunContext

    assert list(RunContext().progress(range(5), desc="generating")) == [0, 1, 2, 3, 4]
    err = capsys.readouterr().err
    assert "generating" in err and "5/5" in err and "100.0%" in err  # the final line always prints
    for ctx in (RunContext(quiet=True), RunContext(rank=1, world_size=2)):
        assert sum(ctx.progress(total=7, desc="rollouts")) == 21
        assert capsys.readouterr().err == ""
