"""The optimizer a run steps: AdamW with the config's betas, epsilon and weight decay."""

from __future__ import annotations

import torch


def build_optimizer(config, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters; the multi-tensor (foreach) path steps all of them in a few kernels."""
    return torch.optim.AdamW(params, lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
                             eps=config.adam_epsilon, weight_decay=config.weight_decay, foreach=True)
