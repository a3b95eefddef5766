from tests.reliability.data_parallel import Case

CASE = Case(job="jobs/hier_retrieval/synthetic.yaml", over=(),
            curve=("train/loss", "val/short_long_mean", "val/recall_long"), rel=1e-5,
            why="each rank's rows of the softmax loss (full softmax) under DDP's gradient mean are the whole-batch "
                "gradient up to float summation order; the finetune stage (T = 500) amplifies those bits to "
                "~3e-7 relative in train/loss; the recalls match exactly")
