"""Where a training step's time goes on this machine: data, forward (with the loss), backward, optimizer.

    python benchmarks/profile_step.py [--model NAME_OR_PATH] [--strategy packed] [--dataset skewed] [--steps 20]
                                      [--method lora] [--threads N] [--ops 15] [--kernels auto]

Runs the SFT step exactly as engine/recipes/sft.py does (same batcher, same loss, same token-count normalisation)
on a model (default the tiny demo model; a folder or a registry id, see bench_models.py) and the benchmark
datasets of compare_peers.py (peer_runs.py), and times each phase with wall and CPU clocks (CPU work is
synchronous, so a phase's wall time is its own). It also prints the achieved model FLOP/s (benchmarks/flops.py),
its share of a matmul measured at the same thread count, and the peak RSS. ``--ops N`` adds torch.profiler's N
most expensive operators (self CPU time), so the next improvement is chosen by measurement: e.g. how much of the
forward is attention, the LM head or the cross-entropy.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_models import DEFAULT_MODEL  # noqa: E402
from flops import ModelShape, dataset_flops, matmul_peak  # noqa: E402

PHASES = ("data", "forward", "backward", "optimizer")


def build(args, root: Path):
    """(model, optimizer, batcher, params) as the recipe builds them, on the benchmark data."""
    import torch

    from peer_runs import DATASETS, SETTINGS, write_dataset
    from engine.config import TrainConfig
    from engine.data import SFTCollator, encode_supervised, load_examples
    from engine.data.templates import get_template
    from engine.methods import get_method
    from bench_models import resolve_bench_model
    from engine.models.loading import load_model, load_tokenizer
    from engine.training.batching import build_batcher

    model_dir, _ = resolve_bench_model(args.model, root)
    cutoff = DATASETS[args.dataset]["cutoff_len"]
    name = write_dataset(root / "data", args.dataset, (args.steps + args.warmup) * SETTINGS["batch"])
    config = TrainConfig(model_name_or_path=str(model_dir), finetuning_type=args.method, lora_target="all",
                         lora_rank=SETTINGS["lora_rank"], lora_alpha=SETTINGS["lora_alpha"], lora_dropout=0.0,
                         cutoff_len=cutoff, per_device_train_batch_size=SETTINGS["batch"],
                         batching_strategy=args.strategy, seed=SETTINGS["seed"])
    tokenizer = load_tokenizer(model_dir)
    samples = encode_supervised(load_examples(name, root / "data"), tokenizer, get_template("qwen", tokenizer), cutoff)
    base = load_model(model_dir, dtype="bfloat16" if args.bf16 else "float32", device="cpu")
    plan = None
    if args.kernels != "none":
        from engine.kernels.patch import apply_kernels

        plan = apply_kernels(base, args.kernels, device="cpu")
        print(f"kernels: {', '.join(plan.applied) or 'none'}")
    model = get_method(args.method).prepare(base, config)
    if args.bf16:  # as the session does under autocast: what trains in fp32, the frozen base in bf16
        from engine.training.session import keep_trainable_in_float32

        keep_trainable_in_float32(model)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=SETTINGS["lr"], foreach=True)
    batcher = build_batcher(config, samples, SFTCollator(pad_token_id=tokenizer.pad_token_id))
    rank = SETTINGS["lora_rank"] if args.method == "lora" else None
    flops, tokens = dataset_flops(ModelShape.from_folder(model_dir), list(samples), lora_rank=rank)
    return model, optimizer, batcher, params, flops / tokens, plan


def timed_step(model, optimizer, batcher, params, group, clock, plan=None, bf16: bool = False) -> int:
    """One optimizer step, phase by phase (the forward under bf16 autocast with ``bf16``); returns the real input
    tokens it trained on."""
    import contextlib

    import torch

    from engine.training.loss import causal_lm_loss_sum, trained_tokens

    with clock("data"):
        micro_batches = [batcher.collate(ids) for ids in group]
        denominator = max(sum(trained_tokens(b) for b in micro_batches), 1)
    for batch in micro_batches:
        with clock("forward"), (torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()):
            loss_sum, _ = causal_lm_loss_sum(model, batch, fused_linear_ce=plan if plan and plan.fused_linear_ce
                                             else False)
            loss = loss_sum / denominator
        with clock("backward"):
            loss.backward()
    with clock("optimizer"):
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return sum(int(b["attention_mask"].sum()) for b in micro_batches)


class PhaseClock:
    """Accumulates wall and CPU seconds per phase (``with clock("forward"): ...``)."""

    def __init__(self) -> None:
        self.wall = dict.fromkeys(PHASES, 0.0)
        self.cpu = dict.fromkeys(PHASES, 0.0)
        self.enabled = False

    def __call__(self, phase: str):
        clock = self

        class _Span:
            def __enter__(self):
                self.start = (time.perf_counter(), time.process_time())

            def __exit__(self, *exc):
                if clock.enabled:
                    clock.wall[phase] += time.perf_counter() - self.start[0]
                    clock.cpu[phase] += time.process_time() - self.start[1]

        return _Span()


def report(clock: PhaseClock, steps: int, tokens: int, args, flops_per_token: float, peak: float) -> None:
    import resource

    total_wall, total_cpu = sum(clock.wall.values()), sum(clock.cpu.values())
    achieved = tokens / total_wall * flops_per_token
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\n{args.model}: {args.strategy} batching, {args.dataset} data, {args.method}, {steps} steps of "
          f"{tokens / steps:.0f} real tokens: {tokens / total_wall:.0f} tok/s, {tokens / total_cpu:.0f} tok/CPU-s, "
          f"{achieved / 1e9:.1f} GFLOP/s = {achieved / peak:.0%} of the {peak / 1e9:.0f} GFLOP/s matmul peak at "
          f"{args.threads} thread(s), peak RSS {rss:.0f} MB")
    print(f"{'phase':<11}{'ms/step':>9}{'share':>8}{'CPU ms/step':>13}")
    for phase in PHASES:
        print(f"{phase:<11}{1000 * clock.wall[phase] / steps:>9.1f}{clock.wall[phase] / total_wall:>8.1%}"
              f"{1000 * clock.cpu[phase] / steps:>13.1f}")


def compare_gemm(model, optimizer, batcher, params, groups, plan) -> None:
    """Every step's micro-batches run twice, with the oneDNN products and with the plain matmul (same process,
    same data, alternating which goes first); prints each pair and the median ratio."""
    import statistics

    from engine.kernels.ops import frozen_gemm

    ratios = []
    for index, group in enumerate(groups):
        rate = {}
        for onednn in ((True, False) if index % 2 == 0 else (False, True)):
            frozen_gemm.set_enabled(onednn)
            start = time.perf_counter()
            tokens = timed_step(model, optimizer, batcher, params, group, PhaseClock(), plan)
            rate[onednn] = tokens / (time.perf_counter() - start)
        ratios.append(rate[True] / rate[False])
        print(f"step {index + 1}: oneDNN {rate[True]:.1f} tok/s, plain {rate[False]:.1f} tok/s, "
              f"ratio {ratios[-1]:.2f}", flush=True)
    frozen_gemm.set_enabled(True)
    print(f"reordered copies: {frozen_gemm.cached_bytes() / 2**20:.0f} MB")
    print(f"oneDNN products vs plain matmul: ratio {statistics.median(ratios):.2f} (median of {len(ratios)} steps)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a model folder, a registry id or a demo model")
    parser.add_argument("--kernels", default="none", help="kernel_config for the model (none, auto, or names)")
    parser.add_argument("--strategy", default="packed", choices=("padded", "bucketed", "packed", "dynamic"))
    parser.add_argument("--dataset", default="skewed", choices=("skewed", "uniform"))
    parser.add_argument("--method", default="lora", choices=("lora", "full"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2, help="steps run first and not counted")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (0: torch's default); 1 as in compare_peers.py, for the same reason")
    parser.add_argument("--ops", type=int, default=0, help="also list the N most expensive torch operators")
    parser.add_argument("--compare-gemm", action="store_true",
                        help="alternate steps with the oneDNN products (frozen weights reordered once, the "
                             "adapters' skinny products; engine/kernels/ops/frozen_gemm.py) and with the plain "
                             "matmul, and print the ratio of the two")
    parser.add_argument("--bf16", action="store_true",
                        help="bf16 autocast with the base loaded in bf16, as bf16: true trains on a CPU with bf16 "
                             "units; the peak is then a bf16 matmul")
    parser.add_argument("--malloc-default", action="store_true",
                        help="leave glibc malloc's thresholds as they are (a CPU run raises them: "
                             "engine/training/host_memory.py), to measure what that buys")
    parser.add_argument("--shapes", action="store_true",
                        help="with --ops: one row per operator AND input shapes (which matmul is slow)")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.malloc_default:  # as the session does for a CPU run
        from engine.training.host_memory import keep_freed_blocks

        keep_freed_blocks()
    peak = matmul_peak(args.threads or torch.get_num_threads(), dtype="bfloat16" if args.bf16 else "float32")
    with tempfile.TemporaryDirectory(prefix="lfa-profile-") as root:
        model, optimizer, batcher, params, flops_per_token, plan = build(args, Path(root))
    groups = [g for epoch in range(3) for g in batcher.groups(epoch)][:args.warmup + args.steps]
    clock = PhaseClock()
    for group in groups[:args.warmup]:
        timed_step(model, optimizer, batcher, params, group, clock, plan, args.bf16)
    clock.enabled = True
    if args.compare_gemm:
        compare_gemm(model, optimizer, batcher, params, groups[args.warmup:], plan)
        return
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                      record_shapes=args.shapes) if args.ops else None
    tokens = 0
    if profiler:
        profiler.__enter__()
    for group in groups[args.warmup:]:
        tokens += timed_step(model, optimizer, batcher, params, group, clock, plan, args.bf16)
    if profiler:
        profiler.__exit__(None, None, None)
    report(clock, len(groups) - args.warmup, tokens, args, flops_per_token, peak)
    if profiler:
        averages = profiler.key_averages(group_by_input_shape=args.shapes)
        print(averages.table(sort_by="self_cpu_time_total", row_limit=args.ops, max_name_column_width=40,
                             max_shapes_column_width=60))


if __name__ == "__main__":
    main()
