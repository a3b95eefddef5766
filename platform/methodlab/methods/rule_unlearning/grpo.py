"""The RL maths: group-normalised (GRPO) and batch-normalised (REINFORCE++) advantages, the k3 KL estimator,
and the PPO clipped surrogate with dual clip, aggregated as a mean over response tokens (verl "token-mean")."""

from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """rewards [G * n] in group order -> A_i = (R_i - mean(R_group)) / (std(R_group) + eps) (unbiased std, as
    torch.std and verl's GRPO)."""
    r = rewards.view(-1, group_size).float()
    std = r.std(1, keepdim=True) if group_size > 1 else torch.zeros_like(r[:, :1])
    return ((r - r.mean(1, keepdim=True)) / (std + eps)).view(-1)


def batch_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """REINFORCE++: one baseline and scale over the whole batch (no groups)."""
    r = rewards.float()
    return (r - r.mean()) / (r.std() + eps) if r.numel() > 1 else torch.zeros_like(r)


def informative_groups(rewards: torch.Tensor, group_size: int) -> float:
    """Share of groups whose rewards are not all equal (the others carry zero advantage)."""
    r = rewards.view(-1, group_size)
    return float(((r.max(1).values - r.min(1).values) > 1e-9).float().mean())


def k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Low-variance KL estimator per token: exp(ref - logp) - (ref - logp) - 1 (>= 0, = 0 where equal)."""
    d = (ref_logp - logp).clamp(-20, 20)
    # expm1(d) - d, not exp(d) - d - 1: the exact value is > d, so the rounded expm1 is >= d and the estimator
    # never dips below 0 (exp(d) - 1 lost the d^2/2 term to float32 rounding for |d| ~ 1e-4: -1e-8 measured)
    return torch.expm1(d) - d


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                clip_low: float = 0.2, clip_high: float = 0.3, dual_clip: float = 3.0) -> tuple[torch.Tensor, dict]:
    """PPO clipped surrogate, token-level, advantage broadcast over tokens ([B] -> [B, T]); dual clip bounds the
    loss of negative-advantage tokens by -A * dual_clip."""
    a = adv[:, None].expand_as(logp)
    ratio = torch.exp((logp - old_logp).clamp(-20, 20))
    l1 = -a * ratio
    l2 = -a * ratio.clamp(1 - clip_low, 1 + clip_high)
    clipped = torch.maximum(l1, l2)
    dual = torch.minimum(clipped, -a * dual_clip)
    loss_tok = torch.where(a < 0, dual, clipped)
    frac = masked_mean((l2 > l1).float(), mask)
    return masked_mean(loss_tok, mask), {"clip_frac": frac.detach()}  # a tensor: read when reported
