"""SFT throughput, side by side in one run: our engine vs a plain Hugging Face Trainer + peft baseline.

Same demo model, same encoded samples, same LoRA settings, batch, steps and learning rate, on this CPU. Each
contender runs in its own process so peak RSS is its own. Prints trained (non-padding) input tokens per second,
wall time of the training loop, peak RSS, final loss, and the ratio against the HF baseline.

    python benchmarks/sft_throughput.py [--steps 50] [--dataset alpaca_demo]

If LLaMA-Factory is installed (``llamafactory-cli`` on PATH, or LFA_LLAMAFACTORY_CLI=/path/to/llamafactory-cli),
it is run as a third column on an equivalent YAML (gradient checkpointing off, as in the other two).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SETTINGS = dict(cutoff_len=256, max_samples=400, batch=4, grad_accum=1, lr=1e-4, lora_rank=8, lora_alpha=16, seed=42)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def encoded_samples(model_dir: str, dataset: str):
    from engine.data import encode_supervised, load_examples
    from engine.data.templates import get_template
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    examples = load_examples(dataset, REPO / "data", max_samples=SETTINGS["max_samples"])
    return tokenizer, encode_supervised(examples, tokenizer, get_template("qwen", tokenizer), SETTINGS["cutoff_len"])


def run_ours(model_dir: str, dataset: str, steps: int, workdir: Path) -> dict:
    import engine

    config = engine.load_config({
        "model_name_or_path": model_dir, "dataset": dataset, "dataset_dir": str(REPO / "data"), "template": "qwen",
        "cutoff_len": SETTINGS["cutoff_len"], "max_samples": SETTINGS["max_samples"], "finetuning_type": "lora",
        "lora_rank": SETTINGS["lora_rank"], "lora_alpha": SETTINGS["lora_alpha"], "lora_target": "all",
        "per_device_train_batch_size": SETTINGS["batch"], "gradient_accumulation_steps": SETTINGS["grad_accum"],
        "learning_rate": SETTINGS["lr"], "max_steps": steps, "lr_scheduler_type": "cosine", "logging_steps": 10,
        "save_strategy": "no", "plot_loss": False, "seed": SETTINGS["seed"], "output_dir": str(workdir / "ours"),
        "overwrite_output_dir": True,
    })
    status = engine.train(config, runs_dir=workdir / "runs").status()
    return {"tokens": status["num_input_tokens_seen"], "train_s": status["train_runtime_s"],
            "final_loss": status["final_loss"]}


def run_hf(model_dir: str, dataset: str, steps: int, workdir: Path) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, DataCollatorForSeq2Seq, Trainer, TrainingArguments

    tokenizer, samples = encoded_samples(model_dir, dataset)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=SETTINGS["lora_rank"],
                                             lora_alpha=SETTINGS["lora_alpha"], target_modules="all-linear"))
    args = TrainingArguments(
        output_dir=str(workdir / "hf"), per_device_train_batch_size=SETTINGS["batch"],
        gradient_accumulation_steps=SETTINGS["grad_accum"], learning_rate=SETTINGS["lr"], max_steps=steps,
        lr_scheduler_type="cosine", logging_steps=10, save_strategy="no", report_to="none", use_cpu=True,
        seed=SETTINGS["seed"], disable_tqdm=True, include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0, remove_unused_columns=False)
    trainer = Trainer(model=model, args=args, train_dataset=samples,
                      data_collator=DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=-100))
    result = trainer.train()
    return {"tokens": int(trainer.state.num_input_tokens_seen), "train_s": result.metrics["train_runtime"],
            "final_loss": [h["loss"] for h in trainer.state.log_history if "loss" in h][-1]}


def run_llamafactory(cli: str, model_dir: str, dataset: str, steps: int, workdir: Path) -> dict:
    config = {
        "model_name_or_path": model_dir, "stage": "sft", "do_train": True, "finetuning_type": "lora",
        "lora_rank": SETTINGS["lora_rank"], "lora_alpha": SETTINGS["lora_alpha"], "lora_dropout": 0.0,
        "lora_target": "all", "dataset": dataset, "dataset_dir": str(REPO / "data"), "template": "qwen",
        "default_system": "You are a helpful assistant.", "cutoff_len": SETTINGS["cutoff_len"],
        "max_samples": SETTINGS["max_samples"], "overwrite_cache": True, "preprocessing_num_workers": 1,
        "output_dir": str(workdir / "lf"), "logging_steps": 10, "save_strategy": "no", "plot_loss": False,
        "overwrite_output_dir": True, "report_to": "none", "per_device_train_batch_size": SETTINGS["batch"],
        "gradient_accumulation_steps": SETTINGS["grad_accum"], "learning_rate": SETTINGS["lr"], "max_steps": steps,
        "lr_scheduler_type": "cosine", "bf16": False, "seed": SETTINGS["seed"],
        "disable_gradient_checkpointing": True, "include_effective_tokens_per_second": True,
    }
    path = workdir / "lf.yaml"
    path.write_text(json.dumps(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(workdir / "lf_cache")}
    start = time.time()
    proc = subprocess.run([cli, "train", str(path)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    results = json.loads((workdir / "lf" / "train_results.json").read_text())
    log = [json.loads(line) for line in (workdir / "lf" / "trainer_log.jsonl").read_text().splitlines()]
    tokens = results.get("effective_tokens_per_sec", 0) * results["train_runtime"]
    return {"tokens": int(tokens), "train_s": results["train_runtime"],
            "final_loss": [row["loss"] for row in log if "loss" in row][-1], "wall_s": time.time() - start}


def worker(args) -> None:
    workdir = Path(args.workdir)
    runner = {"ours": run_ours, "hf": run_hf}[args.worker]
    result = runner(args.model, args.dataset, args.steps, workdir)
    result["peak_rss_mb"] = peak_rss_mb()
    Path(args.out).write_text(json.dumps(result))


def spawn(kind: str, model: str, dataset: str, steps: int, workdir: Path, threads: int) -> dict:
    out = workdir / f"{kind}.json"
    # The same thread count for every contender. On a shared 2-core machine, 2 OpenMP threads per process can
    # be several times slower than 1 when anything else runs, which would measure the neighbours, not the code.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": str(threads)}
    subprocess.run([sys.executable, __file__, "--worker", kind, "--model", model, "--dataset", dataset,
                    "--steps", str(steps), "--workdir", str(workdir), "--out", str(out)], check=True, env=env)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--dataset", default="alpaca_demo")
    parser.add_argument("--repeats", type=int, default=2, help="run each contender N times, keep the best")
    parser.add_argument("--threads", type=int, default=1, help="OpenMP/torch threads per contender (same for all)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    from engine.models.demo import build_demo_model

    workdir = Path(tempfile.mkdtemp(prefix="lfa-bench-"))
    model = str(build_demo_model("lf-tiny-qwen3", workdir / "model"))
    contenders = {"HF Trainer + peft": "hf", "lf-assistant": "ours"}
    results: dict[str, dict] = {}
    for label, kind in contenders.items():
        runs = [spawn(kind, model, args.dataset, args.steps, workdir, args.threads) for _ in range(args.repeats)]
        results[label] = max(runs, key=lambda r: r["tokens"] / r["train_s"])
    cli = os.environ.get("LFA_LLAMAFACTORY_CLI") or shutil.which("llamafactory-cli")
    if cli:
        try:
            results["LLaMA-Factory"] = run_llamafactory(cli, model, args.dataset, args.steps, workdir)
            results["LLaMA-Factory"]["peak_rss_mb"] = float("nan")
        except Exception as exc:  # noqa: BLE001 - the peer is optional; say why it is missing
            print(f"LLaMA-Factory run failed: {exc}")
    print_table(results, args)
    shutil.rmtree(workdir, ignore_errors=True)


def print_table(results: dict[str, dict], args) -> None:
    base = results["HF Trainer + peft"]
    base_tps = base["tokens"] / base["train_s"]
    print(f"\nLoRA SFT on lf-tiny-qwen3, {args.dataset}, {args.steps} steps, batch {SETTINGS['batch']}, "
          f"cutoff {SETTINGS['cutoff_len']}, fp32 CPU, {args.threads} thread(s), gradient checkpointing off, "
          f"best of {args.repeats}")
    print(f"{'contender':<20}{'tokens':>9}{'train s':>9}{'tok/s':>9}{'peak RSS MB':>13}{'final loss':>12}{'ratio':>8}")
    for label, r in results.items():
        tps = r["tokens"] / r["train_s"]
        print(f"{label:<20}{r['tokens']:>9}{r['train_s']:>9.2f}{tps:>9.0f}{r['peak_rss_mb']:>13.0f}"
              f"{r['final_loss']:>12.4f}{tps / base_tps:>8.2f}")
    ours = results["lf-assistant"]
    print(f"lf-assistant vs HF Trainer: ratio {ours['tokens'] / ours['train_s'] / base_tps:.2f} "
          f"(trained non-padding tokens per second)")


if __name__ == "__main__":
    main()
