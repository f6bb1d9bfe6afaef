"""Stage 6: validation — the inference config (shown and confirmed before it is written), test prompts plus held-out
rows of the user's own data, and a batch run of base vs. fine-tuned answers saved in the run folder.

The inference config follows the method: LoRA/QLoRA load the base plus the adapter; Full (and Freeze, whose
output is a whole model) load the output folder and name no adapter. The template is the training template. It
always carries max_new_tokens — from the training answers' lengths, capped — and the sampling settings used, so
`lf-assistant chat infer.yaml --prompts ...` elsewhere answers exactly as the wizard did, in the same time.

Held-out rows: the training run kept `val_size` rows of the user's data out of training and listed them in the
run folder (heldout.jsonl); a few are asked again, with the answer the data gives shown beside the model's.
A pre-training run (pt) is validated by completing text without a template; a reward model (rm) by the scores
its saved model gave the held-out pairs (written by the run: heldout_scores.jsonl) — no chat.
"""

from __future__ import annotations

import shlex

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from assistant.i18n import t
from assistant.wizard.stages import Outcome, refused
from assistant.wizard.stages.train import display_path
from assistant.wizard.state import WizardState
from engine.jsonio import write_text_atomic
from engine.methods import is_adapter
from engine.rundir import RunDir, read_jsonl

STAGE = "validate"
INFER_FILE = "infer.yaml"
PROMPTS_FILE = "prompts.jsonl"
ANSWERS_FILE = "validation.jsonl"
PROGRESS = re.compile(r"progress\s+(\d+)\s*/\s*(\d+)")
# Answers read for their length (a large dataset is sampled by its first rows: enough for a longest answer).
LENGTH_ROWS = 2000
CHARS_PER_TOKEN = 3.0
"""Without a tokenizer file, characters per token (English and code average ~3-4; fewer counts more tokens)."""


def mode(settings: dict) -> str:
    """chat (sft, dpo, kto), completion (pt: text continued without a template) or scores (rm)."""
    if settings.get("scores"):
        return "scores"
    return "completion" if settings.get("completion") else "chat"


# --------------------------------------------------------------------------------------------- infer.yaml
def infer_config(state: WizardState, train_config: dict, *, max_tokens: int, sampling: dict | None = None) -> dict:
    """infer.yaml's content for this run, from the engine (same template as training), with the generation
    settings validation uses written out."""
    from engine.inference import make_infer_config

    base = train_config["model_name_or_path"]
    output_dir = state.output_dir or train_config["output_dir"]
    config = dict(make_infer_config(output_dir, method=state.method or "lora", base_model=base,
                                    template=train_config["template"],
                                    trust_remote_code=bool(train_config.get("trust_remote_code"))))
    config.update(max_new_tokens=int(max_tokens), **(sampling or {"do_sample": False}))
    return config


def answer_lengths(train_config: dict, model_path: str | None) -> list[int]:
    """Token counts of the training answers (the chosen ones for pairs; up to LENGTH_ROWS rows per dataset),
    counted with the model's tokenizer.json when there is one (the tokenizers library: no torch)."""
    from engine.data import load_examples
    from engine.errors import EngineError

    try:
        examples = load_examples(train_config["dataset"], Path(train_config["dataset_dir"]),
                                 max_samples=min(train_config.get("max_samples") or LENGTH_ROWS, LENGTH_ROWS))
    except EngineError:
        return []
    answers = [_answer_text(example) for example in examples]
    answers = [text for text in answers if text]
    count = _counter(model_path)
    return [count(text) for text in answers]


def _answer_text(example: dict) -> str:
    if isinstance(example.get("chosen"), str):
        return example["chosen"]
    replies = [m.get("content", "") for m in example.get("messages", []) if m.get("role") == "assistant"]
    return replies[-1] if replies else ""


def _counter(model_path: str | None):
    tokenizer_file = Path(model_path or "") / "tokenizer.json"
    if model_path and tokenizer_file.is_file():
        try:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(tokenizer_file))
            return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)
        except Exception:  # noqa: BLE001 - an unreadable tokenizer file: count by characters
            pass
    return lambda text: math.ceil(len(text) / CHARS_PER_TOKEN)


def max_new_tokens(lengths: list[int], settings: dict) -> int:
    """The longest training answer plus a quarter (room to say it a little differently), at least `min_new_tokens`
    and at most `max_new_tokens` (the skill's cap)."""
    cap = int(settings.get("max_new_tokens") or 256)
    floor = min(int(settings.get("min_new_tokens") or 32), cap)
    if not lengths:
        return cap
    return max(floor, min(cap, math.ceil(max(lengths) * 1.25)))


