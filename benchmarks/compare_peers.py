"""Side by side on this machine: our engine (padded, packed, ...) vs plain HF Trainer + peft vs LLaMA-Factory.

    python benchmarks/compare_peers.py [--steps 40] [--repeats 2] [--with-llamafactory] [--strategies padded,packed]

Same tiny demo model (lf-tiny-qwen3), same LoRA (r8, alpha 16, dropout 0, all linear layers), fp32, gradient
checkpointing off everywhere (LLaMA-Factory gets disable_gradient_checkpointing: true), same learning rate and
cosine schedule, batch 8 samples per optimizer step, and ONE epoch of exactly steps x 8 samples, so every
contender trains every sample once: the same real tokens, the same number of optimizer steps. "Effective batch"
with packing = the same samples per optimizer step (our packed strategy keeps the padded strategy's steps and
only removes the padding), so the work is identical and the tokens/s compare like with like.

Two datasets are written in alpaca format: "skewed" (answer lengths drawn from a lognormal: many short answers,
a long tail cut at cutoff_len 512, as in real SFT data) and "uniform" (every sample cut to exactly 256 tokens,
where packing can win nothing). Each contender runs in its own process (peak RSS is its own), rounds are
interleaved and the best of ``--repeats`` is kept, because other work on the machine adds noise.

Columns: real (non-padding) input tokens trained, wall time of the training loop, real tokens per second, real
tokens per CPU-second of the loop (steadier than wall time on a shared machine), peak RSS of the process, the
final logged loss, and the tokens/s ratio against the HF baseline.

``--with-llamafactory`` creates (once) a separate venv under .cache/ with `pip install torch==2.13.0 llamafactory`
(torch pinned in the same command so pip keeps the CPU build), removes torchvision/torchaudio (their wheels do
not load against torch 2.13.0+cpu and break transformers) and puts an empty `torchaudio` stub on PYTHONPATH
(LLaMA-Factory 0.9.5 imports it unconditionally). It then runs LLaMA-Factory's `run_exp`, the function
`llamafactory-cli train` calls, with a timing callback. It takes a few minutes the first time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETTINGS = dict(batch=8, lr=1e-4, lora_rank=8, lora_alpha=16, seed=42, logging_steps=5)
DATASETS = {"skewed": dict(cutoff_len=512), "uniform": dict(cutoff_len=256)}
SYSTEM = "You are a helpful assistant."
LF_VENV = REPO / ".cache" / "llamafactory-venv"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------- data
def write_dataset(folder: Path, kind: str, count: int, seed: int = 0) -> str:
    """An alpaca-format file and its dataset_info.json entry in ``folder``; returns the dataset name."""
    words = " ".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "engine/models/assets").glob("*.txt")))
    words = words.split()
    rng = random.Random(seed)

    def text(n: int) -> str:
        start = rng.randrange(len(words) - n - 1)
        return " ".join(words[start:start + n])

    rows = []
    for _ in range(count):
        if kind == "skewed":  # median ~55 words (~100 tokens), long tail past the 512-token cutoff
            answer = max(3, min(900, int(rng.lognormvariate(math.log(55), 0.9))))
        else:  # long enough that every sample is cut to exactly cutoff_len
            answer = 400
        rows.append({"instruction": text(rng.randint(5, 25)), "input": "", "output": text(answer)})
    name = f"bench_{kind}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(rows), encoding="utf-8")
    info_path = folder / "dataset_info.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    info[name] = {"file_name": f"{name}.json"}
    info_path.write_text(json.dumps(info, indent=1))
    return name


# ---------------------------------------------------------------- contenders (each runs in a worker process)
def run_ours(job: dict) -> dict:
    sys.path.insert(0, str(REPO))
    import engine

    strategy = job["contender"].split(":", 1)[1]
    config = engine.load_config({
        "model_name_or_path": job["model"], "dataset": job["dataset"], "dataset_dir": job["data_dir"],
        "template": "qwen", "cutoff_len": job["cutoff_len"], "finetuning_type": "lora",
        "lora_rank": SETTINGS["lora_rank"], "lora_alpha": SETTINGS["lora_alpha"], "lora_dropout": 0.0,
        "lora_target": "all", "per_device_train_batch_size": SETTINGS["batch"], "gradient_accumulation_steps": 1,
        "learning_rate": SETTINGS["lr"], "lr_scheduler_type": "cosine", "logging_steps": SETTINGS["logging_steps"],
        "batching_strategy": strategy, "save_strategy": "no", "plot_loss": False, "seed": SETTINGS["seed"],
        "output_dir": str(Path(job["workdir"]) / "out"),
        # dynamic batching changes how many steps an epoch has; every contender trains exactly one epoch
        **({"num_train_epochs": 1} if strategy == "dynamic" else {"max_steps": job["steps"]}),
    })
    clock: dict[str, tuple[float, float]] = {}

    def on_log(row: dict) -> None:
        if str(row.get("message", "")).startswith("trainable parameters"):
            clock["start"] = (time.perf_counter(), time.process_time())
        if row.get("step") is not None and row.get("step") == row.get("total_steps"):
            clock["end"] = (time.perf_counter(), time.process_time())

    handle = engine.train(config, runs_dir=Path(job["workdir"]) / "runs", on_log=on_log)
    status = handle.status()
    if status.get("state") != "completed":
        raise RuntimeError(f"our run ended {status.get('state')}: {status.get('exit_reason')}")
    losses = [m["loss"] for m in handle.metrics() if m.get("loss") is not None]
    return {"tokens": status["num_input_tokens_seen"], "steps": status["step"], "final_loss": losses[-1] if losses else math.nan,
            "train_s": clock["end"][0] - clock["start"][0], "cpu_s": clock["end"][1] - clock["start"][1]}


def timing_callback():
    """A TrainerCallback that times the training loop (wall and CPU) and keeps the last logged loss."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.marks, self.losses = {}, []

        def on_train_begin(self, args, state, control, **kwargs):
            self.marks["start"] = (time.perf_counter(), time.process_time())

        def on_train_end(self, args, state, control, **kwargs):
            self.marks["end"] = (time.perf_counter(), time.process_time())
            self.state = state

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

        def result(self) -> dict:
            (wall0, cpu0), (wall1, cpu1) = self.marks["start"], self.marks["end"]
            return {"tokens": int(self.state.num_input_tokens_seen), "steps": self.state.global_step,
                    "final_loss": self.losses[-1] if self.losses else math.nan, "train_s": wall1 - wall0, "cpu_s": cpu1 - cpu0}

    return Clock()


