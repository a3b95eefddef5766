"""weakshot_keypoint side computations, run as harness Tasks by reproduce.py (`fn(seed, inputs, mode)` -> a JSON
dict). The sanity checks of the heads are not here: they read a trained network, so they run inside `fit`
(config `sanity_checks`, evaluate.sanity_metrics) and come back as the base-only arm's sanity/* metrics."""

from __future__ import annotations

JOB = "jobs/weakshot_keypoint/base_only.yaml"


def support_copy(seed: int, inputs: dict, mode: str) -> dict:
    """The support-copy reference row (no model): each novel class's support keypoints mapped by the support-bbox
    -> query-bbox similarity onto its test images; PCK@{0.05, 0.1, 0.2}. The data set is the job's (data_seed 0,
    shared by every training seed), so one computation serves all seeds."""
    from methodlab.methods.weakshot_keypoint.data import build_data
    from methodlab.methods.weakshot_keypoint.evaluate import support_copy_pck
    from methodlab.specs.files import load_job

    cfg = load_job(JOB).config
    return support_copy_pck(build_data(cfg), {})
