from tests.reliability.data_parallel import Case

CASE = Case(job="jobs/weakshot_keypoint/pretrain_base.yaml",
            over=("stage=both", "stage1_steps=10", "stage2_steps=5", "log_every=5", "checkpoint_every=20",
                  "pseudo_refresh_every=5", "conf_threshold=0"),
            curve=("eval/val_pck@0.2", "eval/val_pck@0.1", "eval/pck@0.2", "eval/pck@0.1"), rel=1e-3,
            why="every rank draws the same pairs and window shifts, each loss term is its share of the whole step's "
                "mean and BatchNorm is synchronised (the whole step's statistics), so the two ranks' mean gradient "
                "is the whole step's up to float summation order (train/loss measured within 1.2e-4 over 15 steps, "
                "every PCK equal; the only keys in every report are the PCKs, counts of keypoints within a "
                "threshold, so one flipped keypoint would move them by 1/84); conf_threshold=0 opens every gate so "
                "the stage-2 transfer losses take part")
