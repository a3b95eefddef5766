"""Issue 22 item 3, Claim D diagnostic: seed 2 (digit 5 never separated in 900 s / 1,763 N=1024 steps) with stage 2
ending on the spec's step estimate (3,200 distinct-image N=1024 steps) instead of 900 s of contended wall time;
a wall cap (argv[2] s of training) stops it if this shared machine is too slow. Every eval logs per-class accuracy,
the mean expected digit E_p[d] per class and the class's most frequent argmax."""
import json, sys, time
from pathlib import Path
import torch
from methodlab.methods.ctsketch import reproduce as R
seed, cap = int(sys.argv[1]), float(sys.argv[2])
R.CACHE = Path("reports/ctsketch_issue22")
job = {"name": f"D-steps3200-s{seed}", "claim": "D",
       "config": {**R.D, "seed": seed, "curriculum": [{"N": 16, "max_steps": 1000}, {"N": 1024, "max_steps": 3200}],
                  "time_budget_s": cap, "eval_every_s": 120}}
out = R.run_one(job)
f = out["final"]
print(json.dumps({k: f.get(k) for k in ["step", "time/train_s", "eval/digit_acc", "stage0/digit_acc"]}))
