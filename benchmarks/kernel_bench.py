"""Kernels vs their torch references: time and peak memory of forward + backward, printed as ratios.

    python benchmarks/kernel_bench.py                 # CPU: chunked linear CE memory ratio, chunked gated delta rule
    python benchmarks/kernel_bench.py --compile       # also torch.compile of the eager references (slow to compile)
    python benchmarks/kernel_bench.py --smoke         # every GPU-section case at tiny sizes on CPU (TRITON_INTERPRET=1)

On a CUDA/ROCm machine the GPU section runs as well: each Triton kernel vs eager (and torch.compile) in bf16 at
LLM sizes, with achieved memory bandwidth for the memory-bound ops. Ratios are variant / eager: < 1 is better.
Peak memory is the bytes of tensors alive at the worst moment above what was allocated before the call
(`engine.kernels.measure.peak_bytes`: torch's CUDA allocator stats, or the profiler's allocation events on CPU).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if "--smoke" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"  # before any Triton kernel module is imported

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from engine.kernels.measure import peak_bytes, time_per_call  # noqa: E402
from engine.kernels.ops import cross_entropy as ce_op  # noqa: E402
from engine.kernels.ops import gated_delta_rule as gdr_op  # noqa: E402
from engine.kernels.ops import rms_norm as rms_op  # noqa: E402
from engine.kernels.ops import rope as rope_op  # noqa: E402
from engine.kernels.ops import swiglu as swiglu_op  # noqa: E402
from engine.kernels.ops.fused_linear_ce import chunked_linear_cross_entropy, fused_linear_cross_entropy  # noqa: E402

MEMORY_TARGET = 0.35  # the chunked linear CE must need at most this share of the logits path's peak


@dataclass
class Case:
    """One op at one size: a builder of leaf inputs and the variants to compare (the first one is the baseline)."""

    name: str
    make_inputs: Callable[[], list[torch.Tensor]]
    variants: dict[str, Callable[..., object]]
    bytes_moved: int = 0  # forward + backward HBM traffic of an ideal fused kernel, for GB/s; 0: not memory-bound


def fwd_bwd(fn: Callable[..., object], inputs: list[torch.Tensor]) -> Callable[[], None]:
    """A closure running fn forward and backward (random incoming gradients made once) on fresh grads."""
    outputs = fn(*inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    outputs = tuple(o for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad)
    weights = [torch.randn_like(o) for o in outputs]
    leaves = [t for t in inputs if t.requires_grad]

    def run() -> None:
        outs = fn(*inputs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        outs = tuple(o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad)
        torch.autograd.grad(outs, leaves, weights)

    return run


def maybe_compile(fn: Callable[..., object], enabled: bool) -> Callable[..., object] | None:
    return torch.compile(fn, dynamic=False) if enabled else None


def run_case(case: Case, device: torch.device, repeats: int) -> dict[str, tuple[float, int]]:
    """Time the variants round-robin (best of `repeats` each), so load from other processes hits all alike."""
    steps: dict[str, Callable[[], None]] = {}
    for variant, fn in case.variants.items():
        try:
            steps[variant] = fwd_bwd(fn, case.make_inputs())
            steps[variant]()  # warm-up (and compilation, for torch.compile)
        except Exception as error:  # noqa: BLE001 - a variant that cannot run here is reported, not fatal
            print(f"  {case.name:<22} {variant:<18} failed: {type(error).__name__}: {str(error)[:120]}")
    if not steps:
        return {}
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(repeats):
        for variant, step in steps.items():
            best[variant] = min(best[variant], time_per_call(step, device, warmup=0, repeats=1))
    peaks = {variant: peak_bytes(step, device) for variant, step in steps.items()}
    base = next(iter(steps))
    for variant in steps:
        seconds, peak = best[variant], peaks[variant]
        bandwidth = f"  {case.bytes_moved / seconds / 1e9:8.1f} GB/s" if case.bytes_moved else ""
        print(f"  {case.name:<22} {variant:<18} {seconds * 1e3:9.2f} ms  peak {peak / 2**20:9.1f} MiB  "
              f"time ratio {seconds / best[base]:5.2f}  memory ratio {peak / max(peaks[base], 1):5.2f}{bandwidth}")
    return {variant: (best[variant], peaks[variant]) for variant in steps}


def leaf(*shape: int, device: torch.device, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device=device, dtype=torch.float32) * scale).to(dtype).requires_grad_()


def gpu_cases(device: torch.device, dtype: torch.dtype, size: dict[str, int], compile_refs: bool) -> list[Case]:
    """Each Triton kernel vs eager (and torch.compile of eager) at the sizes in `size`."""
    n, h, inter, v = size["tokens"], size["hidden"], size["intermediate"], size["vocab"]
    b, s, hq, hk, d = size["batch"], size["seq"], size["q_heads"], size["kv_heads"], size["head_dim"]
    item = torch.tensor([], dtype=dtype).element_size()
    mk = dict(device=device, dtype=dtype)

    def variants(reference, kernel, **extra):
        found = {"eager": reference, "triton": kernel, **extra}
        compiled = maybe_compile(reference, compile_refs)
        return found | ({"torch.compile": compiled} if compiled else {})

    cases = [
        Case("rms_norm", lambda: [leaf(n, h, **mk), leaf(h, **mk)],
             variants(lambda x, w: rms_op.rms_norm_reference(x, w, 1e-6),
                      lambda x, w: rms_op.rms_norm(x, w, 1e-6, backend="triton")), 5 * n * h * item),
        Case("swiglu", lambda: [leaf(n, inter, **mk), leaf(n, inter, **mk)],
             variants(swiglu_op.swiglu_reference, lambda g, u: swiglu_op.swiglu(g, u, backend="triton")),
             8 * n * inter * item),
        Case("rope", lambda: [leaf(b, s, hq, d, **mk), leaf(b, s, hk, d, **mk), torch.randn(1, s, d, **mk),
                              torch.randn(1, s, d, **mk)],
             variants(lambda q, k, c, sn: rope_op.rope_reference(q.transpose(1, 2), k.transpose(1, 2), c, sn),
                      lambda q, k, c, sn: rope_op.rope(q.transpose(1, 2), k.transpose(1, 2), c, sn,
                                                       backend="triton")),
             4 * b * s * (hq + hk) * d * item),
    ]
    labels = torch.randint(0, v, (n,), device=device)
    cases.append(Case("cross_entropy", lambda: [leaf(n, v, **mk)],
                      variants(lambda x: ce_op.cross_entropy_reference(x, labels),
                               lambda x: ce_op.cross_entropy(x, labels, backend="triton")), 3 * n * v * item))
    cases.append(linear_ce_case(device, dtype, n, h, v, 1024, compile_refs, triton=True))
    cases.append(gated_delta_case(device, size, triton=True))
    return cases


def gated_delta_case(device: torch.device, size: dict[str, int], triton: bool) -> Case:
    """Qwen3.5-style linear attention: transformers' torch fallback vs the chunked rule (torch / Triton scan)."""
    b, t, hk, hv, k = size["batch"], size["gdn_seq"], size["gdn_k_heads"], size["gdn_v_heads"], size["gdn_dim"]

    def make() -> list[torch.Tensor]:
        mk = dict(device=device, dtype=torch.float32)
        tensors = [torch.randn(b, t, hk, k, **mk), torch.randn(b, t, hk, k, **mk), torch.randn(b, t, hv, k, **mk),
                   F.logsigmoid(torch.randn(b, t, hv, **mk) + 2), torch.rand(b, t, hv, **mk)]
        return [x.requires_grad_() for x in tensors]

    found: dict[str, Callable[..., object]] = {}
    try:
        from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule

        found["transformers torch"] = lambda q, kk, vv, g, bt: torch_chunk_gated_delta_rule(
            q, kk, vv, g=g, beta=bt, use_qk_l2norm_in_kernel=True)[0]
    except ImportError:
        pass
    found["chunked (torch)"] = lambda q, kk, vv, g, bt: gdr_op.chunk_gated_delta_rule(
        q, kk, vv, g, bt, use_qk_l2norm_in_kernel=True, backend="torch")[0]
    if triton:
        found["chunked (triton)"] = lambda q, kk, vv, g, bt: gdr_op.chunk_gated_delta_rule(
            q, kk, vv, g, bt, use_qk_l2norm_in_kernel=True, backend="triton")[0]
    return Case("gated_delta_rule", make, found)


