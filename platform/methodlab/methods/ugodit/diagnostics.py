"""Issue-29 diagnostic as a harness Task (one per task, MRI 4x and SR x2, development seeds): why transfer does not
speed up the test fit enough (claims 1 and 3). Same code path as the study's arms (TrainState, fit_measurement) and
the same recipe (jobs/ugodit/train_<task>.yaml), test fits of FIT_ITERS = 150 (the claims' iteration) logged
every 5 iterations, PSNR of the EMA output and of the raw output, for:
  aseqdip                 random E and D, E trained (claim 1's baseline)
  random_encoder          frozen random E, fresh D (claim 3's control)
  ugodit@800              frozen E trained 800 iterations on the 4 training images (the study's arm)
  ugodit@1600, @2400      the same encoder trained on to 2x and 3x the iterations (the SR encoder-budget question)
  oracle@800              frozen E trained 800 iterations on 3 training images + the TEST measurement itself
                          (upper bound on what any transfer through the encoder can give)
  ugodit@800+trainable    the 800-iteration encoder, not frozen (the spec's optional setting)
  ugodit@800+warm decoder frozen 800-iteration E, test decoder started from training decoder D_1's weights
                          (NOT the method, which starts a fresh decoder: is the fresh decoder the bottleneck?)
`run_seed` is the Task's body; `section` renders it (and the seed spread of the study's own margins) from the
report data alone."""

from __future__ import annotations

import time
from pathlib import Path

from methodlab.core.device import set_threads
from methodlab.reproduce.tables import fmt, md_table, mean

REPO = Path(__file__).resolve().parents[4]
TRAIN, LONGS, FIT_ITERS = 800, (1600, 2400), 150
# issue 44 item 9: the SR encoder budget, chosen before any reported seed ran it by one rule fixed in advance: of
# 800 / 1,600 / 2,400 iterations, the highest development-seed mean of claim 1's margin in Task diag-sr (+1.04 /
# +1.26 / +1.31 dB; claim 3's: +0.66 / +0.88 / +0.93). budget_section shows the rule's inputs from the store.
SETTLED = 2400
SHOW_ITS = (5, 10, 25, 50, 100, 150)
TITLES = {"mri": "MRI 4x on shepp_logan_phantom", "sr": "SR x2 on astronaut"}
ORDER = ("aseqdip", "random_encoder", "ugodit@{t}", "ugodit@{t}+trainable", "ugodit@{l0}", "ugodit@{l1}",
         "oracle@{t}", "ugodit@{t}+warm decoder")
NAMES = {"aseqdip": "aSeqDIP (claim 1 baseline)", "random_encoder": "frozen random encoder (claim 3 control)",
         "ugodit@{t}": "UGoDIT, E trained {t} it (the study's arm)",
         "ugodit@{t}+trainable": "UGoDIT, E trained {t} it, E not frozen at test",
         "ugodit@{l0}": "UGoDIT, E trained {l0} it", "ugodit@{l1}": "UGoDIT, E trained {l1} it",
         "oracle@{t}": "oracle: E trained {t} it WITH the test measurement",
         "ugodit@{t}+warm decoder": "UGoDIT E + test decoder started from training D_1 (not the method)"}


def config(task: str, seed: int, train: int = TRAIN, fit: int = FIT_ITERS, **over):
    """The study's training recipe for `task` (jobs/ugodit/train_<task>.yaml) with this seed and budgets."""
    from methodlab.methods.ugodit.config import Config
    from methodlab.specs.files import load_job

    cfg = load_job(REPO / "jobs" / "ugodit" / f"train_{task}.yaml",
                   overrides=["val_iterations=0", f"seed={seed}", f"train_iterations={train}",
                              f"test_iterations={fit}"]).config
    return Config.model_validate({**cfg.model_dump(), **over}) if over else cfg


