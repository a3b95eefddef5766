"""YAML validation: errors name the file, the field and the allowed values, before Ray starts."""

from __future__ import annotations

import pytest
import yaml

from methodlab.core import ConfigError
from methodlab.specs.files import load_job, load_search_space


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def test_job_errors_name_file_and_field(tmp_path):
    p = write(tmp_path, "j.yaml", {"method": "grokking_flatness", "config": {"reg": "bogus"}})
    with pytest.raises(ConfigError) as e:
        load_job(p)
    msg = str(e.value)
    assert "j.yaml" in msg and "config.reg" in msg and "anti_flat" in msg


@pytest.mark.parametrize("data,fragment", [
    ({"method": "grokking_flatness", "config": {"lrr": 1}}, "config.lrr: unknown field"),
    ({"method": "grokking_flatness", "scaling": {"num_workers": 0}}, "scaling.num_workers"),
    ({"method": "grokking_flatness", "setting": "nope"}, "allowed: train, measure"),
    ({"method": "nope"}, "registered:"),
    ({"method": "grokking_flatness", "config": {"p": 96}}, "prime"),
    ({"method": "grokking_flatness", "surprise": 1}, "surprise: unknown field"),
])
def test_job_errors(tmp_path, data, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        load_job(write(tmp_path, "j.yaml", data))


def test_malformed_yaml_names_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("method: grokking_flatness\nconfig: {lr: [\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: not valid YAML at line"):
        load_job(p)


def test_precedence_defaults_job_smoke_cli(tmp_path):
    p = write(tmp_path, "j.yaml", {"method": "grokking_flatness", "config": {"lr": 1e-3, "max_steps": 5000}})
    loaded = load_job(p, overrides=["max_steps=7", "scaling.num_workers=2"], smoke=True)
    assert loaded.config.lr == 3e-3  # smoke preset beats the job file
    assert loaded.config.max_steps == 7  # the command line beats both
    assert loaded.job.scaling.num_workers == 2


def test_search_space_paths_checked(tmp_path, repo):
    base = repo / "jobs/grokking_flatness/cpu.yaml"
    good = {"base_job": str(base), "params": {"lr": {"loguniform": [1e-3, 1e-2]}}}
    assert load_search_space(write(tmp_path, "s.yaml", good)).metric == "val/accuracy"
    bad = {"base_job": str(base), "params": {"optim.lr": {"loguniform": [1e-3, 1e-2]}}}
    with pytest.raises(ConfigError, match="unknown config field 'optim'"):
        load_search_space(write(tmp_path, "s.yaml", bad))
    bad_choice = {"base_job": str(base), "params": {"reg": {"choice": ["none", "zap"]}}}
    with pytest.raises(ConfigError, match=r"params\.reg\.choice\[1\]"):  # names the failing entry
        load_search_space(write(tmp_path, "s.yaml", bad_choice))
    bad_dist = {"base_job": str(base), "params": {"lr": {"loguniform": [0, 1]}}}
    with pytest.raises(ConfigError, match="bounds must be > 0"):
        load_search_space(write(tmp_path, "s.yaml", bad_dist))
    bad_point = {**good, "search_alg": {"points_to_evaluate": [{"reg": "none"}]}}
    with pytest.raises(ConfigError, match="points_to_evaluate"):
        load_search_space(write(tmp_path, "s.yaml", bad_point))


def test_cli_validate_exit_code(tmp_path, repo):
    import subprocess
    import sys

    p = write(tmp_path, "j.yaml", {"method": "grokking_flatness", "config": {"reg": "bogus"}})
    r = subprocess.run([sys.executable, "-m", "methodlab", "validate", str(p)], capture_output=True, text=True)
    assert r.returncode == 2 and "config.reg" in r.stderr and "Traceback" not in r.stderr
