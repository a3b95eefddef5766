from tests.reliability.data_parallel import Case

CASE = Case(job="jobs/graphrta/csbm.yaml", over=("log_every=5", "checkpoint_every=20"),
            curve=("eval/h_score", "eval/acc", "eval/acc_known", "eval/acc_unknown", "eval/pred_unknown_rate"),
            rel=1e-6,
            why="every rank does the full-graph forward and the same draws and its loss is its share of the nodes "
                "(sum * world / n), so the averaged gradient is the whole batch's up to float summation order: the "
                "losses agree to ~3e-6 after 40 epochs and the open-set metrics (count ratios on the target test "
                "nodes, the only keys in every report) come out identical; a tolerance this tight fails on any "
                "changed prediction")
