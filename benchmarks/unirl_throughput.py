"""Learner throughput of unirl against a minimal single-file IQL-style learner, side by side in one run.

Offline: gradient steps/s of methodlab's Learner (Uni-RL SQL: V, actor, twin Q, Polyak; batches from the
stored Pendulum-v1 medium-replay set) vs the reference below (twin Q as two nn.Sequential MLPs, V with
LayerNorm, tanh-mean Gaussian actor; expectile V loss, AWR actor, Q on V(s'); the same widths, batch, Adam).
Online: env steps/s of methodlab's fit (regime online, one update per env step) vs the reference's loop
(gymnasium Pendulum-v1 with RescaleAction, act by sampling, one update per step).
Chunks of both are interleaved `--repeats` times and the median rate is kept (the machine is shared).
Goal: methodlab >= 0.9x the reference's steps/s on one worker (offline and online).

    .venv/bin/python benchmarks/unirl_throughput.py [--hidden 256] [--steps 300] [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import json
import platform as _platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from methodlab.core import RunContext
from methodlab.data.offline_rl import load_dataset
from methodlab.methods.unirl.config import Config
from methodlab.methods.unirl.data import Replay
from methodlab.methods.unirl.evaluate import make_rescaled_env
from methodlab.methods.unirl.learner import Learner
from methodlab.methods.unirl.train import fit

OUT = Path(__file__).resolve().parent / "results" / "unirl_throughput.json"


# --- the reference: what a researcher writes in one file ------------------------------------------
def mlp(i, h, o, ln=False):
    layers = []
    for w in h:
        layers += [nn.Linear(i, w)] + ([nn.LayerNorm(w)] if ln else []) + [nn.ReLU()]
        i = w
    return nn.Sequential(*layers, nn.Linear(i, o))


class RefIQL:
    def __init__(self, obs_dim, act_dim, hidden, lr=3e-4, expectile=0.7, beta=3.0, gamma=0.99, tau=0.005):
        self.q1, self.q2 = mlp(obs_dim + act_dim, hidden, 1), mlp(obs_dim + act_dim, hidden, 1)
        self.q1_t, self.q2_t = copy.deepcopy(self.q1), copy.deepcopy(self.q2)
        self.v = mlp(obs_dim, hidden, 1, ln=True)
        self.actor = mlp(obs_dim, hidden, act_dim)
        self.log_std = nn.Parameter(torch.zeros(act_dim))
        self.opt_q = torch.optim.Adam([*self.q1.parameters(), *self.q2.parameters()], lr=lr)
        self.opt_v = torch.optim.Adam(self.v.parameters(), lr=lr)
        self.opt_a = torch.optim.Adam([*self.actor.parameters(), self.log_std], lr=lr)
        self.expectile, self.beta, self.gamma, self.tau = expectile, beta, gamma, tau

    def update(self, s, a, r, s2, d):
        with torch.no_grad():
            sa = torch.cat([s, a], -1)
            q_t = torch.min(self.q1_t(sa), self.q2_t(sa)).squeeze(-1)
        v = self.v(s).squeeze(-1)
        diff = q_t - v
        loss_v = (torch.abs(self.expectile - (diff < 0).float()) * diff.pow(2)).mean()
        self.opt_v.zero_grad()
        loss_v.backward()
        self.opt_v.step()
        with torch.no_grad():
            w = torch.exp(self.beta * (q_t - self.v(s).squeeze(-1))).clamp(max=100.0)
            y = r + self.gamma * (1 - d) * self.v(s2).squeeze(-1)
        mean = torch.tanh(self.actor(s))
        std = self.log_std.clamp(-5, 2).exp()
        logp = torch.distributions.Normal(mean, std).log_prob(a).sum(-1)
        loss_a = -(w * logp).mean()
        self.opt_a.zero_grad()
        loss_a.backward()
        self.opt_a.step()
        sa = torch.cat([s, a], -1)
        loss_q = (self.q1(sa).squeeze(-1) - y).pow(2).mean() + (self.q2(sa).squeeze(-1) - y).pow(2).mean()
        self.opt_q.zero_grad()
        loss_q.backward()
        self.opt_q.step()
        with torch.no_grad():
            for t, m in ((self.q1_t, self.q1), (self.q2_t, self.q2)):
                for pt, pm in zip(t.parameters(), m.parameters()):
                    pt.mul_(1 - self.tau).add_(pm, alpha=self.tau)

    @torch.no_grad()
    def act(self, obs):
        mean = torch.tanh(self.actor(torch.as_tensor(obs, dtype=torch.float32)[None]))[0]
        return (mean + torch.randn_like(mean) * self.log_std.clamp(-5, 2).exp()).clamp(-1, 1).numpy()


def ref_online(steps: int, hidden, batch: int) -> float:
    env = make_rescaled_env("Pendulum-v1")
    ref = RefIQL(3, 1, hidden)
    S, A, R, S2, D = (np.zeros((steps, 3), np.float32), np.zeros((steps, 1), np.float32), np.zeros(steps, np.float32),
                      np.zeros((steps, 3), np.float32), np.zeros(steps, np.float32))
    obs, _ = env.reset(seed=0)
    t0 = time.perf_counter()
    for t in range(steps):
        a = ref.act(obs) if t >= batch else env.action_space.sample()
        o2, r, term, trunc, _ = env.step(a)
        S[t], A[t], R[t], S2[t], D[t] = obs, a, r, o2, float(term)
        obs = env.reset()[0] if term or trunc else o2
        if t + 1 >= batch:
            i = np.random.randint(0, t + 1, batch)
            ref.update(*(torch.from_numpy(x[i]) for x in (S, A, R, S2, D)))
    return steps / (time.perf_counter() - t0)


def ours_online(steps: int, hidden, batch: int) -> float:
    cfg = Config(regime="online", online_steps=steps, start_steps=batch, eval_every=steps, checkpoint_every=steps,
                 eval_episodes=1, hidden=hidden, batch_size=batch)
    t0 = time.perf_counter()
    fit(cfg, RunContext(report_fn=lambda m, c: None))
    return steps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--steps", type=int, default=300, help="gradient steps per offline chunk")
    ap.add_argument("--online-steps", type=int, default=600, help="env steps per online chunk")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    hidden, batch = [args.hidden, args.hidden], 256

    data = load_dataset("pendulum-v1-medium-replay", "Pendulum-v1")
    buf = Replay(3, 1, len(data))
    buf.add_dataset(data)
    gen = torch.Generator().manual_seed(0)
    ours = Learner(Config(hidden=hidden, batch_size=batch), 3, 1)
    ref = RefIQL(3, 1, hidden)

    def chunk(update) -> float:
        t0 = time.perf_counter()
        for _ in range(args.steps):
            update(buf.sample(batch, gen))
        return args.steps / (time.perf_counter() - t0)

    chunk(lambda b: ours.update(b, False)), chunk(lambda b: ref.update(*b))  # warm-up
    off_ours, off_ref, on_ours, on_ref = [], [], [], []
    for _ in range(args.repeats):
        off_ours.append(chunk(lambda b: ours.update(b, False)))
        off_ref.append(chunk(lambda b: ref.update(*b)))
    for _ in range(max(1, args.repeats // 2)):
        on_ours.append(ours_online(args.online_steps, hidden, batch))
        on_ref.append(ref_online(args.online_steps, hidden, batch))
    med = statistics.median
    off_ratio, on_ratio = med(off_ours) / med(off_ref), med(on_ours) / med(on_ref)
    rows = [{"setting": "offline grad steps/s", "methodlab": med(off_ours), "reference": med(off_ref), "ratio": off_ratio},
            {"setting": "online env steps/s (1 update each)", "methodlab": med(on_ours), "reference": med(on_ref),
             "ratio": on_ratio}]
    result = {"name": "unirl_throughput", "title": "unirl: learner throughput vs a single-file IQL-style learner",
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": {"python": _platform.python_version(), "torch": torch.__version__, "threads": args.threads,
                          "cpu": _platform.processor() or _platform.machine()},
              "versions": {"torch": torch.__version__},
              "rows": rows,
              "goals": [{"name": "offline ratio", "value": off_ratio, "goal": ">= 0.9", "met": off_ratio >= 0.9},
                        {"name": "online ratio", "value": on_ratio, "goal": ">= 0.9", "met": on_ratio >= 0.9}],
              "notes": f"hidden {hidden}, batch {batch}, {args.threads} torch thread(s); medians of {args.repeats} "
                       "interleaved chunks (online: of the repeats // 2 runs, each including env construction and "
                       "one 1-episode evaluation for methodlab). Raw: " + json.dumps(
                           {"off_ours": off_ours, "off_ref": off_ref, "on_ours": on_ours, "on_ref": on_ref})}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1))
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
