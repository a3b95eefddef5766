"""`methodlab submit`: a job file as a Ray Job through the Jobs SDK (never a shell-out to `ray`).

Token authentication stays on: the token comes from RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or
~/.ray/auth_token and travels as a bearer header. The entrypoint is the installed `methodlab`
(the head's PATH decides which one; see README)."""

from __future__ import annotations

import os
import shlex
import time
import uuid
from pathlib import Path

from methodlab.core.errors import MethodlabError

WORKING_DIR_EXCLUDES = [".git", ".venv", "results", "mlruns", "**/__pycache__", "*.egg-info", ".pytest_cache"]
DEFAULT_ADDRESS = "http://127.0.0.1:8265"


def read_token() -> str | None:
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH", Path.home() / ".ray" / "auth_token"))
    return path.read_text().strip() if path.is_file() else None


def client(address: str | None):
    from ray.job_submission import JobSubmissionClient

    addr = address or os.environ.get("RAY_ADDRESS") or DEFAULT_ADDRESS
    if not addr.startswith(("http://", "https://")):
        addr = f"http://{addr.split('://')[-1].rsplit(':', 1)[0]}:8265" if "://" in addr else f"http://{addr}"
    token = read_token()
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return JobSubmissionClient(addr, headers=headers), addr


def entrypoint_for(job_path: str, overrides: list[str], storage: str | None) -> str:
    parts = ["methodlab", "run", job_path, *overrides]
    if storage:
        parts += ["--storage", storage]
    return " ".join(shlex.quote(p) for p in parts)


def follow_up_commands(addr: str, submission_id: str) -> list[str]:
    pre = f"RAY_AUTH_MODE=token RAY_ADDRESS={addr}"
    return [f"{pre} ray job {verb} {submission_id}" for verb in ("logs --follow", "status", "stop")]


def _submit_with_retry(c, *, wait_s: float = 90.0, **kw) -> str:
    """A head that has just started answers 500 "No available agent to submit job" until its job agent has
    registered (seconds on an idle machine, longer on a busy one): retry that answer only, then give up
    with one clear line."""
    deadline, delay = time.time() + wait_s, 1.0
    while True:
        try:
            return c.submit_job(**kw)
        except RuntimeError as err:
            if "No available agent" not in str(err):
                raise
            if time.time() > deadline:
                raise MethodlabError(f"the Ray head's job agent did not come up within {wait_s:.0f} s "
                                     "(No available agent to submit job); try again when the head is ready. If another Ray "
                                     "instance runs on the head's machine, its dashboard agent may hold port 52365: start "
                                     "the head with --dashboard-agent-listen-port=<free port>") from None
            time.sleep(delay)
            delay = min(delay * 1.5, 5.0)


def submit(job_path: str, overrides: list[str], *, address: str | None = None, working_dir: str = ".",
           submission_id: str | None = None, no_wait: bool = False, storage: str | None = None,
           runtime_env: dict | None = None, echo=print, timeout_s: float | None = None) -> dict:
    from ray.job_submission import JobStatus

    c, addr = client(address)
    wd = Path(working_dir).resolve()
    rel = os.path.relpath(Path(job_path).resolve(), wd)
    if rel.startswith(".."):
        raise MethodlabError(f"{job_path} is outside the working dir {wd}: pass --working-dir")
    env = dict(runtime_env or {})
    env.setdefault("working_dir", str(wd))
    env["excludes"] = sorted(set(env.get("excludes", [])) | set(WORKING_DIR_EXCLUDES))
    sid = submission_id or f"methodlab-{Path(job_path).stem}-{uuid.uuid4().hex[:8]}"
    sid = _submit_with_retry(c, entrypoint=entrypoint_for(rel, overrides, storage), runtime_env=env,
                             submission_id=sid, metadata={"methodlab_job": rel}, entrypoint_num_cpus=0)
    echo(f"submitted {sid} to {addr}")
    for cmd in follow_up_commands(addr, sid):
        echo(f"  {cmd}")
    status = None
    if not no_wait:
        start = time.time()
        while True:
            status = c.get_job_status(sid)
            if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
                break
            if timeout_s is not None and time.time() - start > timeout_s:
                break
            time.sleep(1.0)
        echo(f"{sid}: {status}")
    return {"submission_id": sid, "address": addr, "status": str(status) if status else None}
