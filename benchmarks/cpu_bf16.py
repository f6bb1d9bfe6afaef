"""bf16 on a CPU with bf16 units, side by side with fp32, in one run.

    python benchmarks/cpu_bf16.py [--model smollm2-135m-instruct] [--micro 8] [--accum 1] [--steps 6]
        [--repeats 2] [--threads 2]

On a CPU with AMX-BF16 or AVX512-BF16 units (engine.devices.cpu_bf16_units) a config's ``bf16: true`` trains
under bf16 autocast, the frozen base loaded in bf16 and what trains kept in fp32 (engine/training/setup.py,
choose_precision). This trains the wizard's CPU recipe on the identity data both ways, each run in its own
process, rounds interleaved, and prints real tokens/s (steps after the first), the ratio, the largest gap
between the two runs' logged losses, and the matmul peak of each dtype measured in the same run.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import resolve_bench_model  # noqa: E402
from flops import matmul_peak  # noqa: E402
from recipe_runs import identity_data, recipe_arguments, train  # noqa: E402


def main() -> None:
    args = recipe_arguments(__doc__, micro=8, accum=1)
    from engine.devices import cpu_bf16_units

    units = cpu_bf16_units()
    if not units:
        raise SystemExit("This CPU has no bf16 units (AMX-BF16 or AVX512-BF16): bf16: true trains in fp32 here, "
                         "so there is nothing to compare.")
    with tempfile.TemporaryDirectory(prefix="lfa-bf16-") as scratch:
        workdir = Path(scratch)
        model, shown = resolve_bench_model(args.model, workdir)
        data = identity_data(workdir)
        best: dict[str, dict] = {}
        peaks: dict[str, float] = {}
        for round_ in range(args.repeats):
            for label, dtype in (("fp32", "float32"), ("bf16", "bfloat16")):
                peaks[label] = max(peaks.get(label, 0.0), matmul_peak(args.threads, dtype=dtype))
                result = train(model, data, workdir, f"{label}_{round_}", micro=args.micro, accum=args.accum,
                               steps=args.steps, threads=args.threads, bf16=label == "bf16")
                print(f"round {round_ + 1} {label}: {result['tps']:.1f} tok/s")
                if label not in best or result["tps"] > best[label]["tps"]:
                    best[label] = result
        ratio = best["bf16"]["tps"] / best["fp32"]["tps"]
        gap = max(abs(a - b) for a, b in zip(best["bf16"]["losses"], best["fp32"]["losses"]))
        print(f"model {shown}, {units}, {args.threads} threads, micro {args.micro} x accum {args.accum}, "
              f"{args.steps} steps, best of {args.repeats}")
        print(f"matmul peak: fp32 {peaks['fp32'] / 1e9:.1f} GFLOP/s, bf16 {peaks['bf16'] / 1e9:.1f} GFLOP/s "
              f"(ratio {peaks['bf16'] / peaks['fp32']:.2f})")
        print(f"bf16 vs fp32: ratio {ratio:.2f} (real tokens/s, steps 2-{args.steps}); largest loss gap {gap:.4f}")
        print(f"losses fp32 {best['fp32']['losses']}")
        print(f"losses bf16 {best['bf16']['losses']}")


if __name__ == "__main__":
    main()
