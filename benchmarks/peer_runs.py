"""The contenders of compare_peers.py, each run in its own process: ``python peer_runs.py JOB.json``.

A job names the contender (``hf``, ``llamafactory`` or ``ours:<strategy>``), the model folder, the dataset and
the number of steps; the worker trains, then writes the training loop's wall and CPU seconds, the real input
tokens, the final logged loss and its own peak RSS (getrusage of this process) next to the job. The
LLaMA-Factory worker runs with that venv's python, where only its packages (and this file) are importable.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETTINGS = dict(batch=8, lr=1e-4, lora_rank=8, lora_alpha=16, seed=42, logging_steps=5)
DATASETS = {"skewed": dict(cutoff_len=512), "uniform": dict(cutoff_len=256)}
TEMPLATE = "qwen"  # ChatML; both the demo model and SmolLM2 speak it, and LLaMA-Factory has it by this name
SYSTEM = "You are a helpful assistant."


def log_every(steps: int, most: int = SETTINGS["logging_steps"]) -> int:
    """The logging interval: the largest divisor of ``steps`` up to ``most``, so that every contender logs at the
    last step and its final loss is the mean of the same steps. (With ``min(most, steps)``, 8 steps logged every
    5: HF Trainer's last loss was the mean of steps 1-5, ours of steps 6-8.)"""
    return max(n for n in range(1, max(1, min(most, steps)) + 1) if steps % n == 0)


def strategy_list(text: str) -> list[str]:
    """--strategy: one batching strategy or several, comma-separated; a name the engine does not have is refused,
    named, before anything is built or measured."""
    from engine.training.batching import BATCHERS

    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in BATCHERS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"{', '.join(unknown) or 'no strategy'} is not a batching strategy; use "
                                         f"one or more of {', '.join(BATCHERS)}, comma-separated")
    return names


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


def encoded_samples(model: str, dataset: str, data_dir: str, cutoff_len: int) -> list[dict]:
    """The samples as our encoder makes them (what HF Trainer gets, and what the FLOP count reads)."""
    sys.path.insert(0, str(REPO))
    from transformers import AutoTokenizer

    from engine.data import encode_supervised, load_examples
    from engine.data.templates import get_template

    tokenizer = AutoTokenizer.from_pretrained(model)
    examples = load_examples(dataset, Path(data_dir))
    return list(encode_supervised(examples, tokenizer, get_template(TEMPLATE, tokenizer), cutoff_len))


# ---------------------------------------------------------------- contenders
def run_ours(job: dict) -> dict:
    sys.path.insert(0, str(REPO))
    import engine

    strategy = job["contender"].split(":", 1)[1]
    config = engine.load_config({
        "model_name_or_path": job["model"], "dataset": job["dataset"], "dataset_dir": job["data_dir"],
        "template": TEMPLATE, "cutoff_len": job["cutoff_len"], "finetuning_type": "lora",
        "lora_rank": SETTINGS["lora_rank"], "lora_alpha": SETTINGS["lora_alpha"], "lora_dropout": 0.0,
        "lora_target": "all", "per_device_train_batch_size": SETTINGS["batch"], "gradient_accumulation_steps": 1,
        "learning_rate": SETTINGS["lr"], "lr_scheduler_type": "cosine", "logging_steps": log_every(job["steps"]),
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
    if status.state != "completed":
        raise RuntimeError(f"our run ended {status.state}: {status.exit_reason}")
    losses = [m["loss"] for m in handle.metrics() if m.get("loss") is not None]
    return {"tokens": status.num_input_tokens_seen, "steps": status.step,
            "final_loss": losses[-1] if losses else math.nan,
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
                    "final_loss": self.losses[-1] if self.losses else math.nan, "train_s": wall1 - wall0,
                    "cpu_s": cpu1 - cpu0}

    return Clock()


def run_hf(job: dict) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer, TrainingArguments

    tokenizer = AutoTokenizer.from_pretrained(job["model"])
    samples = encoded_samples(job["model"], job["dataset"], job["data_dir"], job["cutoff_len"])
    model = AutoModelForCausalLM.from_pretrained(job["model"], dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=SETTINGS["lora_rank"], lora_dropout=0.0,
                                             lora_alpha=SETTINGS["lora_alpha"], target_modules="all-linear"))
    args = TrainingArguments(
        output_dir=str(Path(job["workdir"]) / "hf"), per_device_train_batch_size=SETTINGS["batch"],
        learning_rate=SETTINGS["lr"], max_steps=job["steps"], lr_scheduler_type="cosine",
        logging_steps=log_every(job["steps"]), save_strategy="no", report_to="none", use_cpu=True,
        seed=SETTINGS["seed"], disable_tqdm=True, include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0, remove_unused_columns=False)
    clock = timing_callback()
    trainer = Trainer(model=model, args=args, train_dataset=samples, callbacks=[clock],
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
        "lora_target": "all", "dataset": job["dataset"], "dataset_dir": job["data_dir"], "template": TEMPLATE,
        "default_system": SYSTEM, "cutoff_len": job["cutoff_len"], "overwrite_cache": True,
        "preprocessing_num_workers": 1, "dataloader_num_workers": 0, "output_dir": str(workdir / "lf"),
        "logging_steps": log_every(job["steps"]), "save_strategy": "no", "plot_loss": False,
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


# ---------------------------------------------------------------- LLaMA-Factory's venv
def llamafactory_runtime(venv: Path, *, create: bool) -> tuple[str, dict]:
    """The LLaMA-Factory venv's python and the environment it needs; ``create``: build the venv when it is
    missing (a few minutes: torch pinned to 2.13.0 in the same pip command so that the CPU build stays,
    torchvision/torchaudio removed because their wheels break transformers against that torch, and an empty
    ``torchaudio`` stub on PYTHONPATH because LLaMA-Factory 0.9.5 imports it unconditionally)."""
    python = venv / "bin" / "python"
    stubs = venv / "lfa_stubs"
    env = {"PYTHONPATH": str(stubs), "DISABLE_VERSION_CHECK": "1"}
    if not python.exists() or subprocess.run([str(python), "-c", "import llamafactory"], capture_output=True,
                                             env={**os.environ, **env}).returncode:
        if not create:
            raise SystemExit(f"No working LLaMA-Factory venv at {venv}; pass --llamafactory-venv PATH (or set "
                             "LFA_LLAMAFACTORY_VENV), or add --create-llamafactory-venv to build one there.")
        print(f"creating the LLaMA-Factory venv in {venv} (a few minutes) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "torch==2.13.0"], check=True)
        subprocess.run([*pip, "torch==2.13.0", "llamafactory"], check=True)
        subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "torchvision", "torchaudio"], check=True)
    (stubs / "torchaudio").mkdir(parents=True, exist_ok=True)
    (stubs / "torchaudio" / "__init__.py").touch()
    return str(python), env


if __name__ == "__main__":
    worker(sys.argv[1])
