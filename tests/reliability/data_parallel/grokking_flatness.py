from tests.reliability.data_parallel import Case

CASE = Case(job="jobs/grokking_flatness/cpu.yaml", over=("max_steps=100", "log_every=25", "checkpoint_every=100"),
            curve=("train/loss", "val/loss"), rel=2e-3,
            why="DDP's mean of two half-batch gradients is the whole-batch gradient up to float summation order; "
                "AdamW amplifies those last bits a little over 100 steps", default=True)
