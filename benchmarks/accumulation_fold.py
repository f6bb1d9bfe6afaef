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

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import REPO, resolve_bench_model  # noqa: E402


def train(model: Path, data: Path, workdir: Path, name: str, micro: int, accum: int, steps: int,
          threads: int) -> dict:
    """One run through the CLI; tokens/s over steps 2..N (the first warms up), and its losses."""
    config = {"model_name_or_path": str(model), "stage": "sft", "finetuning_type": "lora", "lora_target": "all",
              "dataset": "identity_filled", "dataset_dir": str(data), "template": "smollm2" if "SmolLM2" in
              model.name else "qwen", "cutoff_len": 512, "batching_strategy": "packed",
              "per_device_train_batch_size": micro, "gradient_accumulation_steps": accum, "learning_rate": 1e-3,
              "max_steps": steps, "logging_steps": 1, "save_steps": 10_000, "report_to": "none",
              "output_dir": str(workdir / "out" / name), "overwrite_output_dir": True}
    path = workdir / f"{name}.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "CUDA_VISIBLE_DEVICES": ""}  # a CPU measurement, also on a machine with a GPU
    subprocess.run([sys.executable, "-m", "assistant.cli.main", "train", str(path), "--run-id", name,
                    "--runs-dir", str(workdir / "runs")], check=True, env=env, cwd=REPO,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from engine.rundir import read_jsonl

    logged = [row for row in read_jsonl(workdir / "runs" / name / "metrics.jsonl") if "loss" in row
              and "elapsed_s" in row]
    first, last = logged[0], logged[-1]
    tokens = last["num_input_tokens_seen"] - first["num_input_tokens_seen"]
    return {"tps": tokens / max(last["elapsed_s"] - first["elapsed_s"], 1e-9),
            "losses": [round(row["loss"], 4) for row in logged]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from engine.data import fill_placeholders

    with tempfile.TemporaryDirectory(prefix="lfa-fold-") as scratch:
        workdir = Path(scratch)
        model, shown = resolve_bench_model(args.model, workdir)
        data = workdir / "data"
        fill_placeholders(REPO / "data" / "identity.json", {"name": "Nova", "author": "Acme Labs"},
                          data / "identity_filled.json")
        (data / "dataset_info.json").write_text(json.dumps({"identity_filled": {"file_name": "identity_filled.json"}}))
        shapes = {"split": (args.micro, args.accum), "folded": (args.micro * args.accum, 1)}
        best: dict[str, dict] = {}
        for round_ in range(args.repeats):
            for label, (micro, accum) in shapes.items():
                result = train(model, data, workdir, f"{label}_{round_}", micro, accum, args.steps, args.threads)
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
