"""Methods that cannot train data-parallel (SPEC.single_worker, or one setting in single_worker_settings) refuse
`scaling.num_workers > 1` when the job is validated, before any Ray resource is asked for: one line naming
scaling.num_workers and saying why, exit code 2 from the CLI, nothing written."""

from __future__ import annotations

import subprocess
import sys

import pytest

from methodlab.core.errors import ConfigError
from methodlab.core.registry import get_spec, method_slugs
from methodlab.specs.files import load_job
from tests.conftest import REPO

REFUSED = [s for s in method_slugs() if get_spec(s).single_worker]


def _job(slug: str) -> str:
    jobs = sorted((REPO / "jobs" / slug).glob("*.yaml"))
    return str(next(j for j in jobs if j.stem == "own_data") if any(j.stem == "own_data" for j in jobs) else jobs[0])


def test_the_refusing_methods_are_the_numpy_and_whole_run_ones():
    assert set(REFUSED) <= {"discrete_structure", "monotone_gbt", "strategic_causal", "ugodit", "agbal", "gyroatt",
                            "min_swgg"}, REFUSED
    assert {"discrete_structure", "monotone_gbt", "strategic_causal", "ugodit"} <= set(REFUSED)


@pytest.mark.parametrize("slug", REFUSED)
def test_num_workers_above_one_is_refused_with_the_reason(slug):
    with pytest.raises(ConfigError) as err:
        load_job(_job(slug), overrides=["scaling.num_workers=2"])
    assert err.value.field == "scaling.num_workers"
    assert get_spec(slug).single_worker[:40] in str(err.value) and "Tune" in str(err.value)
    load_job(_job(slug), overrides=["scaling.num_workers=1"])  # one worker is fine


def test_settings_refused_one_by_one():
    for slug in method_slugs():
        for setting, why in get_spec(slug).single_worker_settings.items():
            job = next(j for j in sorted((REPO / "jobs" / slug).glob("*.yaml"))
                       if f"setting: {setting}" in j.read_text())
            with pytest.raises(ConfigError, match="num_workers"):
                load_job(str(job), overrides=["scaling.num_workers=2"])


def test_cli_refuses_before_ray_with_exit_code_2(tmp_path):
    slug = "ugodit"
    proc = subprocess.run([sys.executable, "-m", "methodlab", "run", str(REPO / _job(slug)), "--storage",
                           str(tmp_path / "store"), "scaling.num_workers=2"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "scaling.num_workers" in lines[0] and "data-parallel" in lines[0], proc.stderr
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("job,over", [("jobs/min_swgg/plan.yaml", ["setting=train", "task=plan"]),
                                      ("jobs/min_swgg/cfm.yaml", ["setting=train", "task=flow"]),
                                      ("jobs/cmcl/digits.yaml", ["dtype=float64"])])
def test_a_config_that_cannot_run_data_parallel_is_refused_at_validation(job, over):
    """A data-parallel method whose config picks a whole-run task or the float64 exactness setting: refused when
    the job is loaded (MethodConfig.single_worker_reason), not inside fit after Ray has started."""
    with pytest.raises(ConfigError) as err:
        load_job(str(REPO / job), overrides=[*over, "scaling.num_workers=2"])
    assert err.value.field == "scaling.num_workers"
    load_job(str(REPO / job), overrides=[*over, "scaling.num_workers=1"])


def test_a_data_parallel_setting_is_not_refused_by_a_field_it_ignores():
    """min_swgg's `cfm` setting runs flow matching whatever config.task says (its default is plan)."""
    load_job(str(REPO / "jobs/min_swgg/cfm.yaml"), overrides=["scaling.num_workers=2"])
