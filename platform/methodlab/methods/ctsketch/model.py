"""Perception nets: one network shared by all N inputs maps an image to logits over the 10 digits."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """8x8 digits: 64 -> 128 -> ReLU -> 128 -> ReLU -> 10."""

    def __init__(self, side: int = 8):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(side * side, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                                  nn.Linear(128, 10))

    def forward(self, x):
        return self.body(x)


class Conv8(nn.Module):
    """8x8 digits: conv 1->16 k3 p1, pool 2, conv 16->32 k3 p1, pool 2, fc 128, fc 10."""

    def __init__(self, side: int = 8):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                  nn.Linear(32 * (side // 4) ** 2, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        return self.body(x.unsqueeze(1))


class LeNet(nn.Module):
    """MNIST (paper / official code): conv 1->6 k5, pool, conv 6->16 k5, pool, fc 256->120->84->10."""

    def __init__(self, side: int = 28):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                                  nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 4 * 4, 120), nn.ReLU(),
                                  nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))

    def forward(self, x):
        return self.body(x.unsqueeze(1))


def build_net(kind: str, side: int) -> nn.Module:
    if kind == "lenet" and side != 28:
        raise ValueError(f"net=lenet needs 28x28 images, the dataset has {side}x{side}")
    return {"mlp": MLP, "conv8": Conv8, "lenet": LeNet}[kind](side)


def digit_probs(net: nn.Module, pool: torch.Tensor, idx: torch.Tensor, distinct: bool = True) -> torch.Tensor:
    """Softmax outputs for the images pool[idx] ([B, N] indices -> [B, N, 10]). With `distinct`, the net runs once
    per distinct image and the results are gathered into the N slots: the same maths, far fewer forward passes
    when N x B draws come from a small pool. The softmax is taken in float32 (the net may run under autocast)."""
    if distinct:
        uniq, inv = torch.unique(idx, return_inverse=True)
        return torch.softmax(net(pool[uniq]).float(), -1)[inv]
    b, n = idx.shape
    return torch.softmax(net(pool[idx.reshape(-1)]).float(), -1).reshape(b, n, 10)
