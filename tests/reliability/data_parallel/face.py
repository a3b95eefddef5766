from tests.reliability.data_parallel import Case

CASE = Case(job="jobs/face/synthetic.yaml",
            over=("dropout=0", "pretrain_epochs=2", "map_epochs=1", "align_steps=10", "log_every=5",
                  "eval_items=20"),
            curve=("val/recall@20", "train/l_bpr"), rel=1e-5,
            why="every rank draws the same triples and align rows and weights each loss term by its share of the "
                "batch (L_align against all the batch's profile embeddings), so the mean of the two ranks' "
                "gradients is the whole batch's up to float summation order (every reported loss measured within "
                "1e-6 through pretrain, map and align); dropout=0 because the encoder/decoder dropout masks are "
                "drawn per rank for its own rows (with 0.1 the curves stay within a few % but not bit-close)")
