"""Issue 22 item 3, Claim B: the rank-1 arm with the official sketch construction (method tt_hmt: tt_sketch.hmt_sketch's
rank-1 Gaussian range finder, best of two draws) instead of TT-SVD, same data, net, steps as Claim B (seed argv[1])."""
import json, sys
from pathlib import Path
from methodlab.methods.ctsketch import reproduce as R
seed = int(sys.argv[1])
R.CACHE = Path("reports/ctsketch_issue22")
out = R.run_one({"name": f"B-tthmt1-s{seed}", "claim": "B", "config": {**R.A, "seed": seed, "rank": 1, "method": "tt_hmt"}})
f = out["final"]
print(json.dumps({k: f.get(k) for k in ["step", "time/train_s", "eval/digit_acc", "best/eval/digit_acc", "sketch/rel_err_max"]}))
