"""Issue 42 item 1 (leftover): unirl with a corrupt or truncated .hdf5 dataset is one line naming the file,
exit code 2, no traceback (h5py raised OSError before)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from methodlab.core import ConfigError
from methodlab.data import offline_rl

ROOT = Path(__file__).resolve().parents[2]
LOW, HIGH = np.array([-2.0]), np.array([2.0])


def test_loader_names_a_garbage_file(tmp_path):
    bad = tmp_path / "garbage.hdf5"
    bad.write_bytes(b"this is not an HDF5 file\n" * 40)
    with pytest.raises(ConfigError) as err:
        offline_rl.load_d4rl_hdf5(bad, LOW, HIGH)
    msg = str(err.value)
    assert str(bad) in msg and "dataset" in msg and "\n" not in msg


def test_loader_names_a_truncated_file(tmp_path):
    pytest.importorskip("h5py")
    good = offline_rl.STORED["pendulum-v1-medium-replay"]
    cut = tmp_path / "cut.hdf5"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 3])  # a download cut off part way
    with pytest.raises(ConfigError) as err:
        offline_rl.load_d4rl_hdf5(cut, LOW, HIGH)
    assert str(cut) in str(err.value)


def test_cli_corrupt_hdf5_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "corrupt.hdf5"
    bad.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 8)  # HDF5 magic, then garbage
    proc = subprocess.run([sys.executable, "-m", "methodlab.cli.main", "run", "jobs/unirl/offline.yaml", "--local",
                           "--smoke", f"dataset={bad}", "--storage", str(tmp_path / "runs"), "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out and str(bad) in out, out