def _fit(cfg, target, arm, enc, label, fit, decoder_state=None):
    from methodlab.methods.ugodit import algo

    r = algo.fit_measurement(cfg, target, arm, enc, cfg.seed, fit, log_every=5, decoder_state=decoder_state)
    return {"label": label, "seconds": r["seconds"],
            "curve": [{k: row[k] for k in ("iteration", "psnr", "psnr_ema", "loss")} for row in r["curve"]]}


def job(spec: dict) -> dict:
    """spec: task, seed, kind (transfer | oracle | baselines); optional train, longs, fit, over (Config overrides,
    for the unit test)."""
    from methodlab.methods.ugodit.algo import TrainState
    from methodlab.methods.ugodit.data import build_problems

    task, seed, kind = spec["task"], spec["seed"], spec["kind"]
    train_its, longs, fit = spec.get("train", TRAIN), tuple(spec.get("longs", LONGS)), spec.get("fit", FIT_ITERS)
    over = dict(spec.get("over", {}))
    cfg = config(task, seed, train_its, fit, **over)
    probs = build_problems(cfg)
    test = probs["test"]
    out = {"task": task, "seed": seed, "kind": kind, "fits": [], "train": []}
    if kind == "baselines":
        for arm in ("aseqdip", "random_encoder"):
            out["fits"].append(_fit(cfg, test, arm, None, arm, fit))
        return out
    oracle = kind == "oracle"
    train = probs["train"][:-1] + [test] if oracle else probs["train"]
    st = TrainState(cfg, train, cfg.seed)
    train_s = 0.0
    for stop in (train_its,) if oracle else (train_its, *longs):
        t0 = time.perf_counter()
        while st.step < stop:
            st.train_step()
        train_s += time.perf_counter() - t0
        out["train"].append({"iterations": st.step, "seconds": train_s, "images": [p.name for p in train],
                             "loss_first": st.losses[0], "loss_last": st.losses[-1]})
        enc = {k: v.clone() for k, v in st.encoder.state_dict().items()}
        label = f"{'oracle' if oracle else 'ugodit'}@{stop}"
        out["fits"].append(_fit(cfg, test, "ugodit", enc, label, fit))
        if not oracle and stop == train_its:
            trainable = cfg.model_copy(update={"freeze_encoder": False})
            out["fits"].append(_fit(trainable, test, "ugodit", enc, f"{label}+trainable", fit))
            dec = {k: v.clone() for k, v in st.decoders[0].state_dict().items()}
            out["fits"].append(_fit(cfg, test, "ugodit", enc, f"{label}+warm decoder", fit, dec))
    return out


def run_seed(task: str, seed: int, inputs: dict, mode: str) -> dict:
    """The Task body for one development seed: the three kinds in this process, one torch thread (the recipe's).
    Kept per label: PSNR (EMA and raw) at SHOW_ITS, the fit's seconds; per training: iterations, seconds, losses."""
    t0 = time.perf_counter()
    set_threads(1)
    res = [job({"task": task, "seed": seed, "kind": k}) for k in ("transfer", "oracle", "baselines")]
    fits = {f["label"]: f for r in res for f in r["fits"]}
    table = {lab: {str(row["iteration"]): {"psnr_ema": row["psnr_ema"], "psnr": row["psnr"]}
                   for row in f["curve"] if row["iteration"] in SHOW_ITS} for lab, f in fits.items()}
    return {"table": table, "fit_seconds": {lab: f["seconds"] for lab, f in fits.items()},
            "train": {r["kind"]: r["train"] for r in res if r["train"]}, "lr": config(task, seed).value("lr"),
            "train_iterations": TRAIN, "long_iterations": list(LONGS), "fit_iterations": FIT_ITERS,
            "wall_seconds": time.perf_counter() - t0}


def _at(res, arm: str, seed: int, key: str = "eval/psnr_150") -> float | None:
    return res.metric(arm, seed, key)


