"""The repository stands alone: a user's clone has no folder beside it (no shared/ next to it), so nothing the
suite or the CLI reads may live outside the repository. Proof: copy the repository's files alone into an
empty temporary folder and run the suite's k8s checks there, with no CRD folder named anywhere."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def _repo_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if (REPO / f).is_file()]


def test_k8s_checks_pass_from_a_lone_copy_of_the_repository(tmp_path):
    alone = tmp_path / "empty" / "methodlab"  # nothing beside it: no shared/ folder next to it
    for rel in _repo_files():
        dst = alone / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dst)
    env = {k: v for k, v in os.environ.items() if k != "METHODLAB_K8S_CRDS"}
    env["PYTHONPATH"] = str(alone / "platform")  # the copy's own sources, not the checkout's
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/configs/test_shipped_files.py",
           "-k", "k8s or manifest or rayservice or rayjob"]
    res = subprocess.run(cmd, cwd=alone, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert re.search(r"\d+ passed", res.stdout) and "skipped" not in res.stdout.splitlines()[-1], res.stdout[-1500:]
    res = subprocess.run([sys.executable, "-m", "methodlab", "k8s", "validate"], cwd=alone, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert res.stdout.count("ok ") == len(list((alone / "k8s").glob("*.yaml")))


def test_no_source_reads_outside_the_repository():
    pattern = re.compile(r"\.\./shared|[\"']shared[\"']\s*/\s*[\"']k8s-crds|parent\s*/\s*[\"']shared[\"']")
    hits = []
    for rel in _repo_files():
        if rel.endswith((".py", "Makefile", ".sh", ".toml", ".cfg")) or rel.startswith(".ci/"):
            text = (REPO / rel).read_text(errors="replace")
            if rel != "tests/configs/test_standalone.py" and pattern.search(text):
                hits.append(rel)
    assert hits == [], f"these read outside the repository: {hits}"
