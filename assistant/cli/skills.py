"""`lf-assistant skills install|show`: a SKILL.md that lets a coding agent drive lf-assistant as a person would.

The text lives in agent_skill.md beside this module; install fills in what only this installation knows (the
command that reaches it, where its examples are) and the table of wizard questions below. That table is also
in the README (a test keeps the two equal), and a test checks that every question of skills/*/skill.yaml is in it.
"""

from __future__ import annotations

from pathlib import Path

import typer

from assistant.cli.common import fail_on_engine_error

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

TEMPLATE = Path(__file__).with_name("agent_skill.md")
DEFAULT_DIR = Path(".agents") / "skills" / "lf-assistant"
MARKER = "generator: lf-assistant"
"""In the front matter of every SKILL.md we write: install replaces such a file, and nothing else."""

# (stage, the wizard's question and its id in skills/*/skill.yaml when it has one, the command line's way)
QUESTIONS: tuple[tuple[str, str, str], ...] = (
    ("0 flow", "Workflow (`workflow`)", "`stage: sft`; DPO, ORPO, SimPO: `stage: dpo` with `pref_loss: sigmoid`, "
                                        "`orpo` or `simpo`"),
    ("0 flow", "Scope (`scope`)", "Training only: stop after `train`; full flow: also `chat --prompts` and `export`"),
    ("0 flow", "Execution (`execution`)", "run here: `train --detach`; only write configs: `train --check`, then "
                                          "`lf-assistant train CONFIG` elsewhere; browser: `lf-assistant web`"),
    ("0 flow", "Fine-tuning type (`method`)", "`finetuning_type: lora`, `full` or `freeze`; QLoRA: "
                                              "`finetuning_type: lora` with `quantization_bit: 4`"),
    ("1 data", "Data source (`data_source`)", "registered: `dataset: a,b` and `dataset_dir: DIR` (`data list`); "
                                              "your files: `data add FILE --name NAME`"),
    ("1 data", "Which datasets", "`dataset: a,b,c` (`data list --json` lists them; `--pairs` for preference "
                                 "training)"),
    ("1 data", "A file to bring in, and its name", "`data check FILE`, then `data add FILE --name NAME "
                                                   "[--convert] [--pairs]`"),
    ("1 data", "Values for `{{placeholders}}`", "`data check FILE --fix OUT --fill name=VALUE`, then `data add OUT "
                                                "--name NAME`"),
    ("2 model", "Model", "`model_name_or_path: ID_OR_FOLDER`, `template: NAME` (`models check --json`)"),
    ("2 model", "Download source (`model_source`)", "`models download ID --source hf`, `modelscope` or `auto`"),
    ("2.5 GPU", "Single or several GPUs (`gpu_mode`)", "`train --gpus 0` or `--gpus 0,1` (`gpus --json` lists the "
                                                       "free ones)"),
    ("2.5 GPU", "No GPU free: wait, share or pick (`busy_action`)", "wait: poll `gpus --json`; share or pick: "
                                                                    "`train --gpus N`"),
    ("3 config", "Any parameter", "`key=value` after the config on `train` (`train --check --json` shows the "
                                  "result and what changed)"),
    ("3 config", "Small-dataset advice (mix data, epochs)", "`dataset: mine,alpaca_en_demo`, `num_train_epochs: N`, "
                                                            "`logging_steps: N`"),
    ("4 train", "Start training", "`train CONFIG [key=value ...] --detach [--run-id ID] [--gpus 0]`; "
                                  "continue a stopped run: `resume-train RUN_ID`"),
    ("6 validate", "Test prompts", "`chat INFER.yaml [key=value ...] --prompts FILE --out OUT.jsonl [--base]`"),
    ("7 export", "Export folder", "`export EXPORT.yaml [key=value ...] export_dir=DIR`"),
)


def questions_table() -> str:
    """The wizard's questions and their command-line equivalents, as a Markdown table."""
    rows = ["| stage | question | without the wizard |", "|---|---|---|"]
    rows += [f"| {stage} | {question} | {answer} |" for stage, question, answer in QUESTIONS]
    return "\n".join(rows)


def render() -> str:
    """SKILL.md for this installation."""
    from importlib.metadata import PackageNotFoundError, version

    from engine.models.registry import EXAMPLES_DIR

    from assistant.command import self_command

    try:
        installed = version("lf-assistant")
    except PackageNotFoundError:
        installed = "(source checkout)"
    from engine.resources import resource_dir

    docs = resource_dir("docs") / "cli-json.md"
    values = {"version": installed, "command": self_command(), "examples": str(EXAMPLES_DIR),
              "docs": f"`{docs}`" if docs.is_file() else "docs/cli-json.md in the lf-assistant sources",
              "questions": questions_table()}
    text = TEMPLATE.read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    return text


@app.command("install")
@fail_on_engine_error
def install(
    folder: Path = typer.Option(DEFAULT_DIR, "--dir", help="Folder to write SKILL.md into (the skill's own folder; "
                                "e.g. .claude/skills/lf-assistant for Claude Code)."),
    force: bool = typer.Option(False, "--force", help="Replace a SKILL.md that lf-assistant did not write."),
) -> None:
    """Write SKILL.md: how a coding agent runs each stage with lf-assistant, what to confirm with the user, how to
    read a run and tell that training has finished."""
    from engine.errors import ConfigError
    from engine.jsonio import write_text_atomic

    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--dir {folder} is a file, not a folder; nothing was written. Give the folder SKILL.md "
                          "goes into.")
    target = folder / "SKILL.md"
    if target.exists() and not force:
        existing = target.read_text(encoding="utf-8", errors="replace")
        if MARKER not in existing.split("\n---", 1)[0]:
            raise ConfigError(f"{target} exists and was not written by lf-assistant; it is left as it is. Choose "
                              "another --dir, or add --force to replace it.")
    write_text_atomic(target, render())
    typer.echo(f"wrote {target}")


@app.command("show")
def show() -> None:
    """Print the SKILL.md that `skills install` writes."""
    typer.echo(render(), nl=False)
