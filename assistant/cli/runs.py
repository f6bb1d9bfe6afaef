"""`lf-assistant runs | status | stop | resume-train`: what the run folders say."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Optional

import typer

from assistant.cli.common import fail_on_engine_error, plain, safe
from assistant.formatting import fmt_duration


def lookup_name(run_id: str) -> str:
    """A run id (or a unique prefix) to look up; a path to an existing run folder is accepted as it is."""
    from engine.names import check_name

    folder = Path(run_id)
    if folder.is_dir() and ((folder / "status.json").is_file() or (folder / "state.json").is_file()):
        return run_id
    return check_name("run id", run_id)


def _fmt_time(value) -> str:
    return datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M") if value else "-"


@fail_on_engine_error
def list_runs(runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help="Runs folder (default ./lf_runs)."),
              tui: bool = typer.Option(False, "--tui", help="Open the runs review in the TUI: configs, diff "
                                       "tables, loss charts, validation answers; compare two runs.")) -> None:
    """List runs: id, model, method, state, steps, final loss, date (--tui: review and compare them)."""
    if tui:
        from assistant.tui.app import run_app

        run_app(review=True, runs_dir=runs_dir)
        return
    from rich.console import Console
    from rich.table import Table

    import engine

    rows = engine.runs.list(runs_dir)
    console = Console(highlight=False)
    if not rows:
        console.print("No runs yet. Start one with `lf-assistant` (guided) or `lf-assistant train CONFIG`.")
        return
    table = Table()
    table.add_column("run id", no_wrap=True)
    for name in ("model", "method", "state", "steps", "final loss", "started"):
        table.add_column(name, overflow="fold")
    for row in rows:
        steps = f"{row['step']}/{row['total_steps']}" if row.get("total_steps") else str(row.get("step") or 0)
        loss = _number(row.get("final_loss"))
        table.add_row(safe(row["run_id"]), safe(Path(str(row.get("model") or "-")).name),
                      safe(row.get("method") or "-"),
                      _state_text(row["state"]), steps, loss, _fmt_time(row.get("started_at")))
    console.print(table)


def _number(value) -> str:
    """A loss for display; "-" when the run files hold none (or something that is not a number)."""
    return f"{value:.4f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _state_text(state: str) -> str:
    colour = {"completed": "green", "running": "cyan", "failed": "red", "stopped": "yellow"}.get(state, "white")
    return f"[{colour}]{safe(state)}[/]"


@fail_on_engine_error
def status(run_id: str = typer.Argument(..., help="Run id (or a unique prefix)."),
           follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends."),
           runs_dir: Optional[Path] = typer.Option(None, "--runs-dir")) -> None:
    """Show a run's state, step/total, latest loss and ETA."""
    from rich.console import Console

    import engine

    console = Console(highlight=False)
    run = engine.runs.get(lookup_name(run_id), runs_dir)
    while True:
        st = run.read_status()
        state = st.state
        loss = _number(st.loss)
        eta = None if st.is_terminal else st.eta_s
        console.print(f"{safe(run.run_id)}: {_state_text(state)}  step {st.step}/{st.total_steps or '?'}  "
                      f"loss {loss}  elapsed {fmt_duration(st.elapsed_s)}  ETA {fmt_duration(eta)}")
        if not follow or st.is_terminal:
            break
        time.sleep(2)
    if st.exit_reason and state in ("failed", "stopped"):
        console.print(f"  reason: {plain(st.exit_reason)}", markup=False)
        if st.last_checkpoint:
            console.print(f"  continue with: lf-assistant resume-train {safe(run.run_id)}")
    if st.output_dir:
        console.print(f"  output: {plain(st.output_dir)}", markup=False)
    for note in st.notes:
        console.print(f"  note: {plain(note)}", markup=False)
    if state == "failed":
        raise typer.Exit(1)


@fail_on_engine_error
def stop(run_id: str = typer.Argument(..., help="Run id."), runs_dir: Optional[Path] = typer.Option(None, "--runs-dir"),
         force: bool = typer.Option(False, "--force", help="Also send SIGTERM to the training's processes (after "
                                    "checking they are that run's, not a reused pid).")) -> None:
    """Stop a running training at the end of its current step; it saves a checkpoint first and can be resumed."""
    import engine

    run = engine.runs.get(lookup_name(run_id), runs_dir)
    engine.stop(str(run.path), runs_dir=runs_dir, force=force)
    typer.echo(f"asked {plain(run_id)} to stop; it finishes its step, saves a checkpoint and records 'stopped'.")


@fail_on_engine_error
def resume_train(run_id: str = typer.Argument(..., help="Run id of a failed or stopped run."),
                 runs_dir: Optional[Path] = typer.Option(None, "--runs-dir"),
                 detach: bool = typer.Option(True, "--detach/--here", help="Continue in the background (default).")
                 ) -> None:
    """Continue a failed or stopped run from its newest complete checkpoint."""
    import engine

    handle = engine.resume(lookup_name(run_id), runs_dir=runs_dir, detach=detach)
    typer.echo(f"resumed {plain(handle.run_id)}; follow with: lf-assistant status {plain(handle.run_id)} --follow")