def linear_ce_case(device: torch.device, dtype: torch.dtype, tokens: int, hidden: int, vocab: int, chunk: int,
                   compile_ref: bool, triton: bool) -> Case:
    """The LM head + loss: logits path (eager, optionally compiled) vs chunked torch vs fused Triton."""
    labels = torch.randint(0, vocab, (tokens,), device=device)

    def logits_path(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy((x @ w.T).float(), labels, reduction="sum")

    variants: dict[str, Callable[..., object]] = {
        "eager (logits)": logits_path,
        "torch chunked": lambda x, w: chunked_linear_cross_entropy(x, w, labels, chunk_size=chunk)}
    if triton:
        variants["triton"] = lambda x, w: fused_linear_cross_entropy(x, w, labels, chunk_size=chunk)
    compiled = maybe_compile(logits_path, compile_ref)
    if compiled:
        variants["torch.compile"] = compiled
    mk = dict(device=device, dtype=dtype)
    return Case("fused_linear_ce", lambda: [leaf(tokens, hidden, **mk), leaf(vocab, hidden, **mk, scale=0.02)],
                variants)


def report_memory_ratio(results: dict[str, tuple[float, int]], description: str) -> None:
    """The headline line: peak memory of the chunked linear CE over the logits path's."""
    (stock_time, stock), (chunked_time, chunked) = results["eager (logits)"], results["torch chunked"]
    ratio = chunked / stock
    verdict = "ok" if ratio <= MEMORY_TARGET else "ABOVE TARGET"
    print(f"fused_linear_ce (torch chunked) vs logits path, {description}: memory ratio {ratio:.3f} "
          f"({chunked / 2**20:.0f} / {stock / 2**20:.0f} MiB, target <= {MEMORY_TARGET}: {verdict}), "
          f"time ratio {chunked_time / stock_time:.2f}")


SIZES = {
    "gpu": dict(tokens=16384, hidden=4096, intermediate=14336, vocab=128256, batch=4, seq=4096, q_heads=32,
                kv_heads=8, head_dim=128, gdn_seq=8192, gdn_k_heads=16, gdn_v_heads=32, gdn_dim=128),
    "smoke": dict(tokens=37, hidden=48, intermediate=80, vocab=301, batch=2, seq=9, q_heads=3, kv_heads=1,
                  head_dim=16, gdn_seq=40, gdn_k_heads=2, gdn_v_heads=4, gdn_dim=16),
    "cpu_gdn": dict(batch=2, gdn_seq=1024, gdn_k_heads=4, gdn_v_heads=8, gdn_dim=64),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compile", action="store_true", help="also time torch.compile of the eager references")
    parser.add_argument("--smoke", action="store_true", help="GPU-section cases, tiny, on CPU (Triton interpreter)")
    parser.add_argument("--tokens", type=int, default=2048, help="CPU linear-CE rows (default 2048)")
    parser.add_argument("--hidden", type=int, default=256, help="CPU linear-CE hidden size (default 256)")
    parser.add_argument("--vocab", type=int, default=65536, help="CPU linear-CE vocabulary (default 65536)")
    parser.add_argument("--chunk", type=int, default=256, help="chunk rows of the linear CE (default 256)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    cpu = torch.device("cpu")
    if args.smoke:
        print("smoke: GPU-section cases at tiny sizes on CPU under TRITON_INTERPRET=1 (timings mean nothing)")
        for case in gpu_cases(cpu, torch.float32, SIZES["smoke"], compile_refs=False):
            run_case(case, cpu, repeats=1)
        return
    print(f"== CPU ({torch.get_num_threads()} threads, torch {torch.__version__})")
    results = run_case(linear_ce_case(cpu, torch.float32, args.tokens, args.hidden, args.vocab, args.chunk,
                                      args.compile, triton=False), cpu, args.repeats)
    report_memory_ratio(results, f"{args.tokens} tokens x vocab {args.vocab} x hidden {args.hidden}, fp32, "
                                 f"chunk {args.chunk}, cpu")
    run_case(gated_delta_case(cpu, SIZES["cpu_gdn"], triton=False), cpu, args.repeats)
    print("  rms_norm, swiglu, rope, cross_entropy: Triton only (no CPU backend); see the GPU section")
    if not torch.cuda.is_available():
        print("== GPU: no CUDA/ROCm device here, section skipped")
        return
    gpu = torch.device("cuda")
    print(f"== GPU {torch.cuda.get_device_name(gpu)}, bf16, sizes {SIZES['gpu']}")
    for case in gpu_cases(gpu, torch.bfloat16, SIZES["gpu"], compile_refs=True):
        results = run_case(case, gpu, args.repeats)
        if case.name == "fused_linear_ce" and results:
            report_memory_ratio(results, "GPU sizes, bf16, chunk 1024")


if __name__ == "__main__":
    main()
