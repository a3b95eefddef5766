"""The settings other than `train` (the platform's convention: every other entry point lives in settings.py).

Setting `measure`: recompute RF (trace and neuron-wise), CDNV and NC1 from a saved checkpoint, on the
run's device (data and model on ctx.device, float32 forward; the neuron-wise RF in float64)."""

from __future__ import annotations

import torch

from methodlab.core import ConfigError, RunContext, load_checkpoint
from methodlab.methods.grokking_flatness import measures
from methodlab.methods.grokking_flatness.config import Config
from methodlab.methods.grokking_flatness.data import build_data
from methodlab.methods.grokking_flatness.evaluate import evaluate, forward_task, measure_view
from methodlab.methods.grokking_flatness.model import build_model


def fit_measure(cfg: Config, ctx: RunContext) -> dict:
    if not cfg.measure_from:
        raise ConfigError("setting 'measure' needs config.measure_from = a checkpoint directory", field="config.measure_from")
    ctx.limit_threads(cfg.torch_threads)
    ck = load_checkpoint(cfg.measure_from, method="grokking_flatness")
    trained = Config.model_validate(ck.config)
    data = build_data(trained, ctx.device)
    with ctx.init_module():
        model = build_model(trained, data.vocab_size)
    model.load_state_dict(ck.weights)  # CPU checkpoint tensors copied into the parameters on ctx.device
    metrics = {"step": int(ck.state.get("step", 0)), **evaluate(model, data, trained)}
    with torch.no_grad():
        x = (data.x_train, data.y_train) if trained.task == "digits" else data.x_train
        _, _, logits, hidden, _ = forward_task(model, x, trained.task)
        W, phi, lg = measure_view(model.W, logits, hidden, trained.task, trained.rf_position)
        metrics["rf_neuronwise"] = float(measures.relative_flatness_neuronwise(W, phi, lg))
    ctx.report(metrics)
    return metrics