def spread_lines(res, task: str) -> list[str]:
    """The seed-to-seed spread of claims 1 and 3's margins in the study's own runs (dev then reported seeds)."""
    import numpy as np

    seeds = [s for s in (*res.dev_seeds, *res.reported_seeds)
             if None not in (_at(res, f"ugodit-{task}", s), _at(res, f"aseqdip-{task}", s),
                             _at(res, f"random_encoder-{task}", s))]
    if len(seeds) < 2:
        return []
    parts = []
    for c, ref, bar in (("1", "aseqdip", 1.0), ("3", "random_encoder", 0.5)):
        m = np.array([_at(res, f"ugodit-{task}", s) - _at(res, f"{ref}-{task}", s) for s in seeds])
        sd = float(m.std(ddof=1))
        parts.append(f"claim {c} (bar {bar:+.1f}): " + ", ".join(f"{v:+.2f}" for v in m)
                     + f"; mean {m.mean():+.2f}, SD {sd:.2f}, standard error of a 3-seed mean {sd / np.sqrt(3):.2f}")
    return [f"Seed spread of the claims' margins in this study's own runs (seeds {', '.join(map(str, seeds))}, "
            "development then reported): " + "; ".join(parts) + " dB.", ""]


def section(res, task: str) -> list[str]:
    """Markdown of one task's diagnostic (means over its seeds, EMA@150 per seed, margins) from res alone."""
    seeds = [s for s in res.dev_seeds if res.task(f"diag-{task}", s)]
    head = f"## Why claims 1 and 3 miss or pass on {TITLES[task]} (issue 29 diagnostic, development seeds)"
    if not seeds:
        return [head, "", "Not run in this mode (Task `diag-" + task + "`, skipped under --quick).", "",
                *spread_lines(res, task)]
    docs = {s: res.task(f"diag-{task}", s) for s in seeds}
    d0 = docs[seeds[0]]
    fmt_ = {"t": d0["train_iterations"], "l0": d0["long_iterations"][0], "l1": d0["long_iterations"][-1]}
    labs = [(lt, lt.format(**fmt_)) for lt in ORDER]
    labs = [(lt, lab) for lt, lab in labs if all(lab in docs[s]["table"] for s in seeds)]
    its = [i for i in SHOW_ITS if i != 5]
    val = lambda s, lab, it, k: docs[s]["table"][lab][str(it)][k]  # noqa: E731
    avg = lambda lab, it, k: mean(val(s, lab, it, k) for s in seeds)  # noqa: E731
    name = lambda lt: NAMES[lt].format(**fmt_)  # noqa: E731
    rows = [[name(lt), *(fmt(avg(lab, i, "psnr"), 2) for i in its), fmt(avg(lab, 5, "psnr_ema"), 2),
             fmt(avg(lab, 150, "psnr_ema"), 2), ", ".join(fmt(val(s, lab, 150, "psnr_ema"), 2) for s in seeds),
             fmt(mean(docs[s]["fit_seconds"][lab] for s in seeds), 0)] for lt, lab in labs]
    base = {ref: {s: val(s, ref, 150, "psnr_ema") for s in seeds} for ref in ("aseqdip", "random_encoder")}
    margin = lambda lab, ref: [val(s, lab, 150, "psnr_ema") - base[ref][s] for s in seeds]  # noqa: E731
    sg = lambda v: "—" if v is None else f"{v:+.2f}"  # noqa: E731
    mrows = [[name(lt).split(" (")[0], *(sg(v) for ref in base for v in (*margin(lab, ref), mean(margin(lab, ref))))]
             for lt, lab in labs[2:]]
    enc = {name(lt).split(" (")[0]: mean(margin(lab, "aseqdip")) for lt, lab in labs[2:] if "warm" not in lab}
    best = max(enc, key=lambda k: enc[k]) if enc else None
    warm = next((mean(margin(lab, "aseqdip")) for lt, lab in labs if "warm" in lab), None)
    tr = lambda s: "; ".join(f"{r['iterations']} it {r['seconds']:.0f} s" for r in docs[s]["train"].get("transfer", []))  # noqa: E731
    return [head, "", f"Task `diag-{task}` (diagnostics.run_seed): seeds {', '.join(map(str, seeds))}, lr "
            f"{fmt(d0['lr'])}, the study's recipe and code path, test fits of {d0['fit_iterations']} iterations logged "
            "every 5. " + ("Used once, to settle the encoder budget of issue 44 item 9 (its section below); the claims "
                         "table"
                         if task == "sr" else "Not used to choose anything; the claims") + " above are judged on the "
            "study's 800-iteration encoder (the spec's budget).", "",
            *md_table(["arm", *(f"raw@{i}" for i in its), "EMA@5", "EMA@150", "EMA@150 per seed", "fit s"], rows),
            "EMA@150 margins (dB) per seed and mean: minus aSeqDIP (claim 1, bar +1.0) and minus the frozen random "
            "encoder (claim 3, bar +0.5):", "",
            *md_table(["arm", *(f"- aSeqDIP, seed {s}" for s in seeds), "- aSeqDIP, mean",
                       *(f"- random E, seed {s}" for s in seeds), "- random E, mean"], mrows),
            f"Reading (from the figures above): the 800-iteration encoder's mean margin over aSeqDIP at 150 is "
            f"{sg(enc.get(name(ORDER[2]).split(' (')[0]))} dB; the best encoder-only arm ({best}) reaches "
            f"{sg(enc.get(best))} dB ({'at or above' if best and enc[best] >= 1.0 else 'below'} claim 1's +1.0 dB bar); "
            f"a test decoder started from a training decoder (not the method) reaches {sg(warm)} dB. Encoder "
            f"training (cumulative wall, shared machine): " + " | ".join(f"seed {s}: {tr(s)}" for s in seeds) + ".", "",
            *spread_lines(res, task)]


