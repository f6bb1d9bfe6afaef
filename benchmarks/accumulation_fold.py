"""Gradient accumulation folded into one packed micro-batch, side by side with the split steps, in one run.

    python benchmarks/accumulation_fold.py [--model smollm2-135m-instruct] [--micro 4] [--accum 2] [--steps 6]
        [--repeats 2] [--threads 2]

On a CPU with packed rows the wizard trains a step's ``micro x accum`` samples as one micro-batch
(assistant/wizard/adapt.py, folded_accumulation_changes): the same samples and the same loss per step, in larger
products. This trains the wizard's CPU recipe both ways on the identity data (placeholders filled), each run in
its own process, rounds interleaved, and prints real tokens/s (steps after the first), the ratio, and whether
the logged losses agree.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import resolve_bench_model  # noqa: E402
from recipe_runs import identity_data, recipe_arguments, train  # noqa: E402


def main() -> None:
    args = recipe_arguments(__doc__, micro=4, accum=2)
    with tempfile.TemporaryDirectory(prefix="lfa-fold-") as scratch:
        workdir = Path(scratch)
        model, shown = resolve_bench_model(args.model, workdir)
        data = identity_data(workdir)
        shapes = {"split": (args.micro, args.accum), "folded": (args.micro * args.accum, 1)}
        best: dict[str, dict] = {}
        for round_ in range(args.repeats):
            for label, (micro, accum) in shapes.items():
                result = train(model, data, workdir, f"{label}_{round_}", micro=micro, accum=accum,
                               steps=args.steps, threads=args.threads)
                print(f"round {round_ + 1} {label:6} micro {micro} x accum {accum}: {result['tps']:.1f} tok/s")
                if label not in best or result["tps"] > best[label]["tps"]:
                    best[label] = result
        ratio = best["folded"]["tps"] / best["split"]["tps"]
        same = best["folded"]["losses"] == best["split"]["losses"]
        print(f"model {shown}, {args.threads} threads, {args.steps} steps, best of {args.repeats}")
        print(f"folded vs split: ratio {ratio:.2f} (real tokens/s, steps 2-{args.steps}); "
              f"losses {'identical' if same else 'DIFFER'}: {best['split']['losses']}")


if __name__ == "__main__":
    main()
