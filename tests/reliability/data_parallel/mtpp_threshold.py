from tests.reliability.data_parallel import Case

CASE = Case(job="jobs/mtpp_threshold/hawkes.yaml", over=("max_epochs=3", "checkpoint_every=3"),
            curve=("val/nll", "val/mark_nll"), rel=1e-5,
            why="the loss is normalised by the global batch's target count, so DDP's mean of the two shards' "
                "gradients (double backward through the wrapped objective) is the whole batch's up to float "
                "summation order (observed ~1e-7); unsynchronised gradients differ by ~2e-3. train/nll is "
                "not in the final report, so the validation curves carry the check")
