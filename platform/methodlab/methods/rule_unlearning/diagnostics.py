"""Issue 44: RULE's ReBO stage against the official code (xwtMarch/RULE-Unlearn) on the points behind the neighbour
claim N1 (the RL stage lowers neighbour accuracy: 0.80-0.98 against base - 0.10; RS alone 0.964): what reward a
boundary query gets, how forget and boundary prompts are mixed per batch, the KL term and the learning rate. The
static comparison and the development arms that run the official batch sampler (`rl_sampling: shuffled`), alone
and with the official RL budget (20 steps of 32 prompts), rendered as markdown lines for the study's sections."""

from __future__ import annotations

from methodlab.reproduce.tables import fmt, md_table, mean

# the development arms (seeds 10-12, not under --quick): the official sampler, then also the official budget
OFFICIAL_ARMS = (("rule-shuffled", ("rl_sampling=shuffled",), "official batch sampler (shuffled D_f + D_b)"),
                 ("rule-official", ("rl_sampling=shuffled", "prompts_per_step=32", "rl_steps=20"),
                  "official sampler + official budget (20 steps x 32 prompts)"))

REPO = ("Repository **xwtMarch/RULE-Unlearn** (the paper's code, an EasyR1 / verl fork), read at its stored snapshot: "
        "`verl/utils/reward_score/forget.py` (forget_reward_two_stage_abs_target and the other variants, "
        "rejection_patterns), `verl/workers/reward/custom.py` (CustomRewardManager), `verl/trainer/ray_trainer.py` "
        "(the RL dataloader: RandomSampler, drop_last), `verl/trainer/core_algos.py` (compute_grpo_outcome_advantage, "
        "compute_policy_loss, compute_kl), `verl/workers/actor/dp_actor.py` (the KL loss), `verl/workers/actor/"
        "config.py`, `verl/trainer/config.py`, `examples/grpo_rj_rl.yaml`, the RWKU run script `examples/exp_target/"
        "RWKU/run_llama_bs32_kl1e-2_forget_bf16_two_stage_reject_ref_rollout8_withformat_with_fb_neighbor_abs_"
        "lr2e-6.sh` and its data file `data/RWKU/Target/1_Stephen_King/rl_rejection_with_fb_neighbor_target.json`.")

POINTS = (
    ("reward of a boundary (neighbour) query", "forget_two_stage_abs_target, `<normal>` branch: 0.5 if the completion "
     "does not match the refusal regex, + 0.5 if it also has ROUGE-L recall > 0.3 against the one reference answer "
     "(`rouge` package)", "two_stage_abs_target, `normal` branch: the same 0.5 + 0.5 at rouge_threshold 0.3 "
     "(whitespace ROUGE-L recall; reference = the fact)", "matches"),
    ("reward of a forget query", "0.5 if refusal regex matches, + 0.5 if the target's name is a substring too",
     "the same, plus require_no_answer ([RECON], the spec's leak check: a completion with the answer gets 0)",
     "matches, ours stricter on leaks (forget side only)"),
    ("boundary weight", "none beyond the data: the reward scale is cancelled by GRPO's per-prompt normalisation "
     "(mean / unbiased std, eps 1e-6)", "the same group normalisation", "matches"),
    ("forget / boundary mix per batch", "one file, one boundary prompt paired with each forget prompt (600 + 600 for a "
     "target); RandomSampler (seed 42) + drop_last, 32 prompts per step: a random forget share per batch, 1/2 on "
     "average, 20 of 37 batches of one pass (no prompt twice)", "12 forget-train + 24 boundary prompts; exactly "
     "forget_share 0.5 per batch, drawn with replacement (each forget prompt about 53 times in 80 steps)",
     "differs: new option `rl_sampling: shuffled` (then D_b's share of the prompts, 2/3 here, sets the boundary weight)"),
    ("KL term", "k3 (low_var_kl) to the RS checkpoint as a loss, coefficient 1e-2, value clamped to [-10, 10]",
     "k3 to the RS checkpoint as a loss, kl_coef 1e-2 (log-ratio clamped to +-20)", "matches"),
    ("learning rate and budget", "AdamW 2e-6 (Llama-3-8B; 3e-6 Qwen), weight decay 1e-2, constant (no warm-up), "
     "grad norm 1.0, one update per step, 20 steps x 32 prompts x 8 rollouts", "AdamW 3e-4 (tiny LM, spec range "
     "1e-4-3e-4), weight decay 1e-2, constant, grad norm 1.0, one update per step, 80 steps x 16 x 8 (spec)",
     "optimiser matches; lr is model-scale specific; the budget differs (arm `rule-official`)"),
    ("PPO surrogate", "clip 0.2 / 0.3, dual clip 3, token mean, 1 PPO epoch, temperature 1, n 8",
     "the same", "matches"),
    ("refusal detector", "a broad regex (e.g. 'not ... know', 'no ... information', 'encountered')",
     "the spec's pattern list (config field refusal_patterns)", "differs; not changed (the spec pins the list, "
     "and neighbour refusal is 0 after RL: the drop is wrong answers, not refusals)"),
)


