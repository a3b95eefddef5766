"""Run names and storage locations, resolved to absolute paths in the driver before Ray starts
(Tune runs each trial in its own working directory, so relative paths would move)."""

from __future__ import annotations

import os
import re
from pathlib import Path


def is_uri(path: str) -> bool:
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", path))


def resolve_storage(configured: str | None, cli: str | None = None) -> str:
    raw = cli or configured or os.environ.get("METHODLAB_STORAGE") or "./results"
    return raw if is_uri(raw) else str(Path(raw).expanduser().resolve())


def default_run_name(slug: str, job_path: Path | None, setting: str, smoke: bool) -> str:
    stem = job_path.stem if job_path else setting
    return f"{slug}-{stem}" + ("-smoke" if smoke else "")


SMOKE_SUFFIX = "-smoke"


def run_name(cli_name: str | None, job_name: str | None, slug: str, job_path: Path | None, setting: str,
             smoke: bool) -> str:
    """The run folder's name: --name as given; else the job's run.name; else <method>-<preset>. A --smoke run
    of a job file gets `-smoke` after its name, so a smoke run never writes into (or resumes, or blocks) the
    full run's folder; only an explicit --name is taken as is."""
    if cli_name:
        return cli_name
    if job_name:
        return job_name if not smoke or job_name.endswith(SMOKE_SUFFIX) else job_name + SMOKE_SUFFIX
    return default_run_name(slug, job_path, setting, smoke)


# File systems whose mounts every node of a cluster can see (a path on one of these passes the storage rule).
SHARED_FS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "cephfs", "glusterfs", "fuse.glusterfs", "lustre",
             "gpfs", "beegfs", "fuse.juicefs", "fuse.s3fs", "fuse.gcsfuse", "fuse.mountpoint-s3", "fuse.cephfs",
             "9p", "virtiofs", "panfs", "wekafs", "fuse.sshfs"}
ASSUME_SHARED_ENV = "METHODLAB_ASSUME_SHARED_STORAGE"


def mount_fstype(path: str) -> str | None:
    """File-system type of the mount holding `path` (longest mount-point prefix in /proc/mounts)."""
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    best, fstype = "", None
    target = str(Path(path).resolve())
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if (target == mnt or target.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, fstype = mnt, parts[2]
    return fstype


def alive_nodes() -> int:
    import ray

    return sum(1 for n in ray.nodes() if n.get("Alive"))


def check_shared_storage(storage: str, assume_shared: bool = False) -> None:
    """Before any trial or worker starts: on a cluster of more than one node, a plain local storage path
    that is not on a network file system would leave each node's checkpoints where the others cannot
    read them (a trial or worker restarted elsewhere would start over). Refuse it, with one line.
    Ray must be initialized. URIs (s3://, gs://, ...) and known shared mounts pass."""
    from methodlab.core.errors import StorageError

    if assume_shared or os.environ.get(ASSUME_SHARED_ENV, "").lower() in ("1", "true", "yes"):
        return
    if is_uri(storage) and not storage.startswith("file://"):
        return
    nodes = alive_nodes()
    if nodes <= 1:
        return
    local = storage.removeprefix("file://")
    fstype = mount_fstype(local)
    if fstype in SHARED_FS:
        return
    raise StorageError(f"storage {local} is a local path ({fstype or 'unknown'} file system) and this Ray cluster has "
                       f"{nodes} nodes: pass --storage with a URI every node reaches (s3://..., gs://...) or a shared "
                       f"mount, and --assume-shared-storage (or {ASSUME_SHARED_ENV}=1) if that mount is shared")
