from tests.reliability.data_parallel import Case

CASE = Case(job="jobs/ctsketch/sum2_digits.yaml",
            over=("N=2", "max_steps=100", "eval_every_steps=50", "log_every=25", "checkpoint_every=1000000"),
            curve=("train/loss",), rel=2e-3,
            why="sum-2 has one tree level, so two half batches under DDP are the whole batch up to float "
                "summation order (deeper trees take a batch-wide max per rank)")