def run_hf(job: dict) -> dict:
    sys.path.insert(0, str(REPO))
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer, TrainingArguments

    from engine.data import encode_supervised, load_examples
    from engine.data.templates import get_template

    tokenizer = AutoTokenizer.from_pretrained(job["model"])
    examples = load_examples(job["dataset"], Path(job["data_dir"]))
    samples = encode_supervised(examples, tokenizer, get_template("qwen", tokenizer), job["cutoff_len"])
    model = AutoModelForCausalLM.from_pretrained(job["model"], dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=SETTINGS["lora_rank"], lora_dropout=0.0,
                                             lora_alpha=SETTINGS["lora_alpha"], target_modules="all-linear"))
    args = TrainingArguments(
        output_dir=str(Path(job["workdir"]) / "hf"), per_device_train_batch_size=SETTINGS["batch"],
        learning_rate=SETTINGS["lr"], max_steps=job["steps"], lr_scheduler_type="cosine",
        logging_steps=SETTINGS["logging_steps"], save_strategy="no", report_to="none", use_cpu=True,
        seed=SETTINGS["seed"], disable_tqdm=True, include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0, remove_unused_columns=False)
    clock = timing_callback()
    trainer = Trainer(model=model, args=args, train_dataset=list(samples), callbacks=[clock],
                      data_collator=DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=-100))
    trainer.train()
    return clock.result()


