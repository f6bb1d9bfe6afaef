"""Model FLOPs of a LoRA / full SFT run, counted from the model's shapes, and this machine's measured matmul peak.

    python benchmarks/flops.py MODEL [--threads 2]     # the model's FLOPs per token, the peak at N threads,
                                                       # and the ceiling the model's own products put on a step

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

The peak is a square matmul, the best shape this machine has. A model's products have their own shapes (a
576-wide model multiplies by 576 x 192 weights), so ``products_ceiling`` also times the products of one LoRA
step alone at the model's shapes: a step's share of the peak can hardly exceed that figure's.
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
    attention = 3 * 4 * shape.heads * shape.head_dim * length * (length + 1) / 2 * shape.layers
    return product_flops(shape, length, targets, lora_rank=lora_rank) + attention


def product_flops(shape: ModelShape, tokens: int, targets: int, *, lora_rank: int | None) -> float:
    """The part of ``sample_flops`` in weight products: the decoder linears, the adapters and the LM head (all
    but attention, whose cost depends on how the tokens split into samples)."""
    full = lora_rank is None
    linear = (6 if full else 4) * shape.decoder_params * tokens
    adapters = 0 if full else 6 * lora_rank * shape.layers * sum(i + o for i, o in shape.linears) * tokens
    head = (6 if full else 4) * shape.vocab * shape.hidden * targets
    return float(linear + adapters + head)


def dataset_flops(shape: ModelShape, samples: list[dict], *, lora_rank: int | None) -> tuple[float, int]:
    """(total training FLOPs, total input tokens) of encoded samples ({"input_ids", "labels"}) for one epoch."""
    flops, tokens = 0.0, 0
    for sample in samples:
        labels = sample["labels"]
        flops += sample_flops(shape, len(labels), trained_positions(labels), lora_rank=lora_rank)
        tokens += len(labels)
    return flops, tokens


def trained_positions(labels: list[int]) -> int:
    """Positions of a sample that need logits: position t predicts label t + 1."""
    return sum(1 for label in labels[1:] if label != -100)


def matmul_peak(threads: int, *, seconds: float = 1.5, sizes: tuple[int, ...] = (512, 1024, 2048),
                dtype: str = "float32") -> float:
    """The best matmul FLOP/s torch reaches here at ``threads`` threads in ``dtype`` (square GEMMs, best of the
    sizes). Runs in a fresh process so that the thread count is the one the contenders get (OMP reads it at
    start)."""
    return _in_fresh_process(f"_peak_here({threads}, {seconds}, {sizes!r}, {dtype!r})", threads)


def _in_fresh_process(call: str, threads: int) -> float:
    """The number ``flops.<call>`` returns, evaluated in a fresh Python at ``threads`` OpenMP/MKL threads (OMP reads
    the count at start, so it cannot be changed in this process)."""
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import flops; print(flops.{call})"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def mean_step(samples: list[dict], batch: int) -> tuple[int, int]:
    """(input tokens, trained positions) of an average optimizer step of ``batch`` samples: the rows of a packed
    step's products, and of its LM head."""
    tokens = sum(len(sample["labels"]) for sample in samples)
    targets = sum(trained_positions(sample["labels"]) for sample in samples)
    steps = max(1, len(samples) / batch)
    return round(tokens / steps), round(targets / steps)


def products_ceiling(shape: ModelShape, tokens: int, targets: int, threads: int, *, lora_rank: int,
                     passes: int = 2) -> float:
    """The FLOP/s of a LoRA step's weight products ALONE, run as our engine runs them on a CPU, on one packed
    row of ``tokens`` tokens with ``targets`` trained positions: every decoder linear's forward (oneDNN on the
    reordered frozen weight) and input gradient (MKL), the adapters' rank-wide products, and the chunked LM
    head's forward and input gradient, on random weights of the model's shapes, all layers, in step order.

    Attention, norms, activations, the loss and the optimizer only add time, and attention's FLOPs are few
    (about 5% of a 256-token sample), so a step's share of the peak can hardly exceed this figure's: it is the
    ceiling these products put on it at these shapes on this machine. Each product's best time of ``passes``
    passes after a warm-up pass (the peak is a best call too), in a fresh process at ``threads`` threads, like the
    peak."""
    spec = json.dumps({"shape": shape.__dict__, "tokens": tokens, "targets": targets, "rank": lora_rank,
                       "threads": threads, "passes": passes})
    return _in_fresh_process(f"_products_here({spec!r})", threads)


