"""Reproducible validation: the same prompts through the fine-tuned model and (optionally) its base, side by side.

    python -m engine.inference.validate --infer INFER.yaml --prompts PROMPTS.txt --out RUN_DIR/validation.jsonl [--base]
        [--completion]

Writes one JSON row per prompt: {"prompt", "base", "tuned", "template", "time_s"} (time_s: the tuned model's share
of its batch's wall time), and "reference" where the prompt row gives the answer it should get (a held-out row of
the training data). Both models see identical prompt token ids: the training template, with the fine-tuned
folder's tokenizer; with --completion (a continued pre-training run) the prompt text itself, continued without
any template. Prints ``progress i/n`` lines; exit code 0, or 2 with the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from engine.errors import ConfigError, EngineError
from engine.inference.config import InferConfig, load_infer_config
from engine.inference.prompts import prompt_text, read_prompt_rows
from engine.inference.source import ModelPlan, plan_model
from engine.jsonio import write_text_atomic


def base_plan(tuned: ModelPlan) -> ModelPlan:
    """The untrained model to compare with: LoRA's base as is; a full fine-tune's recorded base model."""
    if tuned.adapters:
        base = tuned.base_model
    elif tuned.method in ("full", "freeze", "exported") and tuned.trained_base:
        base = tuned.trained_base
    else:
        raise ConfigError(
            f"Cannot tell which base model {tuned.base_model} came from (no base_model in its lfa_training.json), "
            "so there is nothing to compare with. Run without --base, or validate a run trained by lf-assistant.")
    return ModelPlan(base_model=base, adapters=[], method="base", template_name=tuned.template_name,
                     template_origin="the fine-tuned model's template (same prompts for both)",
                     tokenizer_source=tuned.tokenizer_source)


def check_output_path(out_path: str | Path, inputs: list[str | Path]) -> None:
    """Refuse an output that is one of the inputs, a folder, or an existing file that is not a validation output.

    Validation rewrites its output as a whole, so the only file it may replace is an earlier one of its own (every
    row has prompt, tuned and template)."""
    out = Path(out_path).expanduser()
    for source in inputs:
        source = Path(source).expanduser()
        if Path(os.path.abspath(out)) == Path(os.path.abspath(source)) or (
                out.exists() and source.exists() and os.path.samefile(out, source)):
            raise ConfigError(f"The output {out} is an input of this validation ({source}); it would be "
                              "overwritten. Give --out a new file name, e.g. answers.jsonl.")
    if out.is_dir():
        raise ConfigError(f"The output {out} is a folder. Give --out a file name, e.g. {out / 'validation.jsonl'}.")
    if out.suffix.lower() != ".jsonl":  # what is written is JSON lines, whatever the name says
        raise ConfigError(f"The output {out} would hold JSON lines (one answer per line) under a {out.suffix or 'bare'} "
                          f"name. Give --out a .jsonl file name, e.g. {out.with_suffix('.jsonl').name}.")
    if out.exists() and not is_validation_output(out):
        raise ConfigError(f"{out} already exists and is not an lf-assistant validation output, so it is not "
                          "replaced. Give --out a new file name.")


def is_validation_output(path: Path) -> bool:
    """True when every line of `path` is a validation row (prompt, tuned, template) and there is at least one."""
    try:
        lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
        rows = [json.loads(line) for line in lines]
    except (OSError, ValueError, RecursionError):
        return False
    return bool(rows) and all(isinstance(row, dict) and {"prompt", "tuned", "template"} <= row.keys()
                              for row in rows)


def run_validation(config: InferConfig, prompts_path: str | Path, out_path: str | Path, *, base: bool = False,
                   batch_size: int = 16, on_progress: Callable[[int, int], None] | None = None,
                   inputs: tuple[str | Path, ...] = (), completion: bool = False) -> list[dict]:
    """Generate, write ``out_path`` (JSONL, replaced atomically) and return its rows.

    ``out_path`` may not be the prompt file or any of ``inputs`` (e.g. the config file), nor an existing file that
    is not an earlier validation output: checked before any model loads."""
    from engine.inference.chat_model import ChatModel

    check_output_path(out_path, [prompts_path, *inputs])
    prompt_rows = read_prompt_rows(prompts_path)
    conversations = [conversation for conversation, _ in prompt_rows]
    tuned_plan = plan_model(config.model_name_or_path, config.adapters(), config.template,
                            finetuning_type=config.finetuning_type)
    comparison = base_plan(tuned_plan) if base else None  # refuse before loading anything
    total = len(conversations) * (2 if base else 1)

    def progress(offset: int):
        return (lambda done, _n: on_progress(offset + done, total)) if on_progress else None

    def generate(plan: ModelPlan, offset: int):
        model = ChatModel(config, plan=plan)
        try:
            if completion:
                texts = [prompt_text(conversation) for conversation in conversations]
                return model.complete_batch(texts, batch_size=batch_size, on_progress=progress(offset)), "none"
            return model.generate_batch(conversations, batch_size=batch_size, on_progress=progress(offset)), \
                model.template_name
        finally:
            model.close()

    tuned, template_name = generate(tuned_plan, 0)
    base_answers = [None] * len(conversations)
    if comparison is not None:
        base_answers, _ = generate(comparison, len(conversations))
    rows = []
    for (conversation, expected), answer, reference in zip(prompt_rows, tuned, base_answers):
        row = {"prompt": prompt_text(conversation), "base": reference.text if reference else None,
               "tuned": answer.text, "template": template_name, "time_s": round(answer.time_s, 4),
               "tuned_cut": answer.cut}  # ran to max_new_tokens: the text is not the whole answer
        if expected is not None:
            row["reference"] = expected  # the answer the data gives (a held-out row), shown beside the model's
        if len(conversation) > 1:
            row["messages"] = conversation
        if reference:
            row["base_time_s"] = round(reference.time_s, 4)
            row["base_cut"] = reference.cut
        rows.append(row)
    write_jsonl_atomic(Path(out_path), rows)
    return rows


def write_jsonl_atomic(path: Path, rows: list[dict]) -> None:
    """Write every row, then rename into place: a reader never sees half a file."""
    write_text_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run validation prompts through the fine-tuned (and base) model.")
    parser.add_argument("--infer", required=True, help="inference YAML (LLaMA-Factory keys)")
    parser.add_argument("--prompts", required=True, help=".txt (one prompt per line) or .jsonl")
    parser.add_argument("--out", required=True, help="JSONL to write, e.g. RUN_DIR/validation.jsonl")
    parser.add_argument("--base", action="store_true", help="also answer with the base model, side by side")
    parser.add_argument("--batch-size", type=int, default=16, help="prompts generated together (default 16)")
    parser.add_argument("--completion", action="store_true", help="continue each prompt as plain text, without the "
                        "chat template (a continued pre-training run)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the inference config")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    try:
        config = load_infer_config(args.infer, *args.overrides)
        rows = run_validation(config, args.prompts, args.out, base=args.base, batch_size=args.batch_size,
                              on_progress=lambda done, total: print(f"progress {done}/{total}", flush=True),
                              inputs=(args.infer,), completion=args.completion)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(rows)} rows to {args.out} in {time.perf_counter() - began:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