def run_llamafactory(job: dict) -> dict:
    """Runs inside the LLaMA-Factory venv: only its own packages are importable there."""
    from llamafactory.train.tuner import run_exp

    workdir = Path(job["workdir"])
    config = {
        "model_name_or_path": job["model"], "stage": "sft", "do_train": True, "finetuning_type": "lora",
        "lora_rank": SETTINGS["lora_rank"], "lora_alpha": SETTINGS["lora_alpha"], "lora_dropout": 0.0,
        "lora_target": "all", "dataset": job["dataset"], "dataset_dir": job["data_dir"], "template": "qwen",
        "default_system": SYSTEM, "cutoff_len": job["cutoff_len"], "overwrite_cache": True,
        "preprocessing_num_workers": 1, "dataloader_num_workers": 0, "output_dir": str(workdir / "lf"),
        "logging_steps": SETTINGS["logging_steps"], "save_strategy": "no", "plot_loss": False,
        "overwrite_output_dir": True, "report_to": "none", "disable_tqdm": True,
        "per_device_train_batch_size": SETTINGS["batch"], "gradient_accumulation_steps": 1,
        "learning_rate": SETTINGS["lr"], "max_steps": job["steps"], "lr_scheduler_type": "cosine",
        "warmup_ratio": 0.0, "bf16": False, "seed": SETTINGS["seed"], "disable_gradient_checkpointing": True,
        "include_num_input_tokens_seen": "non_padding",
    }
    clock = timing_callback()
    run_exp(config, callbacks=[clock])
    return clock.result()


RUNNERS = {"ours": run_ours, "hf": run_hf, "llamafactory": run_llamafactory}


def worker(job_path: str) -> None:
    job = json.loads(Path(job_path).read_text())
    result = RUNNERS[job["contender"].split(":", 1)[0]](job)
    result["peak_rss_mb"] = peak_rss_mb()
    Path(job["out"]).write_text(json.dumps(result))


# ---------------------------------------------------------------- orchestration
def ensure_llamafactory_venv(venv: Path) -> tuple[str, dict]:
    """The LLaMA-Factory venv's python (created on first use) and the environment it needs."""
    python = venv / "bin" / "python"
    stubs = venv / "lfa_stubs"
    if not python.exists() or subprocess.run([str(python), "-c", "import llamafactory"], capture_output=True,
                                             env={**os.environ, "PYTHONPATH": str(stubs)}).returncode:
        print(f"creating the LLaMA-Factory venv in {venv} (a few minutes) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "torch==2.13.0"], check=True)
        subprocess.run([*pip, "torch==2.13.0", "llamafactory"], check=True)
        subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "torchvision", "torchaudio"], check=True)
    (stubs / "torchaudio").mkdir(parents=True, exist_ok=True)
    (stubs / "torchaudio" / "__init__.py").touch()
    return str(python), {"PYTHONPATH": str(stubs), "DISABLE_VERSION_CHECK": "1"}