# --- issue 44 item 9: SR claims 1, 3 and 4 against the official code ----------------------------------------------
# Dev-seed arms of reproduce.py (config overrides of existing fields only): the official code's two SR settings of the
# autoencoding weight. (label, UGoDIT arm, aSeqDIP arm, random-encoder arm or None where the encoder is not frozen)
ITEM9 = (("lambda 2 train / 2 test, E frozen (official HEAD = the spec; the study's arms)", "ugodit-sr", "aseqdip-sr",
          "random_encoder-sr"),
         ("lambda 2 train / 0.1 test, E frozen (HEAD training, first-release test weight)", "ugodit-sr-lam0.1",
          "aseqdip-sr-lam0.1", "random_encoder-sr-lam0.1"),
         ("lambda 1 train / 0.1 test, E trained at test (first release, 992ff80)", "ugodit-sr-rel1", "aseqdip-sr-lam0.1",
          None))

OFFICIAL = """Repository github.com/sjames40/UGoDIT (stored snapshot, newest commit b73c7aa; history read with `git log`).
Read: `UGoDIT_training.py` and `UGoDIT_testing.py` at HEAD (last changed fed5d76, 2026-01-06, and 14ad64e, 2026-01-15;
the SR objective took its present form in f9d2cf4 / 25b05c2, 2025-11-18) and at the first release 992ff80
(2025-05-15, the week of arXiv v1); `configs/super_resolution_config.yaml`; `guided_diffusion/measurements.py`
(`SuperResolutionOperator`); `util/resizer.py`; `models/__init__.py` (`get_net`); `models/skip_shared.py`; for MRI
`shared_encoder_training.ipynb` and `UGoDIT_shared_encoder_MRI.ipynb`. The paper's own hyperparameter text could not
be read (the stored arXiv 2505.11720 page holds the abstract and introduction only; searched: title, arXiv id,
"UGoDIT" with lambda / super-resolution / FFHQ / iterations), so "official" below means the code.

| point | official HEAD (Nov 2025 on) | official first release (May 2025) | ours (jobs/ugodit/*_sr.yaml) | verdict |
|---|---|---|---|---|
| SR lambda, encoder training | 2.0 (`lambda_reg`; mse(x_i, z_i)) | 1 (mse(z, x)) | 2.0 | matches HEAD |
| SR lambda, test-time fit | 2 (literal in the loss) | 0.1 | 2.0 | matches HEAD; differs from the first release |
| parameters fitted at test | decoder only (Adam over `net.decoders`) | all (`net.parameters()`) | decoder only (`freeze_encoder`) | matches HEAD |
| network input | bilinear upsample of y, z <- output every 10 steps (train and test) | noise, z <- output every 10 steps | bilinear, every 10 steps | matches HEAD |
| training decoders | M = 4 meant (`num_decoders=M` passed since fed5d76, but `get_net` takes no such argument and builds 1; README: edit it) | 1 decoder shared by the 4 images (`get_net` builds 1) | M = 4 | matches the paper's stated method |
| encoder training iterations | 2000 outer x 10 inner = 20,000 | 20,000 | 800 (spec CPU preset) | differs: 25x fewer |
| test-time iterations | 2000 x 10 = 20,000 | 20,000 | 400 (spec CPU preset) | differs: 50x fewer |
| lr (Adam, constant) | 0.01 train and test | 0.01 / 0.01 | 0.01 / 0.01 | matches |
| EMA | 0.99, one update per outer step (every 10 iterations) of the clipped output, started at zeros, no bias correction | none in the test script | 0.99 per iteration, started at the first output | differs: the official average spans ~1,000 iterations and at iteration 150 still holds 0.99^15 = 86% of its zero start, so it gives no figure at the claims' iteration; ours spans ~100 |
| operator / noise | x4, antialiased bicubic `Resizer`, FFHQ 256 x 256 RGB; only `operator.forward` is called, so the config's sigma 0.05 is never added (noiseless) | same | x2 area pooling + sigma 0.02, 64 x 64 grayscale | differs (the spec's CPU substitute); jobs/ugodit/gpu.yaml's sigma 0.05 is not what the official scripts run |
| initialisation | training nets PyTorch default; test decoder N(0, 0.02) | same (`init_weights` defined, never called) | every net N(0, 0.02) | differs for the training nets (a BN follows every conv but the output one) |
| training input refresh | D_i(E(z_i)) one image at a time (batch-1 BN statistics) | whole batch | whole batch of M | minor |

MRI (cheap to check): training Adam 3e-4 for 5,000 steps, k-space loss only (no autoencoding term), 5 decoders, every
net N(0, 0.02); test Adam 4e-4 for 10,000 steps over ALL parameters, weights 0.001 on ||z - x|| and ||x - x_prev||,
EMA every step from zeros, scored after dividing by its max. Ours follows this except the budget (800 / 400, lr
3e-4 calibrated) and the frozen encoder (the paper's stated method; `freeze_encoder=false` is the notebook's).

Reading: the spec's lambda 2 is the official HEAD value at both stages, so claim 4's pinning near bilinear is not a
transcription error; the first release used 0.1 at test (and fitted the whole net), which the dev-seed arms below
run as overrides (`lam=0.1`; `lam=1.0` for training plus `freeze_encoder=false`; its single shared training decoder
and noise input have no config field and are not reproduced). The larger gap is the budget: 20,000 training and
20,000 test iterations against 800 / 400, with an EMA that averages over ~1,000 iterations. The encoder-budget
question (claims 1 and 3) is settled on the development seeds by the 1,600 / 2,400-iteration rows of Task `diag-sr`
(issue 29 diagnostic, below); the reported claims stay on the spec's 800. The unreduced recipe (256 x 256, x4,
128 ch / 5 scales, 20,000 + 20,000 iterations: jobs/ugodit/gpu.yaml, then `reconstruct` with `encoder_from` its
run) needs a GPU; none was lent to this study, so it is not run."""


