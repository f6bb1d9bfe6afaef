"""The `--json` output of every read command: each document's fields declared once, here.

Commands build their documents with `document(name, values)`, which keeps exactly the declared fields in the
declared order (a field the source lacks is null), so the output stays stable when the engine adds keys.
docs/cli-json.md is generated from these declarations (`python -m assistant.cli.jsonout > docs/cli-json.md`)
and a test keeps the two identical.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

import typer


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    meaning: str


def _fields(*rows: tuple[str, str, str]) -> tuple[Field, ...]:
    return tuple(Field(*row) for row in rows)


RUN = _fields(
    ("run_id", "string", "The run folder's name; every command that takes RUN_ID accepts it (or a unique prefix)."),
    ("run_dir", "string", "Absolute path of the run folder (lf_runs/<run_id>)."),
    ("model", "string|null", "model_name_or_path as the config gave it."),
    ("method", "string|null", "lora, qlora, full or freeze."),
    ("stage", "string", "sft or dpo."),
    ("state", "string", "pending, running, completed, failed, stopped; unknown for a wizard session that has not "
                        "trained yet (wizard_stage says where it was left)."),
    ("wizard_stage", "string|null", "For a wizard session that has not trained yet: the stage it was left at (data, "
                                    "model, gpu, config, ...), where `lf-assistant --resume RUN_ID` reopens it; "
                                    "null otherwise."),
    ("step", "integer", "Optimizer steps done."),
    ("total_steps", "integer|null", "Steps planned (null before training has started)."),
    ("final_loss", "number|null", "The last logged training loss."),
    ("started_at", "number|null", "Unix time training started."),
    ("output_dir", "string|null", "Where checkpoints and the trained adapter or model go."),
)

STATUS = _fields(
    ("run_id", "string", "The run folder's name."),
    ("run_dir", "string", "Absolute path of the run folder."),
    ("state", "string", "pending, running, completed, failed or stopped (a dead `running` process reads failed)."),
    ("finished", "boolean", "true once state is completed, failed or stopped: the only sign that training ended."),
    ("step", "integer", "Optimizer steps done."),
    ("total_steps", "integer|null", "Steps planned."),
    ("loss", "number|null", "The latest logged training loss."),
    ("final_loss", "number|null", "The last loss, once the run completed."),
    ("final_metrics", "object", "A stage's own closing figures (DPO: rewards/accuracies, rewards/margins; RM: "
     "accuracy, and heldout_accuracy, or train_pairs_accuracy without held-out pairs; KTO: rewards/margins, kl)."),
    ("elapsed_s", "number|null", "Seconds of training so far, every attempt together (a resumed run counts the "
     "interrupted ones)."),
    ("attempt_elapsed_s", "number|null", "Seconds of training of the current attempt alone (since its resume)."),
    ("eta_s", "number|null", "Estimated seconds left."),
    ("resumes", "array of object", "Each resume from a checkpoint, oldest first: from_step (the checkpoint's step), "
     "reached_step (the last step the interrupted attempt recorded, or null when not known) and at (Unix time); "
     "the steps between the two were trained again."),
    ("pid", "integer|null", "The training process (torchrun for several processes); verified by start time and "
     "host before anything signals it."),
    ("model", "string|null", "model_name_or_path as the config gave it."),
    ("method", "string|null", "lora, qlora, full or freeze."),
    ("stage", "string|null", "sft, pt, rm, dpo or kto."),
    ("template", "string|null", "The chat template training used (use the same one to chat and export)."),
    ("output_dir", "string|null", "Checkpoints and the trained adapter (LoRA) or model (full, freeze)."),
    ("started_at", "number|null", "Unix time training started."),
    ("finished_at", "number|null", "Unix time it ended."),
    ("exit_reason", "string|null", "Why it ended: completed, or the error / stop reason."),
    ("last_checkpoint", "string|null", "Newest complete checkpoint (resume-train continues from it)."),
    ("loss_plot", "string|null", "training_loss.png, once written."),
    ("notes", "array of string", "Notes the engine recorded (e.g. bf16 trained as fp32 on a CPU)."),
    ("log_path", "string", "train.log: the training output."),
    ("metrics_path", "string", "metrics.jsonl: one JSON object per logging step (step, loss, learning_rate, ...)."),
)

MODEL = _fields(
    ("id", "string", "Registry id (a hub id, or a demo model name)."),
    ("family", "string", "Model family (decides the template and the example configs)."),
    ("params_b", "number", "Parameters, in billions."),
    ("template", "string", "Chat template to train and chat with."),
    ("instruct", "boolean", "true for instruct/chat models, false for base models."),
    ("hf_id", "string", "Hugging Face id (empty when there is none)."),
    ("ms_id", "string", "ModelScope id (empty when there is none)."),
    ("local", "string|null", "With --local: complete, partial or absent; null without --local."),
)

MODEL_CHECK = _fields(
    ("model", "string", "What was asked for."),
    ("found", "boolean", "A folder for it exists on this machine."),
    ("path", "string|null", "The folder checked."),
    ("complete", "boolean", "Every weight file is there, whole (no partial download)."),
    ("where", "string|null", "Where it was found: local (a path), models_dir, recorded (a folder `models download` "
     "wrote, recorded in the user's cache: ~/.cache/lf-assistant/downloads.json), hf_cache or modelscope_cache."),
    ("size_bytes", "integer", "Bytes on disk."),
    ("expected_bytes", "integer|null", "Bytes the weights should take."),
    ("problems", "array of string", "What is missing or broken; empty when complete."),
    ("family", "string|null", "Model family, when it could be resolved."),
    ("template", "string|null", "Chat template, when it could be resolved."),
    ("template_rule", "string|null", "How the template was decided: registry, config.json, chat_template, demo "
                                     "or user."),
    ("template_error", "string|null", "Why no template could be resolved (an unsupported model)."),
    ("warnings", "array of string", "Things to know before training (e.g. a base model with a chat template)."),
    ("examples", "object", "For the resolved family: lora, full, qlora, freeze (training), infer_lora, infer_full "
                           "(chat), export_lora, export_full -> the official example config to start from (absolute "
                           "path); empty when the family is unknown."),
)

MODEL_SHOW = _fields(
    *((f.name, f.type, f.meaning) for f in MODEL if f.name != "local"),
    ("family_name", "string", "The family's display name."),
    ("examples", "object", "Method (lora, full, qlora, freeze) -> the official example config to start from."),
    ("example_notes", "object", "Method -> why a nearby family's example is used, or null."),
    ("local", "object", "The `models check` document for this model."),
    ("warnings", "array of string", "Things to know before training."),
)

GPU = _fields(
    ("index", "integer", "Index as the vendor tool numbers it (what --gpus takes)."),
    ("name", "string", "Product name."),
    ("vendor", "string", "nvidia or amd."),
    ("memory_used_mib", "integer", "Memory in use, MiB."),
    ("memory_total_mib", "integer", "Memory, MiB."),
    ("utilization_pct", "number|null", "Load, percent (null when the tool does not report it)."),
    ("processes", "array of string", "What runs on it, e.g. \"python (pid 4242, 20.0 GiB)\"."),
    ("uuid", "string|null", "The GPU's UUID."),
)

GPUS = _fields(
    ("platform", "string", "cuda, rocm or cpu."),
    ("gpus", "array of GPU", "Every GPU found."),
    ("tool", "string", "The tool that answered: amd-smi, rocm-smi, nvidia-smi, torch or none."),
    ("notes", "array of string", "Why earlier tools gave no answer."),
    ("cpu_bf16", "string|null", "With no GPU: the CPU's bf16 units (AMX-BF16 or AVX512-BF16), where bf16: true "
                                "trains in bf16; null when it has none (bf16 then trains in fp32)."),
    ("free", "array of integer", "Indices of the free GPUs."),
    ("advice", "object", "{kind, candidates, message}: kind is single (use candidates[0]), ask_single_or_multi, "
                         "ask_none_free (wait, share or pick: ask the user) or cpu."),
)

PROBLEM = _fields(
    ("row", "integer|null", "1-based row number (null for the whole file)."),
    ("line", "integer|null", "Line of the file the row starts on."),
    ("field", "string|null", "The field concerned."),
    ("level", "string", "error (training refuses the file) or warning."),
    ("message", "string", "What is wrong and what to do."),
)

DATA_CHECK = _fields(
    ("path", "string", "The file checked."),
    ("format", "string", "alpaca or sharegpt."),
    ("ranking", "boolean", "The rows are preference pairs (chosen/rejected)."),
    ("rows", "integer", "Rows read."),
    ("ok", "boolean", "No errors (warnings allowed)."),
    ("errors", "integer", "Number of errors."),
    ("warnings", "integer", "Number of warnings."),
    ("problems", "array of PROBLEM", "Every problem, in file order."),
    ("suggested_entry", "object|null", "The dataset_info.json entry that registers the file as it is."),
    ("notes", "array of string", "With --fix, in `fixed`: what the conversion changed."),
    ("fixed", "object|null", "With --fix OUT: this same document for the written copy; null otherwise."),
)

DATASET = _fields(
    ("name", "string", "The name to put in `dataset:`."),
    ("file_name", "string|null", "Its file in the dataset folder (null for hub-only entries)."),
    ("formatting", "string", "alpaca or sharegpt."),
    ("ranking", "boolean", "Preference pairs (for stage: dpo)."),
    ("available", "boolean", "The rows are on this machine and fit the workflow asked for."),
    ("note", "string", "Why it is not available, else empty."),
)

DATA_LIST = _fields(
    ("dataset_dir", "string", "The folder holding dataset_info.json (absolute)."),
    ("datasets", "array of DATASET", "Every entry of dataset_info.json, in file order."),
)

TEMPLATE = _fields(
    ("name", "string", "The name to put in `template:`."),
    ("reasoning", "boolean", "A reasoning template (enable_thinking and preserve_thinking apply)."),
    ("tool_format", "string", "How tool calls and tool descriptions are written (tool_format: replaces it)."),
    ("default_system", "string", "The system prompt used when a sample has none (default_system: replaces it)."),
)

DATA_TEMPLATES = _fields(
    ("templates", "array of TEMPLATE", "Every template whose name contains PATTERN (all without one), by name."),
)

DATA_PREVIEW = _fields(
    ("template", "string", "The chat template the samples were rendered with."),
    ("dataset_dir", "string", "Where the data was read from."),
    ("rows", "integer", "Rows read."),
    ("samples", "integer", "Training samples they make."),
    ("total_tokens", "integer", "Tokens in all samples."),
    ("trained_tokens", "integer", "Tokens the loss is computed on (the answers)."),
    ("longest", "integer", "Tokens in the longest sample."),
    ("truncated", "integer", "Samples cut to cutoff_len."),
    ("untrained", "array of string", "Rows that train nothing (no answer token fits in cutoff_len), kept as "
                                     "LLaMA-Factory keeps them."),
    ("shown", "array of object", "{source, spans: [{text, trained}]} for the first --n samples."),
)

TRAIN_CHECK = _fields(
    ("config", "string", "The config file checked."),
    ("ok", "boolean", "No problems: `train` would start."),
    ("problems", "array of string", "Every problem, each saying what to change."),
    ("ignored_keys", "array of string", "Keys of the file accepted but not used here."),
    ("settings", "object", "Every setting of the resolved config (file + overrides), for the table shown to the "
                           "user before training."),
    ("changed", "object", "key -> {from, to}: what the overrides changed against the file."),
    ("notes", "array of string", "Which packing trains, where tokenized data comes from, and each hub dataset: "
                                 "downloaded and complete, or needing a download."),
)

DOCUMENTS: dict[str, tuple[str, tuple[Field, ...]]] = {
    "runs": ("`lf-assistant runs --json`: {\"runs\": [RUN, ...]}, newest first.", ()),
    "RUN": ("One run in `runs`.", RUN),
    "status": ("`lf-assistant status RUN_ID --json` (and `train --json`, `train --detach --json` right after the "
               "launch). With --follow: one document per line (JSON Lines) as the step changes, the last one "
               "final.", STATUS),
    "models list": ("`lf-assistant models list [--family F] [--local] --json`: {\"models\": [MODEL, ...]}.", ()),
    "MODEL": ("One model in `models list`.", MODEL),
    "models show": ("`lf-assistant models show ID --json`.", MODEL_SHOW),
    "models check": ("`lf-assistant models check PATH_OR_ID --json` (exit 1 when not complete).", MODEL_CHECK),
    "gpus": ("`lf-assistant gpus --json`.", GPUS),
    "GPU": ("One GPU in `gpus`.", GPU),
    "data check": ("`lf-assistant data check FILE [--fix OUT] --json` (exit 1 when there are errors).", DATA_CHECK),
    "PROBLEM": ("One problem in `data check`.", PROBLEM),
    "data list": ("`lf-assistant data list [--dataset-dir DIR] [--pairs] --json`.", DATA_LIST),
    "DATASET": ("One entry in `data list`.", DATASET),
    "data templates": ("`lf-assistant data templates [PATTERN] --json`.", DATA_TEMPLATES),
    "TEMPLATE": ("One chat template in `data templates`.", TEMPLATE),
    "data preview": ("`lf-assistant data preview CONFIG [key=value ...] --json`.", DATA_PREVIEW),
    "train --check": ("`lf-assistant train CONFIG [key=value ...] --check --json` (exit 2 when there are "
                      "problems; the document lists them).", TRAIN_CHECK),
}


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and infinity become null (strict JSON has neither); paths become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def document(name: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """Exactly the declared fields of document `name`, in order; a field `values` lacks is null."""
    return {f.name: _clean(values.get(f.name)) for f in DOCUMENTS[name][1]}


def emit(payload: Any, *, lines: bool = False) -> None:
    """Print one JSON document on stdout (`lines`: on one line, for JSON Lines output)."""
    text = json.dumps(_clean(payload), ensure_ascii=False, allow_nan=False, indent=None if lines else 2)
    typer.echo(text)


EXIT_CODES = (
    (0, "Success. With --json, stdout holds the document."),
    (1, "The command ran and the answer is no: training failed (`train`, `status` of a failed run), a dataset has "
        "errors (`data check`), a model is not complete (`models check`), a download failed. With --json the "
        "document is still printed."),
    (2, "Bad input: an unknown run id or model, a config with problems, an unreadable file, a wrong option. The "
        "message is on stderr; `train --check --json` also prints its document when the config could be read."),
    (130, "Interrupted (Ctrl+C)."),
)


def render_doc() -> str:
    """docs/cli-json.md."""
    out = ["# lf-assistant --json output", "",
           "Generated from `assistant/cli/jsonout.py` (`python -m assistant.cli.jsonout > docs/cli-json.md`).",
           "Fields are only ever added, never renamed or removed. Every document is strict JSON (NaN is written",
           "as null); times are Unix seconds; paths are strings.", "", "## Exit codes", "",
           "| code | meaning |", "|---|---|"]
    out += [f"| {code} | {meaning} |" for code, meaning in EXIT_CODES]
    for name, (summary, fields) in DOCUMENTS.items():
        out += ["", f"## {name}", "", summary]
        if fields:
            out += ["", "| field | type | meaning |", "|---|---|---|"]
            out += [f"| `{f.name}` | {f.type.replace('|', ' or ')} | {f.meaning} |" for f in fields]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render_doc(), end="")
