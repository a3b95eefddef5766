"""`methodlab serve --from-sweep` honours SIGTERM, the stop signal of Kubernetes and systemd, even when it comes
while the application is still being deployed (the first answer arrives before `serve.run` returns; Ray's own
SIGTERM handler, installed by ray.init, aborted the process there with exit code -6): it exits within 10 s with
code 0 and leaves no Ray or HAProxy process behind, port free. The serve-file case (SIGTERM once serving):
tests/ray/test_item11_serve_file_sigterm.py, whose helpers this test shares."""

from __future__ import annotations

from pathlib import Path

from tests.ray.test_item11_serve_file_sigterm import check_clean_stop, serve_then_sigterm
from tests.smoke import smoke_run


def test_from_sweep_stops_within_10_s_of_sigterm_leaving_no_process(smoke_root, tmp_path, repo):
    run = smoke_run("grokking_flatness", smoke_root)
    assert (Path(run["run_dir"]) / "summary.parquet").exists()
    out = serve_then_sigterm(["--from-sweep", str(run["run_dir"])], "/grokking_flatness", repo,
                             tmp_path / "serve.log", wait_ready=False)
    check_clean_stop(out)
