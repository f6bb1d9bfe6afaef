"""Small components of a training loop: data order, validation split, stop flag, and the run logger."""

from __future__ import annotations

import math
import time
from datetime import datetime
from typing import Callable

import torch

from engine.data.chunks import holdout_indices
from engine.rundir import RunDir


def steps_per_epoch(num_samples: int, batch_size: int, grad_accum: int) -> int:
    """Optimizer steps in one pass; a short last group of micro-batches still makes a step."""
    return max(1, math.ceil(math.ceil(num_samples / batch_size) / grad_accum))


def batches_for_epoch(num_samples: int, batch_size: int, grad_accum: int, *, seed: int) -> list[list[list[int]]]:
    """Sample indices for one epoch, grouped as [optimizer step][micro-batch][sample].

    The order depends only on ``seed`` (seed + epoch), so a resumed run sees exactly the same batches.
    """
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(num_samples, generator=generator).tolist()
    micro = [order[i:i + batch_size] for i in range(0, num_samples, batch_size)]
    return [micro[i:i + grad_accum] for i in range(0, len(micro), grad_accum)]


def split_validation(items: list, val_size: float, seed: int) -> tuple[list, list]:
    """``items`` split by ``holdout_indices``: (train, held out)."""
    train, held = holdout_indices(len(items), val_size, seed)
    return [items[i] for i in train], [items[i] for i in held]


class StopFlag:
    """Set by a signal handler or the caller; the loop checks it after each step and saves before leaving."""

    def __init__(self) -> None:
        self.requested = False
        self.reason = ""

    def request(self, reason: str = "stop") -> None:
        self.requested, self.reason = True, reason


PROGRESS_EVERY_S = 2.0
"""Between logged steps, status.json's step and elapsed time are brought up to date at most this often: a killed
run's resume then knows how far it had got (the steps it trains again) whatever logging_steps is."""


