"""Model FLOPs of a LoRA / full SFT run, counted from the model's shapes, and this machine's measured matmul peak.

    python benchmarks/flops.py MODEL [--threads 2]     # the model's FLOPs per token, and the peak at N threads

A row's achieved model FLOP/s is (the FLOPs its samples need) / (its training-loop seconds); its share of the
peak divides that by a fp32 matmul measured in the same run at the same thread count. What is counted is the
work the task needs, whatever an implementation spends on top, so every contender of a side-by-side table is
charged the same FLOPs for the same samples (the ratio of FLOP/s is the ratio of tokens/s):

- decoder linear layers, per token: forward 2 x params. Backward: the input gradient 2 x params (it must flow
  down to the first adapter); weight gradients 2 x params only when the base weights train (full tuning).
- LoRA adapters (rank r on an in x out layer), per token: forward 2r(in + out), backward twice that (the input
  gradient through the adapter and the gradients of both adapter matrices).
- causal attention, per layer and sample of n tokens: forward 2 x 2 x heads x head_dim x n(n+1)/2 (scores and
  the weighted sum, each query over the keys before it); backward twice the forward. Flash-style recomputation
  is not counted (it is implementation work, as in the usual MFU convention).
- the LM head only where a position has a target (prompt positions need no logits): forward and input
  gradient 2 x vocab x hidden each, plus the weight gradient when it trains.

Embedding lookups, norms, activations, the loss and the optimizer are not counted (no matmul work).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelShape:
    """What the FLOP count needs from a causal LM: its decoder linears, attention geometry and LM head."""

    layers: int
    linears: tuple[tuple[int, int], ...]
    """(in, out) of every linear layer of ONE decoder layer."""
    heads: int
    head_dim: int
    vocab: int
    hidden: int

    @property
    def decoder_params(self) -> int:
        return self.layers * sum(i * o for i, o in self.linears)

    @classmethod
    def from_folder(cls, folder: str | Path) -> ModelShape:
        """Read from config.json by building the model on the meta device (no weights read, any architecture
        transformers knows), so the linear layers are the real ones, not guessed from config keys."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(folder)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        layers = model.get_decoder().layers
        linears = tuple((m.in_features, m.out_features) for m in layers[0].modules()
                        if isinstance(m, torch.nn.Linear))
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        head = model.get_output_embeddings()
        return cls(len(layers), linears, text.num_attention_heads, head_dim, head.out_features, head.in_features)


def sample_flops(shape: ModelShape, length: int, targets: int, *, lora_rank: int | None) -> float:
    """Training FLOPs (forward + backward) of one sample of ``length`` tokens with ``targets`` trained positions.
    ``lora_rank`` None: full tuning (every base weight gets its gradient)."""
    full = lora_rank is None
    linear = (6 if full else 4) * shape.decoder_params * length
    adapters = 0 if full else 6 * lora_rank * shape.layers * sum(i + o for i, o in shape.linears) * length
    attention = 3 * 4 * shape.heads * shape.head_dim * length * (length + 1) / 2 * shape.layers
    head = (6 if full else 4) * shape.vocab * shape.hidden * targets
    return float(linear + adapters + attention + head)


def dataset_flops(shape: ModelShape, samples: list[dict], *, lora_rank: int | None) -> tuple[float, int]:
    """(total training FLOPs, total input tokens) of encoded samples ({"input_ids", "labels"}) for one epoch."""
    flops, tokens = 0.0, 0
    for sample in samples:
        labels = sample["labels"]
        targets = sum(1 for label in labels[1:] if label != -100)  # position t predicts label t + 1
        flops += sample_flops(shape, len(labels), targets, lora_rank=lora_rank)
        tokens += len(labels)
    return flops, tokens


def matmul_peak(threads: int, *, seconds: float = 1.5, sizes: tuple[int, ...] = (512, 1024, 2048)) -> float:
    """The best fp32 matmul FLOP/s torch reaches here at ``threads`` threads (square GEMMs, best of the sizes).
    Runs in a fresh process so that the thread count is the one the contenders get (OMP reads it at start)."""
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import flops; " \
           f"print(flops._peak_here({threads}, {seconds}, {sizes!r}))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def device_matmul_peak(device: str, dtype: str = "bfloat16", *, size: int = 8192, calls: int = 20) -> float:
    """The matmul FLOP/s of a GPU in ``dtype``: the best of ``calls`` timed (size x size) products."""
    import torch

    kind = getattr(torch, dtype)
    a = torch.randn(size, size, device=device, dtype=kind)
    b = torch.randn(size, size, device=device, dtype=kind)
    for _ in range(3):
        a @ b  # warm up clocks and cuBLAS heuristics
    best = float("inf")
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1000)
    return 2 * size ** 3 / best


def _peak_here(threads: int, seconds: float, sizes: tuple[int, ...]) -> float:
    import torch

    torch.set_num_threads(threads)
    best = 0.0
    for n in sizes:
        a, b, out = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
        torch.mm(a, b, out=out)  # warm the kernels and the pages
        calls = 0
        start = time.perf_counter()
        while True:
            begin = time.perf_counter()
            torch.mm(a, b, out=out)
            best = max(best, 2 * n ** 3 / (time.perf_counter() - begin))
            calls += 1
            if time.perf_counter() - start > seconds / len(sizes) and calls >= 3:
                break
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a model folder")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--length", type=int, default=256, help="sample length for the per-token figure")
    parser.add_argument("--lora-rank", type=int, default=8)
    args = parser.parse_args()
    shape = ModelShape.from_folder(args.model)
    per_token = sample_flops(shape, args.length, args.length - 1, lora_rank=args.lora_rank) / args.length
    peak = matmul_peak(args.threads)
    print(json.dumps({"shape": shape.__dict__, "decoder_params": shape.decoder_params,
                      "flops_per_token": per_token, "peak_flops": peak,
                      "tokens_per_s_at_peak": peak / per_token}, indent=1, default=str))


if __name__ == "__main__":
    main()
