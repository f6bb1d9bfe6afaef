"""The wizard's CPU recipe trained through the CLI, one run per process: what the side-by-side comparisons of
one engine setting against another share (accumulation_fold.py, cpu_bf16.py)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import REPO  # noqa: E402


def identity_data(workdir: Path) -> Path:
    """The identity data with its placeholders filled, registered as ``identity_filled`` in ``workdir/data``."""
    from engine.data import fill_placeholders

    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    fill_placeholders(REPO / "data" / "identity.json", {"name": "Nova", "author": "Acme Labs"},
                      data / "identity_filled.json")
    (data / "dataset_info.json").write_text(json.dumps({"identity_filled": {"file_name": "identity_filled.json"}}))
    return data


def train(model: Path, data: Path, workdir: Path, name: str, *, micro: int, accum: int, steps: int,
          threads: int, **settings) -> dict:
    """One run through the CLI, with ``settings`` over the recipe; real tokens/s over steps 2..N (the first warms
    up), and its losses."""
    config = {"model_name_or_path": str(model), "stage": "sft", "finetuning_type": "lora", "lora_target": "all",
              "dataset": "identity_filled", "dataset_dir": str(data), "template": "smollm2" if "SmolLM2" in
              model.name else "qwen", "cutoff_len": 512, "batching_strategy": "packed",
              "per_device_train_batch_size": micro, "gradient_accumulation_steps": accum, "learning_rate": 1e-3,
              "max_steps": steps, "logging_steps": 1, "save_steps": 10_000, "report_to": "none",
              "output_dir": str(workdir / "out" / name), "overwrite_output_dir": True, **settings}
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


def recipe_arguments(description: str, *, micro: int, accum: int) -> argparse.Namespace:
    """The command line both comparisons take: the model, the recipe's micro-batch and accumulation, steps,
    interleaved rounds and threads."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--micro", type=int, default=micro)
    parser.add_argument("--accum", type=int, default=accum)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    return parser.parse_args()