def spawn(job: dict, python: str = sys.executable, extra_env: dict | None = None) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix=job["contender"].replace(":", "_") + "-", dir=job["root"]))
    job = {**job, "workdir": str(workdir), "out": str(workdir / "result.json")}
    (workdir / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_HOME": str(Path(job["root"]) / "hf"), "MPLCONFIGDIR": str(Path(job["root"]) / "mpl"),
           **(extra_env or {})}
    proc = subprocess.run([python, __file__, "--worker", str(workdir / "job.json")], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{job['contender']} failed:\n{proc.stderr[-3000:]}")
    return json.loads((workdir / "result.json").read_text())


LABELS = {"hf": "HF Trainer + peft", "llamafactory": "LLaMA-Factory"}


def label(contender: str) -> str:
    kind, _, strategy = contender.partition(":")
    return LABELS.get(kind) or f"lf-assistant {strategy}"


def print_table(kind: str, results: dict[str, dict], cutoff_len: int, steps: int, threads: int) -> None:
    base = results["hf"]
    base_tps, base_cpu = base["tokens"] / base["train_s"], base["tokens"] / base["cpu_s"]
    print(f"\n{kind} lengths: LoRA SFT, lf-tiny-qwen3, {steps} steps x {SETTINGS['batch']} samples (one epoch), "
          f"cutoff {cutoff_len}, fp32 CPU, {threads or 'all'} thread(s), gradient checkpointing off; best of the "
          "repeats. busy = CPU time / (wall x threads)")
    print(f"{'contender':<27}{'tokens':>8}{'steps':>6}{'loop s':>8}{'busy':>6}{'tok/s':>8}{'tok/CPU-s':>10}"
          f"{'peak RSS MB':>12}{'final loss':>11}{'ratio':>7}{'CPU ratio':>10}")
    for contender, r in results.items():
        tps, cps = r["tokens"] / r["train_s"], r["tokens"] / r["cpu_s"]
        busy = r["cpu_s"] / r["train_s"] / (threads or os.cpu_count())  # well under 100%: it waited for a core
        print(f"{label(contender):<27}{r['tokens']:>8}{r['steps']:>6}{r['train_s']:>8.2f}{busy:>6.0%}{tps:>8.0f}"
              f"{cps:>10.0f}{r['peak_rss_mb']:>12.0f}{r['final_loss']:>11.4f}{tps / base_tps:>7.2f}"
              f"{cps / base_cpu:>10.2f}")
    for contender, r in results.items():
        if contender != "hf":
            print(f"[{kind}] {label(contender)} vs HF Trainer: ratio {r['tokens'] / r['train_s'] / base_tps:.2f} "
                  f"(real tokens/s; per CPU-second {r['tokens'] / r['cpu_s'] / base_cpu:.2f})")
    if "ours:packed" in results and "ours:padded" in results:
        packed, padded = results["ours:packed"], results["ours:padded"]
        print(f"[{kind}] lf-assistant packed vs padded: ratio "
              f"{packed['tokens'] / packed['train_s'] / (padded['tokens'] / padded['train_s']):.2f}")
    if "ours:packed" in results and "llamafactory" in results:
        packed, lf = results["ours:packed"], results["llamafactory"]
        print(f"[{kind}] lf-assistant packed vs LLaMA-Factory: ratio "
              f"{packed['tokens'] / packed['train_s'] / (lf['tokens'] / lf['train_s']):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps = one epoch of steps x 8 samples")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved rounds; the best of each is kept")
    parser.add_argument("--strategies", default="padded,packed",
                        help="our batching strategies to run (padded, bucketed, packed, dynamic)")
    parser.add_argument("--datasets", default="skewed,uniform")
    # One thread by default: on a shared 2-core machine two OpenMP threads spin at every barrier while another
    # process holds a core; that made the same run 6x slower (13.1 s vs 2.2 s) and drowned the differences.
    parser.add_argument("--threads", type=int, default=1,
                        help="OMP/MKL threads for every contender (0: torch's default, all cores)")
    parser.add_argument("--with-llamafactory", action="store_true", help="also run LLaMA-Factory (own venv)")
    parser.add_argument("--llamafactory-venv", type=Path, default=LF_VENV)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)

    sys.path.insert(0, str(REPO))
    from engine.models.demo import build_demo_model

    root = Path(tempfile.mkdtemp(prefix="lfa-peers-"))
    model = str(build_demo_model("lf-tiny-qwen3", root / "model"))
    contenders = ["hf", *[f"ours:{s}" for s in args.strategies.split(",")]]
    threads = {"OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)} if args.threads else {}
    runtimes = {c: (sys.executable, threads) for c in contenders}
    if args.with_llamafactory:
        contenders.append("llamafactory")
        python, env = ensure_llamafactory_venv(args.llamafactory_venv)
        runtimes["llamafactory"] = (python, {**env, **threads})
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    for kind in args.datasets.split(","):
        name = write_dataset(root / "data", kind, args.steps * SETTINGS["batch"])
        job = {"model": model, "dataset": name, "data_dir": str(root / "data"), "steps": args.steps,
               "cutoff_len": DATASETS[kind]["cutoff_len"], "root": str(root)}
        best: dict[str, dict] = {}
        for _ in range(args.repeats):
            for contender in contenders:
                python, env = runtimes[contender]
                result = spawn({**job, "contender": contender}, python, env)
                if contender not in best or result["tokens"] / result["train_s"] > \
                        best[contender]["tokens"] / best[contender]["train_s"]:
                    best[contender] = result
        print_table(kind, best, DATASETS[kind]["cutoff_len"], args.steps, args.threads)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