class RunLogger:
    """Writes train.log, metrics.jsonl, events.jsonl and the live fields of status.json; calls ``on_log``."""

    def __init__(self, run: RunDir, on_log: Callable[[dict], None] | None = None, *, enabled: bool = True) -> None:
        self.run = run
        self.on_log = on_log
        self.enabled = enabled  # False on every rank but the first: one writer per run folder
        self.window: list[tuple[float, float, int, int]] = []
        self.extra_window: list[dict[str, float]] = []
        self.started = time.time()
        self.earlier_s = 0.0
        """Seconds of training of the attempts before this one (a resumed run): elapsed counts them too."""
        self.first_step = 0
        self.total_steps = 0
        self.input_tokens_seen = 0
        self.trained_tokens_seen = 0
        self.trackers = None  # engine.trackers.Trackers (report_to), main rank only
        self.progress_written = 0.0

    def track(self, step: int, row: dict) -> None:
        if self.trackers is not None:
            self.trackers.log(step, {k: v for k, v in row.items() if isinstance(v, (int, float)) and k != "step"})

    def status(self, **fields) -> None:
        if self.enabled:
            self.run.update_status(**fields)

    def info(self, message: str) -> None:
        if not self.enabled:
            return
        line = f"[{datetime.now():%Y-%m-%d %H:%M:%S}] {message}"
        with open(self.run.log_path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
        if self.on_log:
            self.on_log({"message": message})

    def note(self, message: str) -> None:
        """Something the user should know about how the run differs from what was asked."""
        self.info(f"NOTE: {message}")
        if not self.enabled:
            return
        notes = self.run.read_status().notes
        if message not in notes:  # a resumed run says the same things again: listed once
            self.run.update_status(notes=[*notes, message])

    def event(self, kind: str, **data) -> None:
        if self.enabled:
            self.run.append_event(kind, **data)

    def start_timer(self, step: int, total_steps: int) -> None:
        self.started, self.first_step, self.total_steps = time.time(), step, total_steps
        self.window_started = self.started

    def elapsed(self) -> float:
        """Seconds of training, this attempt and the ones before it."""
        return self.earlier_s + self.attempt_elapsed()

    def attempt_elapsed(self) -> float:
        return time.time() - self.started

    def step(self, step: int, loss: float, grad_norm: float, lr: float, input_tokens: int, trained_tokens: int,
             epoch: float, *, log_now: bool, extra: dict[str, float] | None = None) -> None:
        """Record one optimizer step; on ``log_now`` write the window's means. ``extra`` holds a recipe's own
        per-step metrics (e.g. DPO's rewards/accuracies), averaged over the window like the loss."""
        self.window.append((loss, grad_norm, input_tokens, trained_tokens))
        self.extra_window.append(extra or {})
        self.input_tokens_seen += input_tokens
        self.trained_tokens_seen += trained_tokens
        if not log_now:
            now = time.time()
            if self.enabled and now - self.progress_written >= PROGRESS_EVERY_S:
                self.progress_written = now
                self.run.update_status(step=step, elapsed_s=round(self.earlier_s + now - self.started, 2),
                                       attempt_elapsed_s=round(now - self.started, 2))
            return
        now = time.time()
        self.progress_written = now
        losses, norms, inputs, trained = zip(*self.window)
        window_s = max(now - self.window_started, 1e-9)
        attempt = now - self.started
        done = step - self.first_step
        eta = attempt / done * (self.total_steps - step) if done else None  # this attempt's pace
        row = {"step": step, "total_steps": self.total_steps, "epoch": round(epoch, 4),
               "loss": round(sum(losses) / len(losses), 6), "grad_norm": round(sum(norms) / len(norms), 6),
               "learning_rate": lr, "tokens_per_second": round(sum(inputs) / window_s, 1),
               "trained_tokens_per_second": round(sum(trained) / window_s, 1),
               "num_input_tokens_seen": self.input_tokens_seen, "elapsed_s": round(self.earlier_s + attempt, 2),
               "eta_s": round(eta, 1) if eta is not None else None,
               "time": now}
        row.update(_window_means(self.extra_window))
        self.window, self.extra_window, self.window_started = [], [], now
        if not self.enabled:
            return
        self.run.append_metric(row)
        self.track(step, row)
        self.run.update_status(step=step, loss=row["loss"], eta_s=row["eta_s"], elapsed_s=row["elapsed_s"],
                               attempt_elapsed_s=round(attempt, 2), epoch=row["epoch"])
        loss_text = "nan" if math.isnan(row["loss"]) else f"{row['loss']:.4f}"
        self.info(f"step {step}/{self.total_steps} loss {loss_text} lr {lr:.3g} "
                  f"grad_norm {row['grad_norm']:.3f} tok/s {row['tokens_per_second']:.0f}")
        if self.on_log:
            self.on_log(row)

    def eval(self, step: int, eval_loss: float, epoch: float, metrics: dict[str, float] | None = None) -> None:
        row = {"step": step, "epoch": round(epoch, 4), "eval_loss": round(eval_loss, 6), "time": time.time()}
        row.update({f"eval_{key}": round(value, 6) for key, value in (metrics or {}).items()})
        if not self.enabled:
            return
        self.run.append_metric(row)
        self.track(step, row)
        self.event("eval", step=step, eval_loss=row["eval_loss"])
        extra = "".join(f" {key} {value:.4f}" for key, value in (metrics or {}).items())
        self.info(f"step {step} eval_loss {eval_loss:.4f}{extra}")
        if self.on_log:
            self.on_log(row)


def _window_means(rows: list[dict[str, float]]) -> dict[str, float]:
    """Mean of each extra metric over the steps of a logging window that reported it."""
    keys = dict.fromkeys(k for row in rows for k in row)
    return {k: round(sum(r[k] for r in rows if k in r) / sum(1 for r in rows if k in r), 6) for k in keys}
