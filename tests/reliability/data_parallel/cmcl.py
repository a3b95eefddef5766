from tests.reliability.data_parallel import Case

CASE = Case(job="jobs/cmcl/digits.yaml", over=(),
            curve=("train/loss_start", "train/loss_end", "train/epoch_loss_last", "train/batch_loss_last"), rel=1e-6,
            why="each rank's loss rows against the whole batch's negatives, summed over the ranks, are the global "
                "contrastive loss; the averaged gradient equals the whole-batch one up to float summation order "
                "(measured ~6e-8 relative). Recall@k is not compared: it counts near-tied scores that those last "
                "bits flip")
