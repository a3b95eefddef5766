from tests.reliability.data_parallel import Case

CASE = Case(job="jobs/min_swgg/cfm.yaml", over=("cfm_steps=40", "log_every=10", "checkpoint_every=40"),
            curve=("train/cfm_loss", "cfm/w2"), rel=1e-5,
            why="every rank builds the same super-batch and DGSWP coupling and draws the same t and path noise; "
                "DDP's mean of the two shards' gradients is the whole minibatch's up to float summation order, "
                "which Adam carries over 40 steps (observed ~1e-7; unsynchronised gradients differ by ~1e-1)")
