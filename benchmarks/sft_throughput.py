"""SFT throughput, side by side in one run: our engine vs a plain Hugging Face Trainer + peft baseline.

    python benchmarks/sft_throughput.py [--model NAME_OR_PATH] [--steps 50] [--dataset alpaca_demo] [--repeats 2]
        [--threads N] [--strategy padded[,packed]] [--device cpu|cuda] [--bf16] [--kernels auto] [--json OUT]

Same model (default the tiny demo model; a folder or a downloaded registry id, see bench_models.py), same
encoded samples, same LoRA settings, batch, steps and learning rate. Each contender runs in its own process so
peak RSS is its own; rounds are interleaved and the best of ``--repeats`` is kept. Prints real (non-padding)
input tokens per second, the ratio to HF Trainer, the model FLOP/s those tokens need (benchmarks/flops.py) and
their share of the device's peak: a matmul in the training dtype (bf16 with ``--bf16``, on a GPU or a CPU with bf16
units), on CPU at the same thread count, measured in the same run. On a GPU that share is the MFU.

``--strategy padded,packed`` runs our engine once per batching strategy, in the same interleaved rounds (packed
against padded batching measured side by side, e.g. on a GPU where it has not been measured yet).
``--kernels auto`` adds a row for our engine with ``kernel_config: auto`` (the Triton kernels on a GPU), with the
first strategy.
If LLaMA-Factory is installed (``llamafactory-cli`` on PATH, or LFA_LLAMAFACTORY_CLI=/path/to/llamafactory-cli),
it is run once as a third column on an equivalent YAML (gradient checkpointing off, as in the other two).
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
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

SETTINGS = dict(cutoff_len=256, max_samples=400, batch=4, grad_accum=1, lr=1e-4, lora_rank=8, lora_alpha=16, seed=42)
TEMPLATE = "qwen"


def log_every(steps: int) -> int:
    """About every 10 steps, and always at the last one (peer_runs.log_every)."""
    from peer_runs import log_every as every

    return every(steps, 10)


def encoded_samples(model_dir: str, dataset: str):
    from transformers import AutoTokenizer

    from engine.data import encode_supervised, load_examples
    from engine.data.templates import get_template

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    examples = load_examples(dataset, REPO / "data", max_samples=SETTINGS["max_samples"])
    return tokenizer, list(encode_supervised(examples, tokenizer, get_template(TEMPLATE, tokenizer),
                                             SETTINGS["cutoff_len"]))


def run_ours(job: dict) -> dict:
    import engine

    config = engine.load_config({
        "model_name_or_path": job["model"], "dataset": job["dataset"], "dataset_dir": str(REPO / "data"),
        "template": TEMPLATE, "cutoff_len": SETTINGS["cutoff_len"], "max_samples": SETTINGS["max_samples"],
        "finetuning_type": "lora", "lora_rank": SETTINGS["lora_rank"], "lora_alpha": SETTINGS["lora_alpha"],
        "lora_dropout": 0.0, "lora_target": "all", "per_device_train_batch_size": SETTINGS["batch"],
        "gradient_accumulation_steps": SETTINGS["grad_accum"], "learning_rate": SETTINGS["lr"],
        "max_steps": job["steps"], "lr_scheduler_type": "cosine", "logging_steps": log_every(job["steps"]),
        "save_strategy": "no", "plot_loss": False, "seed": SETTINGS["seed"],
        "output_dir": str(Path(job["workdir"]) / "ours"),
        "batching_strategy": job["strategy"], "bf16": job["bf16"],
        **({"kernel_config": job["kernels"]} if job.get("kernels") else {}),
    })
    status = engine.train(config, runs_dir=Path(job["workdir"]) / "runs").status()
    if status.state != "completed":
        raise RuntimeError(f"our run ended {status.state}: {status.exit_reason}")
    return {"tokens": status.num_input_tokens_seen, "train_s": status.train_runtime_s,
            "final_loss": status.final_loss}


def run_hf(job: dict) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, DataCollatorForSeq2Seq, Trainer, TrainingArguments

    tokenizer, samples = encoded_samples(job["model"], job["dataset"])
    cpu = job["device"] == "cpu"
    # fp32 master weights; with --bf16 the Trainer autocasts (our engine loads the weights in bf16 and does too)
    model = AutoModelForCausalLM.from_pretrained(job["model"], dtype=torch.float32).to(job["device"])
    model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=SETTINGS["lora_rank"], lora_dropout=0.0,
                                             lora_alpha=SETTINGS["lora_alpha"], target_modules="all-linear"))
    args = TrainingArguments(
        output_dir=str(Path(job["workdir"]) / "hf"), per_device_train_batch_size=SETTINGS["batch"],
        gradient_accumulation_steps=SETTINGS["grad_accum"], learning_rate=SETTINGS["lr"], max_steps=job["steps"],
        lr_scheduler_type="cosine", logging_steps=log_every(job["steps"]), save_strategy="no", report_to="none",
        use_cpu=cpu, bf16=bool(job["bf16"]), seed=SETTINGS["seed"], disable_tqdm=True,
        include_num_input_tokens_seen="non_padding", dataloader_num_workers=0, remove_unused_columns=False)
    trainer = Trainer(model=model, args=args, train_dataset=samples,
                      data_collator=DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=-100))
    result = trainer.train()
    return {"tokens": int(trainer.state.num_input_tokens_seen), "train_s": result.metrics["train_runtime"],
            "final_loss": [h["loss"] for h in trainer.state.log_history if "loss" in h][-1]}


def run_llamafactory(cli: str, model_dir: str, dataset: str, steps: int, workdir: Path) -> dict:
    config = {
        "model_name_or_path": model_dir, "stage": "sft", "do_train": True, "finetuning_type": "lora",
        "lora_rank": SETTINGS["lora_rank"], "lora_alpha": SETTINGS["lora_alpha"], "lora_dropout": 0.0,
        "lora_target": "all", "dataset": dataset, "dataset_dir": str(REPO / "data"), "template": TEMPLATE,
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
    proc = subprocess.run([cli, "train", str(path)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    results = json.loads((workdir / "lf" / "train_results.json").read_text())
    log = [json.loads(line) for line in (workdir / "lf" / "trainer_log.jsonl").read_text().splitlines()]
    tokens = results.get("effective_tokens_per_sec", 0) * results["train_runtime"]
    return {"tokens": int(tokens), "train_s": results["train_runtime"], "peak_rss_mb": float("nan"),
            "final_loss": [row["loss"] for row in log if "loss" in row][-1]}


def worker(job_path: str) -> None:
    job = json.loads(Path(job_path).read_text())
    result = {"ours": run_ours, "hf": run_hf}[job["kind"]](job)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if job["device"] != "cpu":
        import torch

        result["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    Path(job["out"]).write_text(json.dumps(result))


def spawn(job: dict, workdir: Path, threads: int) -> dict:
    rundir = Path(tempfile.mkdtemp(prefix=job["kind"] + "-", dir=workdir))  # each run its own output folder
    job = {**job, "workdir": str(rundir), "out": str(rundir / "result.json")}
    path = rundir / "job.json"
    path.write_text(json.dumps(job))
    # The same thread count for every contender. On a shared 2-core machine, 2 OpenMP threads per process can
    # be several times slower than 1 when anything else runs, which would measure the neighbours, not the code.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads)}
    if job["device"] == "cpu":  # our engine takes a GPU whenever it sees one: hide it so both stay on the CPU
        env["CUDA_VISIBLE_DEVICES"] = ""
    subprocess.run([sys.executable, __file__, "--worker", str(path)], check=True, env=env)
    return json.loads(Path(job["out"]).read_text())


def tps(result: dict) -> float:
    return result["tokens"] / result["train_s"]


def device_peak(device: str, bf16: bool, threads: int) -> tuple[float, str]:
    """(FLOP/s, what was measured): the device's matmul peak in the training dtype, measured now."""
    from flops import device_matmul_peak, matmul_peak

    if device == "cpu":
        dtype = "bfloat16" if bf16 else "float32"
        return matmul_peak(threads, dtype=dtype), f"{'bf16' if bf16 else 'fp32'} matmul at {threads} thread(s)"
    return device_matmul_peak(device, "bfloat16" if bf16 else "float32"), f"{'bf16' if bf16 else 'fp32'} matmul"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="lf-tiny-qwen3", help="a model folder, a downloaded registry id, "
                        "or a demo model name")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--dataset", default="alpaca_demo")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved rounds; the best of each is kept")
    parser.add_argument("--threads", type=int, default=1, help="OpenMP/torch threads per contender (same for all)")
    from peer_runs import strategy_list

    parser.add_argument("--strategy", default="padded", type=strategy_list, help="our batching strategy "
                        "(padded, packed, ...), or several, comma-separated: one row each")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (a GPU: both contenders train there)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (a GPU, or a CPU with bf16 units); "
                        "fp32 without")
    parser.add_argument("--kernels", help="also run ours with this kernel_config (e.g. auto)")
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser.parse_args()