def item9_section(res) -> list[str]:
    """Markdown of issue 44 item 9: the official-code comparison (static) and the dev-seed lambda arms (from res)."""
    head = ["## SR claims 1, 3 and 4 against the official code (issue 44 item 9)", "",
            "### Official code comparison (issue 44 item 9)", ""]
    for block in OFFICIAL.split("\n\n"):  # prose paragraphs on one line each, tables as they are
        head += [*(block.split("\n") if block.startswith("|") else [block.replace("\n", " ")]), ""]
    seeds = list(res.dev_seeds)
    head += ["### The official SR autoencoding weights on the development seeds", ""]
    m = lambda arm, s, k="eval/psnr_150": None if arm is None else res.metric(arm, s, k)  # noqa: E731

    def diff(a, b, ka, kb):
        v = [m(a, s, ka) - m(b, s, kb) for s in seeds if None not in (m(a, s, ka), m(b, s, kb))]
        return (f"{mean(v):+.2f} ({len(v)})" if v else "—"), v

    rows, ran = [], False
    for label, u, q, r in ITEM9:
        ran |= any(res.run(u, s) for s in seeds)
        triv = "eval/trivial_psnr"
        rows.append([label, fmt(mean(m(u, s) for s in seeds), 2), fmt(mean(m(u, s, "eval/psnr") for s in seeds), 2),
                     fmt(mean(m(u, s, "eval/psnr_last") for s in seeds), 2), fmt(mean(m(q, s) for s in seeds), 2),
                     fmt(mean(m(q, s, "eval/psnr") for s in seeds), 2),
                     fmt(mean(m(r, s) for s in seeds), 2) if r else "n/a", diff(u, q, "eval/psnr_150", "eval/psnr_150")[0],
                     diff(u, r, "eval/psnr_150", "eval/psnr_150")[0] if r else "n/a",
                     diff(u, u, "eval/psnr", triv)[0], diff(q, q, "eval/psnr", triv)[0]])
    if not seeds or not ran:
        return [*head, "Not run (arms `*-sr-lam0.1`, `train-sr-lam1`, `ugodit-sr-rel1`: development "
                "seeds, skipped under --quick).", ""]
    dip = diff("dip-sr", "dip-sr", "eval/psnr", "eval/trivial_psnr")[0]
    return [*head, f"Development seeds {', '.join(map(str, seeds))}; EMA PSNR (dB, mean over the seeds that ran) at "
            "150 and 400 test iterations, raw output at 400; margins are means of per-seed differences (seeds in "
            "brackets). Not used to choose anything: the claims above keep the spec's lambda 2.", "",
            *md_table(["setting (encoder training / test-time lambda)", "UGoDIT @150", "UGoDIT @400",
                       "UGoDIT raw @400", "aSeqDIP @150", "aSeqDIP @400", "random E @150", "claim 1: - aSeqDIP @150 "
                       "(bar +1.0)", "claim 3: - random E @150 (bar +0.5)", "claim 4a: UGoDIT @400 - bilinear (bar +2)",
                       "claim 4b: aSeqDIP @400 - bilinear (bar +2)"], rows),
            f"Vanilla DIP (lambda 0, fixed input) on the same seeds: PSNR_400 - bilinear {dip} dB (no bar).", ""]


