"""Ulysses sequence parallelism: per-rank memory and step time against sequence length, sp=1 vs sp=2 (CPU).

    python benchmarks/sequence_parallel.py [--cap-mib 160] [--lengths 1024,2048,4096] [--model DIR]

sp=1 runs in one process, sp=2 in two (torchrun, gloo), on the same tiny demo model (full fine-tuning, fp32,
one sequence per step). For each length it measures one forward + backward of the causal-LM loss:
  peak MiB  - the most bytes of tensors alive at once during the step, beyond what was alive before it
              (parameters): activations, logits, gradients and the all-to-all buffers, counted per rank by a
              dispatch-mode tracker (exact and repeatable, unlike RSS, which the allocator keeps high);
  step s    - wall time of the same step without the tracker, one thread per process (on a shared 2-core CPU
              this proves memory, not speed).
Then it searches the longest sequence whose peak fits ``--cap-mib`` for each sp, and prints their ratio in a line
containing "length ratio". Targets: sp=2 peak <= 0.65 x sp=1 at equal length; >= 1.6 x longer under one cap.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


class LiveTensorBytes:
    """Bytes of tensor storage alive, and their peak, over everything dispatched inside the ``with`` block."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        tracker = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                tracker.record(out)
                return out

        self.mode = _Mode()
        self.current = self.peak = 0
        self.seen: set[int] = set()

    def record(self, out) -> None:
        import torch
        from torch.utils._pytree import tree_flatten

        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            try:
                storage = tensor.untyped_storage()
                key, size = storage.data_ptr(), storage.nbytes()
            except RuntimeError:  # a wrapper subclass (async collective result): its inner tensor is counted
                continue
            if size == 0 or key in self.seen:  # views and in-place results share a storage already counted
                continue
            self.seen.add(key)
            self.current += size
            self.peak = max(self.peak, self.current)
            weakref.finalize(storage, self._freed, key, size)  # storages keep one Python object while alive

    def _freed(self, key: int, size: int) -> None:
        self.current -= size
        self.seen.discard(key)

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def step(model, batch: dict) -> None:
    from engine.training.loss import causal_lm_loss_sum, trained_tokens

    loss_sum, _ = causal_lm_loss_sum(model, batch)
    (loss_sum / max(trained_tokens(batch), 1)).backward()


def measure(model, sp, length: int, vocab: int) -> tuple[float, float]:
    """(peak MiB of this rank's step, step seconds) for one sequence of ``length`` tokens."""
    import torch

    ids = torch.randint(3, vocab, (1, length), generator=torch.Generator().manual_seed(length))
    batch = {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}
    if sp is not None:
        batch = sp.shard_batch(batch)
    model.zero_grad(set_to_none=True)
    with LiveTensorBytes() as live:
        step(model, batch)
    model.zero_grad(set_to_none=True)
    started = time.perf_counter()
    step(model, batch)
    seconds = time.perf_counter() - started
    model.zero_grad(set_to_none=True)
    return live.peak / 2**20, seconds


def worker(args) -> None:
    """One process of an sp=1 or sp=2 measurement; rank 0 writes the results as JSON."""
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa")
    model.train()
    sp = None
    if args.sp > 1:
        from engine.parallel.ulysses import SequenceParallel

        dist.init_process_group("gloo")
        sp = SequenceParallel(dist.group.WORLD, args.sp, dist.get_rank())
        sp.install(model)
    vocab = model.config.vocab_size

    def peak_everywhere(length: int) -> tuple[float, float]:
        peak, seconds = measure(model, sp, length, vocab)
        if sp is None:
            return peak, seconds
        values = torch.tensor([peak, seconds], dtype=torch.float64)
        dist.all_reduce(values, op=dist.ReduceOp.MAX)  # every rank takes the same decisions below
        return float(values[0]), float(values[1])

    table = {length: peak_everywhere(length) for length in args.lengths}
    fits = longest_under_cap(lambda n: peak_everywhere(n)[0], args.cap_mib, args.granularity)
    if sp is None or dist.get_rank() == 0:
        Path(args.out).write_text(json.dumps({"table": table, "longest": fits}))
    if sp is not None:
        dist.destroy_process_group()


def longest_under_cap(peak_of, cap_mib: float, granularity: int) -> int:
    """The longest multiple of ``granularity`` whose step peak stays under the cap (peaks grow with length)."""
    low, high = 0, granularity
    while peak_of(high) <= cap_mib:
        low, high = high, high * 2
    while high - low > granularity:
        middle = (low + high) // 2 // granularity * granularity
        low, high = (middle, high) if peak_of(middle) <= cap_mib else (low, middle)
    return low


def run_both(args) -> dict[int, dict]:
    # One thread per process: on the 2-core CPU machine more threads made sp=1 slower, not faster.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_OFFLINE": "1",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "PYTHONPATH": str(REPO)}
    results = {}
    with tempfile.TemporaryDirectory(prefix="lfa-sp-bench-") as scratch:
        env["TMPDIR"] = scratch
        for sp in (1, 2):
            out = Path(scratch) / f"sp{sp}.json"
            common = [str(Path(__file__).resolve()), "--worker", "--sp", str(sp), "--model", str(args.model),
                      "--out", str(out), "--cap-mib", str(args.cap_mib), "--granularity", str(args.granularity),
                      "--lengths", ",".join(map(str, args.lengths))]
            prefix = [sys.executable] if sp == 1 else [sys.executable, "-m", "torch.distributed.run",
                                                       "--standalone", f"--nproc-per-node={sp}"]
            subprocess.run(prefix + common, env=env, check=True)
            results[sp] = json.loads(out.read_text())
    return results


def report(results: dict[int, dict], cap_mib: float) -> None:
    one, two = results[1], results[2]
    print(f"{'length':>7} | {'sp=1 peak MiB':>13} {'step s':>7} | {'sp=2 peak MiB/rank':>18} {'step s':>7} | ratio")
    for length in one["table"]:
        (p1, t1), (p2, t2) = one["table"][length], two["table"][length]
        print(f"{int(length):>7} | {p1:>13.1f} {t1:>7.2f} | {p2:>18.1f} {t2:>7.2f} | {p2 / p1:.2f}")
    ratios = [two["table"][n][0] / one["table"][n][0] for n in one["table"]]
    print(f"per-rank peak memory sp=2 / sp=1: {min(ratios):.2f} - {max(ratios):.2f} (target <= 0.65)")
    print(f"longest sequence under {cap_mib:.0f} MiB: sp=1 {one['longest']} tokens, sp=2 {two['longest']} tokens")
    print(f"length ratio sp=2 / sp=1: {two['longest'] / max(one['longest'], 1):.2f} (target >= 1.6)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model folder (default: the demo model, built once in the temp folder)")
    parser.add_argument("--cap-mib", type=float, default=160.0, help="memory cap per rank for the length search")
    parser.add_argument("--lengths", default="1024,2048,4096", help="lengths for the table, comma-separated")
    parser.add_argument("--granularity", type=int, default=128, help="length search resolution (tokens)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sp", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.lengths = [int(n) for n in str(args.lengths).split(",")]
    if args.worker:
        worker(args)
        return
    if not args.model:
        from engine.models.demo import build_demo_model

        args.model = build_demo_model("lf-tiny-qwen3", Path(tempfile.gettempdir()) / "lfa-bench" / "lf-tiny-qwen3")
    report(run_both(args), args.cap_mib)


if __name__ == "__main__":
    main()