def check_device(args: argparse.Namespace) -> None:
    """Refuse, with what to do, a device this machine lacks, before anything is built or measured."""
    if args.device == "cpu":
        from engine.devices import cpu_bf16_units

        if args.bf16 and not cpu_bf16_units():  # our engine would train in fp32 there, the Trainer in slow bf16
            raise SystemExit("--bf16 on the CPU needs bf16 units (AMX-BF16 or AVX512-BF16), which this CPU lacks; "
                             "leave out --bf16 (fp32), or run with --device cuda on a GPU.")
        return
    import torch

    if not args.device.startswith("cuda"):
        raise SystemExit(f"--device {args.device}: use cpu or cuda.")
    if not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device} needs a CUDA GPU and torch sees none here; run on the CPU with "
                         "--device cpu (fp32), or run this on a machine with a GPU.")


def main() -> None:
    args = parse_args()
    if args.worker:
        return worker(args.worker)
    check_device(args)
    workdir = Path(tempfile.mkdtemp(prefix="lfa-bench-"))
    try:
        measure(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def measure(args: argparse.Namespace, workdir: Path) -> None:
    from bench_models import resolve_bench_model
    from flops import ModelShape, dataset_flops

    model, model_name = resolve_bench_model(args.model, workdir)
    _, samples = encoded_samples(str(model), args.dataset)
    flops, tokens = dataset_flops(ModelShape.from_folder(model), samples, lora_rank=SETTINGS["lora_rank"])
    base = {"model": str(model), "dataset": args.dataset, "steps": args.steps, "strategy": args.strategy[0],
            "device": args.device, "bf16": args.bf16}
    contenders = {"HF Trainer + peft": {"kind": "hf"}}
    contenders.update({f"lf-assistant {name}": {"kind": "ours", "strategy": name} for name in args.strategy})
    if args.kernels:
        label = f"lf-assistant {args.strategy[0]}, kernels {args.kernels}"
        contenders[label] = {"kind": "ours", "kernels": args.kernels}
    results: dict[str, dict] = {}
    peak, peak_what = 0.0, ""
    for _ in range(args.repeats):
        measured, peak_what = device_peak(args.device, args.bf16, args.threads)
        peak = max(peak, measured)
        for label, extra in contenders.items():
            run = spawn({**base, **extra}, workdir, args.threads)
            if label not in results or tps(run) > tps(results[label]):
                results[label] = run
    cli = os.environ.get("LFA_LLAMAFACTORY_CLI") or shutil.which("llamafactory-cli")
    if cli and args.device == "cpu":
        try:
            results["LLaMA-Factory"] = run_llamafactory(cli, str(model), args.dataset, args.steps, workdir)
        except Exception as exc:  # noqa: BLE001 - the peer is optional; say why it is missing
            print(f"LLaMA-Factory run failed: {exc}")
    info = {"model": model_name, "flops_per_token": flops / tokens, "peak_flops": peak, "peak": peak_what}
    print_table(results, args, info)
    if args.json:
        args.json.write_text(json.dumps({"settings": {**vars(args), "json": str(args.json)}, **info,
                                         "results": results}, indent=1, default=str))


def print_table(results: dict[str, dict], args, info: dict) -> None:
    base_tps = tps(results["HF Trainer + peft"])
    precision = "bf16" if args.bf16 else "fp32"
    where = f"{args.threads} thread(s)" if args.device == "cpu" else args.device
    header = (f"LoRA SFT on {info['model']}, {args.dataset}, {args.steps} steps, batch {SETTINGS['batch']}, cutoff "
              f"{SETTINGS['cutoff_len']}, {precision} on {args.device} ({where}), gradient checkpointing off, best "
              f"of {args.repeats}; {info['flops_per_token'] / 1e6:.0f} M model FLOPs per token; peak = "
              f"{info['peak']}: {info['peak_flops'] / 1e9:.1f} GFLOP/s")
    print("\n" + textwrap.fill(header, 80))
    memory = "GPU MB" if args.device != "cpu" else "RSS MB"
    print(f"{'contender':<33}{'tok/s':>9}{'ratio':>7}{'GFLOP/s':>9}{'peak':>6}{memory:>8}{'loss':>8}")
    for label, r in results.items():
        achieved = tps(r) * info["flops_per_token"]
        used = r.get("peak_gpu_mb", r["peak_rss_mb"])
        print(f"{label:<33}{tps(r):>9.0f}{tps(r) / base_tps:>7.2f}{achieved / 1e9:>9.1f}"
              f"{achieved / info['peak_flops']:>6.0%}{used:>8.0f}{r['final_loss']:>8.4f}")
    for label, r in results.items():
        if label != "HF Trainer + peft":
            print(f"{label} vs HF Trainer: ratio {tps(r) / base_tps:.2f} (trained non-padding tokens per second)")
    if "lf-assistant packed" in results and "lf-assistant padded" in results:
        ratio = tps(results["lf-assistant packed"]) / tps(results["lf-assistant padded"])
        print(f"lf-assistant packed vs padded: ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
