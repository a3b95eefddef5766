"""Report text behind the graphrta study that is not a measurement: the issue-44 comparison of our unknown
supervision with the official code (not obtainable here) and with the closest published implementation of the
same scheme."""

from __future__ import annotations


def official_comparison() -> list[str]:
    """Issue 44, item 5: what was searched for the official GraphRTA code, and the point-by-point comparison of our
    Beta-mixture unknown supervision with UADAL's (static text)."""
    return [
        "### Official code comparison (issue 44)", "",
        "Official repository: the paper (arXiv 2510.18363) names github.com/cszhangzhen/GraphRTA. It is neither in the "
        "code index nor obtainable here: `find_files` on cszhangzhen/GraphRTA lists no file; `fetch` "
        "github:cszhangzhen/GraphRTA has no snapshot; `find_repos` 'GraphRTA' finds nothing, 'GraphRT' only unrelated "
        "repositories, 'cszhangzhen' ten of the author's repositories (GraphCTA, GraphATA, NG2A, ...), none of "
        "them GraphRTA; `find_string` 'GraphRTA' and '2510.18363' find only paper notes that link the "
        "GitHub address; code, issue and page searches (open-set graph domain adaptation, dual reprogramming, Beta "
        "mixture unknown weights) find a copy of its README (`python main.py`, the requirements) and paper summaries, "
        "no source. Verdict on the unknown supervision and its threshold against the official code: **not "
        "verifiable**; nothing was changed on that ground.", "",
        "Closest published implementation of the same scheme (reference only, not GraphRTA's code): UADAL (Jang et al., "
        "NeurIPS 2022), **JoonHo-Jang/UADAL**: `models/model_UADAL.py` (`UADAL.train`, `compute_probabilities_batch`, "
        "`test`), `models/function.py` (`BetaMixture1D`, `CrossEntropyLoss`), `config.py`; a Beta-mixture posterior as "
        "soft known / unknown labels and a 3-way source / target-known / target-unknown discriminator. Against ours "
        "(`maths.py`: `unknown_loss`, `BetaMixture`, `adv_target`; `train.py`: `full_loss`, `fit`):",
        "- What the mixture is fitted to: UADAL, the entropy of a separate K-way head (known classes only) divided by "
        "log K, from a frozen copy refreshed every 10 epochs; ours, u = p(unknown) of the K+1 head, refitted every "
        "epoch. **Differs.** Ours inherits the K+1 head's bias towards 'unknown': on WordNet source-only already "
        "predicts unknown for about 73 % of the target nodes (truth 40 %) and the fitted mixture gives w > 0.5 to about "
        "60 % (issue 44).",
        "- Posterior: UADAL uses the fitted mixing weights; ours 0.5 / 0.5 by default (`bmm_prior=equal`; "
        "`bmm_prior=fitted` is UADAL's form). **Differs** (an option).",
        "- Unknown supervision: UADAL, a one-sided cross-entropy towards 'unknown' weighted by w and averaged over the sum "
        "of w, at weight 0.2 times the DANN ramp (0 at the start), plus, instead of a known-side term, a cross-entropy to "
        "each node's own argmax over the K+1 outputs where its top probability is at least 0.85 (weight 0.5). Ours (`unk_loss=balanced`, "
        "`w_unk=1`): w -> unknown averaged over the sum of w (the same normalisation) and (1 - w) -> not unknown averaged "
        "over the sum of 1 - w, at full weight from the first adaptation epoch (our ramp scales the reversed gradient "
        "only). **Differs** in weight, ramp and known-side term.",
        "- Threshold: neither thresholds w for the decision (argmax over the K+1 outputs at test); UADAL zeroes w below "
        "0.85 only on VisDA. **Matches** on the default path.",
        "- Encoder side of the discriminator: UADAL's encoder confuses D on source and w_k-weighted target-known nodes "
        "through the full 3-way cross-entropy and pulls w_u-weighted target-unknown nodes into D's unknown class (our "
        "`adv_form=grl3`, `grl_split=true`); our default is the 2-way form (`grl2`). **Differs** (an option).",
        "- Untested leads from this reference (not the official code, so not added as recipe changes here): fitting the "
        "mixture to the known-class entropy instead of u, which does not read the biased unknown logit, and a ramped, "
        "smaller unknown weight. Either would be an [I] option to calibrate on development seeds 10-12.", ""]