def _rs(res, arm: str, seed: int) -> dict | None:
    row = next((h for h in res.history(arm, seed) if "rs_eval/neighbour_acc" in h), None)
    return None if row is None else {k.replace("rs_eval/", "eval/"): v for k, v in row.items()}


def official(res) -> list[str]:
    """The "Official code comparison (issue 44)" subsection: repository, files, verdicts, development arms."""
    L = ["### Official code comparison (issue 44)", "", REPO, "",
         *md_table(["point", "official code", "ours (rebo_grpo.yaml)", "verdict"], [list(p) for p in POINTS]),
         "Reading: the boundary reward, the KL term and the optimiser match the official code; the batch mixing "
         "(stratified with replacement vs a shuffled pass over D_f + D_b) and the RL budget differ, and the official "
         "data visit each prompt at most once where ours revisit 36 prompts dozens of times. The development arms run "
         "the official sampler (`rule-shuffled`) and, in addition, the official budget of 20 steps x 32 prompts "
         "(`rule-official`); the recipe of the claims is unchanged.", ""]
    arms = (("rule", "spec recipe (stratified, 80 x 16)"), *((a, lab) for a, _, lab in OFFICIAL_ARMS))
    rows = []
    for arm, lab in arms:
        for s in res.study.dev_seeds:
            f, rs = res.final(arm, s), _rs(res, arm, s)
            if not f:
                continue
            n1 = f["eval/neighbour_acc"] - f["base/neighbour_acc"]
            rows.append([lab, str(s), fmt(rs and rs.get("eval/neighbour_acc"), 3), fmt(f["eval/neighbour_acc"], 3),
                         f"{n1:+.3f}", fmt(f.get("eval/neighbour_refusal"), 3), fmt(f.get("eval/forget_refusal"), 3),
                         f"{f['eval/retain_acc'] - f['base/retain_acc']:+.3f}"])
    if rows:
        L += [f"Development seeds {', '.join(str(s) for s in res.study.dev_seeds)} (N1 bar: >= -0.10 on every "
              "seed; R1: retain - base >= -0.05):", "",
              *md_table(["arm", "seed", "RS-only neighbour acc", "neighbour acc", "N1 = acc - base", "neighbour refusal",
                         "forget refusal", "R1 = retain - base"], rows)]
        for arm, lab in arms[1:]:
            got = [res.final(arm, s) for s in res.study.dev_seeds if res.final(arm, s)]
            if got:
                worst = min(f["eval/neighbour_acc"] - f["base/neighbour_acc"] for f in got)
                L.append(f"{lab}: mean neighbour acc {fmt(mean(f['eval/neighbour_acc'] for f in got), 3)}, worst N1 "
                         f"{worst:+.3f} ({'meets' if worst >= -0.10 else 'misses'} the bar on every development seed).")
    return L
