"""Starting the TUI from the command line (textual is imported only here, only when the TUI runs)."""

from __future__ import annotations

from pathlib import Path


def launch_tui(*, resume: str | None = None, lang: str | None = None, runs_dir: Path | None = None) -> None:
    try:
        from assistant.tui.app import run_app
    except ModuleNotFoundError:
        import typer

        typer.echo("The guided TUI is not available in this build. Use `lf-assistant train CONFIG` "
                   "(see `lf-assistant --help`).")
        raise typer.Exit(1) from None
    run_app(resume=resume, lang=lang, runs_dir=runs_dir)
