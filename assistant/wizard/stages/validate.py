"""Stage 6: validation — the inference config (shown and confirmed before it is written), test prompts, and a
batch run of base vs. fine-tuned answers saved in the run folder.

The inference config follows the method: LoRA/QLoRA load the base plus the adapter; Full (and Freeze, whose
output is a whole model) load the output folder and name no adapter. The template is the training template.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from assistant.i18n import t
from assistant.wizard.stages import Outcome, refused
from assistant.wizard.stages.train import display_path
from assistant.wizard.state import WizardState
from engine.jsonio import write_text_atomic
from engine.rundir import read_jsonl
from engine.methods import is_adapter

STAGE = "validate"
INFER_FILE = "infer.yaml"
PROMPTS_FILE = "prompts.txt"
ANSWERS_FILE = "validation.jsonl"
PROGRESS = re.compile(r"progress\s+(\d+)\s*/\s*(\d+)")


def infer_config(state: WizardState, train_config: dict) -> dict:
    """infer.yaml's content for this run, from the engine (same template as training)."""
    from engine.inference import make_infer_config

    base = train_config["model_name_or_path"]
    output_dir = state.output_dir or train_config["output_dir"]
    return dict(make_infer_config(output_dir, method=state.method or "lora", base_model=base,
                                  template=train_config["template"],
                                  trust_remote_code=bool(train_config.get("trust_remote_code"))))


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


def chat_command(run_folder: Path, device: dict | None = None) -> str:
    """The interactive chat, pinned to the run's device like everything else."""
    from assistant.wizard.stages.gpu import env_prefix

    return f"{env_prefix(device)}lf-assistant chat {display_path(Path(run_folder) / INFER_FILE)}"


def set_prompts(state: WizardState, text: str) -> Outcome:
    """One prompt per non-empty line."""
    prompts = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not prompts:
        return refused(t("validate.no_prompts"))
    return Outcome(state.replace(prompts=prompts))


def write_prompts(run_folder: Path, prompts: list[str]) -> Path:
    path = Path(run_folder) / PROMPTS_FILE
    write_text_atomic(path, "".join(p.replace("\n", " ") + "\n" for p in prompts))
    return path


def max_new_tokens(state: WizardState, settings: dict) -> int:
    key = "demo_max_new_tokens" if state.family == "demo" else "max_new_tokens"
    return int(settings.get(key) or settings.get("max_new_tokens") or 256)


def validate_command(run_folder: Path, max_tokens: int | None = None) -> list[str]:
    """Batch inference as its own process (torch stays out of the TUI), base and tuned answers side by side."""
    folder = Path(run_folder)
    command = [sys.executable, "-m", "engine.inference.validate", "--infer", str(folder / INFER_FILE),
               "--prompts", str(folder / PROMPTS_FILE), "--out", str(folder / ANSWERS_FILE), "--base"]
    return command + ([f"max_new_tokens={max_tokens}"] if max_tokens else [])


def batch_command_text(state: WizardState, run_folder: Path, max_tokens: int) -> str:
    """The validation as the user types it elsewhere: device pinning, then `lf-assistant chat --prompts`."""
    from assistant.wizard.stages.gpu import env_prefix

    folder = Path(run_folder)
    return (f"{env_prefix(state.device)}lf-assistant chat {display_path(folder / INFER_FILE)} "
            f"max_new_tokens={max_tokens} --prompts {display_path(folder / PROMPTS_FILE)} "
            f"--out {display_path(folder / ANSWERS_FILE)} --base")


def parse_progress(line: str) -> tuple[int, int] | None:
    match = PROGRESS.search(line)
    return (int(match.group(1)), int(match.group(2))) if match else None


def read_answers(run_folder: Path) -> list[dict[str, Any]]:
    """The saved rows {prompt, base, tuned}."""
    return read_jsonl(Path(run_folder) / ANSWERS_FILE)