def _products_here(spec_json: str) -> float:
    import torch

    spec = json.loads(spec_json)
    shape = ModelShape(**{**spec["shape"], "linears": tuple(tuple(io) for io in spec["shape"]["linears"])})
    tokens, targets, rank = spec["tokens"], spec["targets"], spec["rank"]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from engine.kernels.ops.frozen_gemm import frozen_linear, skinny_product
    from engine.training.loss import head_chunk_rows

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    layers = [[(torch.randn(o, i) / i ** 0.5, torch.randn(rank, i) / i ** 0.5, torch.randn(o, rank) / rank)
               for i, o in shape.linears] for _ in range(shape.layers)]
    rows = {n: torch.randn(tokens, n) for io in shape.linears for n in io}  # inputs and output gradients
    head, hidden = torch.randn(shape.vocab, shape.hidden) / shape.hidden ** 0.5, torch.randn(targets, shape.hidden)
    chunk = head_chunk_rows(shape.vocab)

    def products() -> list:  # one step's products in step order, as engine/kernels/ops/lora.py runs them
        calls, adapter_rows = [], []
        for layer in layers:
            for (weight, lora_a, lora_b), (i, o) in zip(layer, shape.linears):
                x, z = rows[i], skinny_product(rows[i], lora_a)
                adapter_rows.append(z)
                calls += [lambda x=x, a=lora_a: skinny_product(x, a),
                          lambda x=x, w=weight, z=z, b=lora_b: frozen_linear(x, w).addmm_(z, b.t())]
        for start in range(0, targets, chunk):  # fused_linear_ce.py: logits, then the hidden states' gradient
            calls.append(lambda h=hidden[start:start + chunk]: frozen_linear(h, head) @ head)
        for layer in reversed(layers):
            for (weight, lora_a, lora_b), (i, o) in reversed(list(zip(layer, shape.linears))):
                x, dy, z = rows[i], rows[o], adapter_rows.pop()
                dz = skinny_product(dy, lora_b.t())
                calls += [lambda dy=dy, b=lora_b: skinny_product(dy, b.t()),
                          lambda dz=dz, x=x: skinny_product(dz.t(), x.t()),  # the adapters' weight gradients
                          lambda z=z, dy=dy: skinny_product(z.t(), dy.t()),
                          lambda dy=dy, w=weight, dz=dz, a=lora_a: (dy @ w).addmm_(dz, a)]
        return calls

    # Each product's best time over the passes, summed: the same "best call" the peak takes, with the weights
    # read in step order (all layers), so they come from memory as in training, not from cache.
    with torch.no_grad():
        calls = products()
        best = [float("inf")] * len(calls)
        for attempt in range(spec["passes"] + 1):
            for index, call in enumerate(calls):
                begin = time.perf_counter()
                call()
                if attempt:  # the first pass reorders the weights
                    best[index] = min(best[index], time.perf_counter() - begin)
    return product_flops(shape, tokens, targets, lora_rank=rank) / sum(best)


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


def _peak_here(threads: int, seconds: float, sizes: tuple[int, ...], dtype: str = "float32") -> float:
    import torch

    torch.set_num_threads(threads)
    kind = getattr(torch, dtype)
    best = 0.0
    for n in sizes:
        a, b, out = (torch.randn(n, n, dtype=kind) for _ in range(3))
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
    parser.add_argument("--samples", type=int, default=8,
                        help="samples of --length tokens packed into the row of the products' ceiling")
    parser.add_argument("--lora-rank", type=int, default=8)
    args = parser.parse_args()
    shape = ModelShape.from_folder(args.model)
    per_token = sample_flops(shape, args.length, args.length - 1, lora_rank=args.lora_rank) / args.length
    peak = matmul_peak(args.threads)
    rows = args.length * args.samples
    ceiling = products_ceiling(shape, rows, (args.length - 1) * args.samples, args.threads,
                               lora_rank=args.lora_rank)
    print(json.dumps({"shape": shape.__dict__, "decoder_params": shape.decoder_params,
                      "flops_per_token": per_token, "peak_flops": peak,
                      "tokens_per_s_at_peak": peak / per_token, "products_ceiling_flops": ceiling,
                      "products_ceiling_share_of_peak": ceiling / peak}, indent=1, default=str))


if __name__ == "__main__":
    main()
