"""`lf-assistant` (alias `lfa`): the guided TUI when run bare, and the command groups below it.

Importing this module must not import torch: `lf-assistant --help` answers in a fraction of a second.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from assistant.cli import runs as runs_cli
from assistant.cli import train as train_cli
from assistant.cli import web as web_cli
from assistant.cli.common import checked_language, fail_on_engine_error

app = typer.Typer(
    name="lf-assistant",
    help="A guided fine-tuning assistant. Run it bare for the step-by-step TUI (data -> model -> GPU -> config -> "
         "train -> loss -> validate -> export), or use the commands below headless.",
    no_args_is_help=False,
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def main(
    ctx: typer.Context,
    resume: Optional[str] = typer.Option(None, "--resume", metavar="RUN_ID",
                                         help="Reopen the TUI at the stage where run RUN_ID stopped."),
    lang: Optional[str] = typer.Option(None, "--lang", callback=checked_language,
                                       help="Interface language: en or zh (default: from locale)."),
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help="Runs folder (default ./lf_runs)."),
    resume_last: bool = typer.Option(False, "--resume-last", help="Reopen the newest unfinished wizard session "
                                     "(a new one when there is none); what each browser tab of `web` runs."),
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    from assistant.cli.tui import launch_tui

    if resume is not None:
        resume = fail_on_engine_error(runs_cli.lookup_name)(resume)
    if resume_last and resume is None:
        from assistant.wizard.resume import latest_unfinished

        resume = latest_unfinished(runs_dir)
    fail_on_engine_error(launch_tui)(resume=resume, lang=lang, runs_dir=runs_dir)


def _help(callback) -> str:
    """A docstring as one paragraph: the commands list shows the first paragraph with its line breaks."""
    return " ".join((callback.__doc__ or "").split())


for _name, _callback in {"train": train_cli.train, "status": runs_cli.status, "runs": runs_cli.list_runs,
                         "stop": runs_cli.stop, "resume-train": runs_cli.resume_train, "web": web_cli.web}.items():
    app.command(_name, help=_help(_callback))(_callback)


def _register_optional() -> None:
    """Command groups whose modules exist; each is declared once, in its own file."""
    import importlib

    groups = {"data": "Check, convert and preview datasets.", "models": "The model registry, local cache, downloads.",
              "skills": "Instructions for coding agents that drive lf-assistant."}
    for name, help_text in groups.items():
        try:
            module = importlib.import_module(f"assistant.cli.{name}")
        except ModuleNotFoundError:
            continue
        for info in module.app.registered_commands:
            info.help = info.help or _help(info.callback)
        app.add_typer(module.app, name=name, help=help_text)
    singles = {"demo-model": ("demo", "demo_model"), "gpus": ("gpus", "gpus"), "chat": ("chat", "chat"),
               "export": ("export", "export"), "launch": ("launch", "launch")}
    for command, (module_name, function) in singles.items():
        try:
            module = importlib.import_module(f"assistant.cli.{module_name}")
        except ModuleNotFoundError:
            continue
        callback = getattr(module, function)
        app.command(command, help=_help(callback))(fail_on_engine_error(callback))


_register_optional()


def run() -> None:
    """Console-script entry point."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    app(prog_name=name if name in ("lf-assistant", "lfa") else "lf-assistant")


if __name__ == "__main__":
    run()