def budget_section(res) -> list[str]:
    """Issue 44 item 9: SR claims 1-4a with the encoder budget settled on the development seeds (SETTLED
    iterations), development then reported seeds, beside the spec's 800-iteration arms. The claims table keeps 800."""
    docs = {s: res.task("diag-sr", s) for s in res.dev_seeds}
    docs = {s: d for s, d in docs.items() if d}
    arm, train = f"ugodit-sr-e{SETTLED}", f"train-sr-e{SETTLED}"
    head = ["## SR encoder budget settled on the development seeds (issue 44 item 9)", ""]
    if not docs and not any(res.run(arm, s) for s in (*res.dev_seeds, *res.reported_seeds)):
        return head + ["Not run in this mode (Task `diag-sr` and the `*-e2400` arms are skipped under --quick).", ""]
    budgets = (TRAIN, *LONGS)
    rule = {}
    for b in budgets:  # the rule's input: claim 1's margin at 150 test iterations, mean over the dev seeds
        v = [d["table"][f"ugodit@{b}"]["150"]["psnr_ema"] - d["table"]["aseqdip"]["150"]["psnr_ema"]
             for d in docs.values() if f"ugodit@{b}" in d["table"]]
        rule[b] = mean(v) if len(v) == len(docs) and v else None
    got = [b for b in budgets if rule[b] is not None]
    pick = max(got, key=lambda b: rule[b]) if got else None
    check = ("" if pick in (None, SETTLED) else f" NOTE: the store's figures now pick {pick:,}, not the SETTLED "
             f"{SETTLED:,} these arms ran: the choice must be redone.")
    out = head + [
        "Rule, fixed before any reported seed ran a longer encoder: of " + " / ".join(f"{b:,}" for b in budgets)
        + " training iterations, the one with the highest development-seed mean of claim 1's margin (EMA PSNR at "
        "150 test iterations minus aSeqDIP's) in Task `diag-sr` above: " + " / ".join(
            "—" if rule[b] is None else f"{rule[b]:+.2f}" for b in budgets) + f" dB, so {SETTLED:,}.{check} The "
        f"arms `{train}` / `{arm}` then ran it through the claims' own path (400-iteration fits) on the "
        "development seeds and, once, on the reported seeds. The claims table above keeps the spec's 800 "
        f"iterations; these rows are a longer run beside it ({SETTLED // TRAIN}x the spec's CPU budget, still "
        f"{20000 // SETTLED}x under the official 20,000).", ""]
    rows = []
    for name, seeds in (("development", res.dev_seeds), ("reported", res.reported_seeds)):
        for lab, u in ((f"{TRAIN} (the spec's; the claims table)", "ugodit-sr"), (f"{SETTLED:,} (settled)", arm)):
            rows.append([name, ", ".join(map(str, seeds)), lab,
                         _margins(res, seeds, u, "aseqdip-sr", "eval/psnr_150", "eval/psnr_150"),
                         _margins(res, seeds, u, "random_encoder-sr", "eval/psnr_150", "eval/psnr_150"),
                         _margins(res, seeds, u, "aseqdip-sr", "eval/psnr", "eval/psnr"),
                         _margins(res, seeds, u, u, "eval/psnr", "eval/trivial_psnr")])
    walls = [res.metric(train, s, "train/seconds") for s in res.reported_seeds]
    return out + [*md_table(["seeds", "", "encoder iterations", "claim 1: - aSeqDIP @150 (bar +1.0)",
                             "claim 3: - random E @150 (bar +0.5)", "claim 2: - aSeqDIP @400 (bar -0.2)",
                             "claim 4a: @400 - bilinear (bar +2)"], rows),
                  "Encoder training at the settled budget (reported seeds, wall s on the shared machine): "
                  + ", ".join(f"seed {s}: {fmt(w, 0)}" for s, w in zip(res.reported_seeds, walls)) + ".", ""]


def _margins(res, seeds, a: str, b: str, ka: str, kb: str) -> str:
    """Per-seed metric ka of arm a minus kb of arm b, and their mean, as a table cell."""
    v = [None if None in (res.metric(a, s, ka), res.metric(b, s, kb)) else res.metric(a, s, ka) - res.metric(b, s, kb)
         for s in seeds]
    got = [x for x in v if x is not None]
    return (" / ".join(f"{x:+.2f}" for x in got) + f" (mean {mean(got):+.2f})") if got else "not run"
