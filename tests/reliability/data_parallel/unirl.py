from tests.reliability.data_parallel import Case

CASE = Case(job="jobs/unirl/offline.yaml", over=(),
            curve=("train/loss_v", "train/loss_pi", "train/loss_q", "eval/return"), rel=1e-5,
            why="offline: every rank draws the same global batch (a rank-independent generator) and takes its shard; "
                "shard means weighted by their share under DDP's gradient mean, and the batch-wide EQL shift, "
                "weight normaliser and w_max taken over both shards, give the whole-batch step up to float "
                "summation order (measured <1e-6 over 300 steps). The online phase samples per rank (own envs "
                "and replay) and is not compared here")
