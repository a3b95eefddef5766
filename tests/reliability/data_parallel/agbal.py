from tests.reliability.data_parallel import Case

CASE = Case(job="jobs/agbal/al_run.yaml", over=("train_batch=16", "epochs=30"),
            curve=("eval/rmse", "train/rmse", "aux/mean_loss", "surrogate/spearman"), rel=1e-5,
            why="DDP's mean of two half-batch MSE gradients is the whole-batch gradient up to float summation order "
                "(measured ~1e-8 relative after Adam); rank 0's selection is broadcast, and it equals the 1-worker "
                "one unless those last bits flip a near-tie in LCMD")
