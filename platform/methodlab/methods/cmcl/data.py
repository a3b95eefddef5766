"""Build the continual step sequence of cmcl: a list of PairSet (aligned pairs of two modalities), each
oriented so that `mod_a` is the first modality in the canonical order (the rows of the official loss)."""

from __future__ import annotations

from dataclasses import replace

from methodlab.data.cmcl_synthetic import DIGITS_STEPS, SYNTH_STEPS, PairSet, digits_views, latent_binding

# Official modality order; unknown names (digits views, user files) come after it, alphabetically.
CANONICAL = ("vision", "text", "audio", "thermal", "depth", "imu", "video", "tactile", "point")


def canon_key(m: str) -> tuple[int, str]:
    return (CANONICAL.index(m), "") if m in CANONICAL else (len(CANONICAL), m)


def step_pairs(cfg) -> list[tuple[str, str, str]]:
    """[(step spec, a, b)] for the configured sequence (a, b as written; orientation happens later)."""
    if cfg.data == "features":
        from methodlab.data.cmcl_features import parse_step

        out = []
        for s in cfg.steps or []:
            ds, a, b = parse_step(s)
            if cfg.feature_format == "hdf5":  # indices -> the dataset's modality names (heads are per name)
                from methodlab.data.cmcl_hdf5 import resolve

                names = cfg.dataset_modalities.get(ds)
                a, b = resolve(ds, a, names)[1], resolve(ds, b, names)[1]
            out.append((s, a, b))
    elif cfg.steps is None:
        default = SYNTH_STEPS if cfg.data == "synthetic" else DIGITS_STEPS
        out = [(f"{a},{b}", a, b) for a, b in default]
    else:
        out = []
        for s in cfg.steps:
            parts = [p.strip() for p in s.split(",")]
            if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
                raise ValueError(f"step {s!r} must be '<modality_a>,<modality_b>' (two different modalities)")
            out.append((s, parts[0], parts[1]))
    if cfg.data == "digits":
        bad = sorted({m for _, a, b in out for m in (a, b)} - {"pixels", "profiles", "lowres", "text"})
        if bad:
            raise ValueError(f"steps: digits has no modality {bad[0]!r}; available: lowres, pixels, profiles, text")
    if cfg.n_steps is not None:
        if cfg.n_steps > len(out):
            raise ValueError(f"n_steps={cfg.n_steps} but the sequence has {len(out)} steps")
        out = out[: cfg.n_steps]
    return out


def orient(ps: PairSet) -> PairSet:
    if canon_key(ps.mod_a) <= canon_key(ps.mod_b):
        return ps
    return replace(ps, mod_a=ps.mod_b, mod_b=ps.mod_a, xa_train=ps.xb_train, xb_train=ps.xa_train,
                   xa_test=ps.xb_test, xb_test=ps.xa_test)


def build_tasks(cfg, log=print) -> list[PairSet]:
    pairs = step_pairs(cfg)
    seed = cfg.seed if cfg.data_seed is None else cfg.data_seed
    if cfg.data == "synthetic":
        tasks = latent_binding(seed, dim=cfg.dim, latent=cfg.latent, n_classes=cfg.n_classes,
                               classes_per_step=cfg.classes_per_step, n_train=cfg.n_train, n_test=cfg.n_test,
                               alpha=cfg.rot_alpha, noise=cfg.feature_noise, z_noise=cfg.latent_noise,
                               steps=[(a, b) for _, a, b in pairs])
    elif cfg.data == "digits":
        tasks = digits_views(seed, dim=cfg.dim, steps=[(a, b) for _, a, b in pairs])
    else:
        tasks = [load_feature_step(cfg, s, log=log) for s, _, _ in pairs]
    return [orient(t) for t in tasks]


def load_feature_step(cfg, spec: str, log=print) -> PairSet:
    if cfg.feature_format == "hdf5":
        from methodlab.data.cmcl_hdf5 import load_step_hdf5

        return load_step_hdf5(cfg.feature_root, spec, cfg.dim, cfg.encoder,
                              cfg.dataset_modalities.get(spec.partition(":")[0].strip()))
    from methodlab.data.cmcl_features import load_step

    return load_step(cfg.feature_root, spec, cfg.dim, log=log)


def modalities(tasks: list[PairSet]) -> list[str]:
    return sorted({m for t in tasks for m in (t.mod_a, t.mod_b)}, key=canon_key)
