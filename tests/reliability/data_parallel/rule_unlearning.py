from tests.reliability.data_parallel import Case

CASE = Case(job="jobs/rule_unlearning/rebo_grpo.yaml", over=(), curve=("rs/loss",), rel=1e-5,
            why="pretraining and Rejection Steering SFT shard common global batches (token means weighted by the "
                "shard's share of the batch's target tokens), so the RS loss matches up to float summation order; "
                "the GRPO rollouts are sampled per rank (rank-seeded generators: independent samples), so the RL "
                "curve is seed noise and not compared (its prompt shards and collectives are still probed)")