def check_infer_config(state: WizardState, config: dict, template: str) -> list[str]:
    """The guard the table is confirmed against: adapter only for LoRA/QLoRA, the training template."""
    problems = []
    has_adapter = bool(config.get("adapter_name_or_path"))
    if is_adapter(state.method) != has_adapter:
        problems.append(t("validate.adapter_mismatch", method=state.method))
    if config.get("template") != template:
        problems.append(t("validate.template_mismatch", infer=config.get("template"), train=template))
    from engine.errors import EngineError
    from engine.inference import check_infer_config, load_infer_config

    try:
        problems += check_infer_config(load_infer_config(config))
    except EngineError as exc:
        problems.append(str(exc))
    return problems


# --------------------------------------------------------------------------------------------- prompts
def set_prompts(state: WizardState, text: str) -> Outcome:
    """One prompt per non-empty line."""
    prompts = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not prompts:
        return refused(t("validate.no_prompts"))
    return Outcome(state.replace(prompts=prompts))


def held_out_rows(run_folder: Path, count: int) -> list[dict]:
    """The first `count` rows the training run held out (heldout.jsonl), each {messages, system, source} with its
    reference answer as the last message; rows that do not end with one are skipped."""
    if count <= 0:
        return []
    rows = [row for row in read_jsonl(RunDir(Path(run_folder)).held_out_path)
            if isinstance(row.get("messages"), list) and row["messages"]
            and row["messages"][-1].get("role") == "assistant"]
    return rows[:count]


def write_prompts(run_folder: Path, prompts: list[str], held_out: list[dict] | None = None) -> Path:
    """prompts.jsonl: the typed prompts, then the held-out rows (their answer last: the engine shows it as the
    reference beside the model's)."""
    lines = [json.dumps({"prompt": prompt.replace("\n", " ")}, ensure_ascii=False) for prompt in prompts]
    for row in held_out or []:
        messages = [{"role": m["role"], "content": m["content"]} for m in row["messages"]]
        lines.append(json.dumps({"messages": messages, "source": row.get("source")}, ensure_ascii=False))
    path = Path(run_folder) / PROMPTS_FILE
    write_text_atomic(path, "".join(line + "\n" for line in lines))
    return path


# --------------------------------------------------------------------------------------------- commands
def chat_command(run_folder: Path, device: dict | None = None, *, here: bool = True) -> str:
    """The interactive chat, pinned to the run's device like everything else. ``here``: as a command that works in
    a fresh shell on this machine (the venv need not be active); otherwise as typed where lf-assistant is installed."""
    from assistant.command import self_command
    from assistant.wizard.stages.gpu import env_prefix

    program = self_command() if here else "lf-assistant"
    return f"{env_prefix(device)}{program} chat {shlex.quote(display_path(Path(run_folder) / INFER_FILE))}"


def validate_command(run_folder: Path, *, completion: bool = False) -> list[str]:
    """Batch inference as its own process (torch stays out of the TUI), base and tuned answers side by side;
    the generation settings are infer.yaml's own."""
    folder = Path(run_folder)
    command = [sys.executable, "-m", "engine.inference.validate", "--infer", str(folder / INFER_FILE),
               "--prompts", str(folder / PROMPTS_FILE), "--out", str(folder / ANSWERS_FILE), "--base"]
    return command + (["--completion"] if completion else [])


def pipe_command(run_folder: Path, *, completion: bool = False) -> list[str]:
    """The chat screen's model process: tuned and base loaded once, one JSON line per turn."""
    command = [sys.executable, "-m", "engine.inference.pipe", "--infer", str(Path(run_folder) / INFER_FILE),
               "--base"]
    return command + (["--completion"] if completion else [])


def batch_command_text(state: WizardState, run_folder: Path, *, completion: bool = False) -> str:
    """The validation as the user types it elsewhere: device pinning, then `lf-assistant chat --prompts`."""
    from assistant.wizard.stages.train import elsewhere_command

    folder = Path(run_folder)
    return elsewhere_command(state, "chat", folder / INFER_FILE, "--prompts", folder / PROMPTS_FILE, "--out",
                             folder / ANSWERS_FILE, "--base", *(["--completion"] if completion else []))


def parse_progress(line: str) -> tuple[int, int] | None:
    match = PROGRESS.search(line)
    return (int(match.group(1)), int(match.group(2))) if match else None


def read_answers(run_folder: Path) -> list[dict[str, Any]]:
    """The saved rows {prompt, base, tuned, reference?}."""
    return read_jsonl(Path(run_folder) / ANSWERS_FILE)


def read_scores(run_folder: Path) -> list[dict[str, Any]]:
    """A reward model's held-out pairs with their scores (written by the training run)."""
    return read_jsonl(RunDir(Path(run_folder)).held_out_scores_path)


def score_summary(rows: list[dict]) -> tuple[int, int]:
    """(pairs where the chosen answer scored higher, pairs)."""
    right = sum(1 for row in rows if row.get("chosen_score", 0) > row.get("rejected_score", 0))
    return right, len(rows)
