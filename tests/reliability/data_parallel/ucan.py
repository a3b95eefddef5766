from tests.reliability.data_parallel import Case

CASE = Case(job="jobs/ucan/train_analytic.yaml",
            over=("patch_pairs=4", "max_steps=4", "eval_every=2", "checkpoint_every=4", "eval_at_start=false"),
            curve=("train/loss", "train/n2n", "train/dc", "val/p2s"), rel=1e-5,
            why="every rank draws the same 4 patch pairs and trains on 2; the mean of the two ranks' gradients is "
                "the whole step's up to float summation order, and the reported step means pass through a float32 "
                "sum over the ranks (measured: equal to 6 digits)", default=True)
