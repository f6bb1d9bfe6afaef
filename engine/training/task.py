"""What a recipe hands to the training shell: its data, its trained model and its loss per micro-batch.

The shell (engine.training.shell) owns everything else: the strategy, step planning after sharding, the optimizer
step, checkpoints and resume, stop agreement, logging and the final save. A loss is returned as a SUM over the
micro-batch's *units* — trained tokens for SFT and pre-training, examples (pairs) for DPO, RM and KTO — and the
shell divides it by the units of the whole global step, so gradient accumulation and data parallelism give the
step a single process would take on the concatenated batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch


@dataclass
class LossOut:
    loss: torch.Tensor
    """The micro-batch's loss summed over its units, in the autograd graph."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Extra figures, also SUMMED over units (the shell logs them divided by the step's units)."""


@dataclass
class StepContext:
    """What a loss function may need from the strategy."""

    sequence_sum: Callable[[torch.Tensor], torch.Tensor]
    """Sum a per-row tensor over the ranks that share a sequence (Ulysses SP); the identity elsewhere. Per-example
    losses must pass their per-row sums of token terms through it, since each rank holds a slice of every row."""
    sequence_parallel: bool = False
    replica_mean: Callable[[float], float] = lambda value: value
    """The mean of a number over the data-parallel replicas (a batch statistic such as KTO's KL baseline, taken
    over the whole global batch as the peers do); a collective: every rank must call it."""


@dataclass
class Task:
    """A training stage's data, model and loss."""

    model: torch.nn.Module
    """The module that trains (method applied); the shell wraps it for the strategy and saves it."""
    train_samples: list[dict]
    eval_samples: list[dict]
    collate: Callable[[list[dict]], dict]
    loss: Callable[[torch.nn.Module, dict, StepContext], LossOut]
    """Called with the wrapped model and a prepared micro-batch."""
    units: Callable[[dict], int]
    """How many units a collated micro-batch holds (before sequence sharding)."""
    per_example: bool = False
    """Units are examples, replicated on every rank of a sequence-parallel group; otherwise tokens, split by it."""
    batching: str | None = None
    """None: the config's batching_strategy; "padded": the stage cannot pack (pairs must share their prompt)."""
    frozen: list[torch.nn.Module] = field(default_factory=list)
    """Models that take part in the loss but never train (a reference copy); the strategy readies them too
    (sequence parallelism must route their attention as well)."""
    save: Callable[[Path], None] | None = None
    """Write the result into a folder (default: the method's save of ``model``)."""
    load: Callable[[Path], None] | None = None
    """Load a checkpoint's weights into ``model`` before wrapping (default: the method's load)."""
    metric_means: Callable[[dict[str, float], float], dict[str, float]] | None = None
    """Turn a step's (or the eval's) metric sums into figures (default: each sum divided by the units), for
    metrics averaged over part of the units (KTO's rewards over the desirable examples only)."""
    summary_metrics: tuple[str, ...] = ()
    """Metric names whose last logged value goes into status.json's final_metrics."""
    closing: Callable[[Path, Any], dict[str, Any]] | None = None
    """Run on every rank after the final save, with the shell's Stepper (its wrapped model, context and batch
    preparation, so the model can still run in step with the other ranks): e.g. the reward model's check that the
    saved result reproduces the trained scores. Returns figures for final_metrics (the main rank's are kept), or
    raises EngineError to fail the run."""
