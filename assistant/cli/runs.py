"""`lf-assistant runs | status | stop | resume-train`: what the run folders say."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Optional

import typer

from assistant.cli.common import fail_on_engine_error, plain, safe
from assistant.formatting import fmt_duration
from assistant.i18n import t, t_or

FINISHED_STATES = ("completed", "failed", "stopped")
RUNS_DIR_HELP = "Runs folder (default ./lf_runs)."


def lookup_name(run_id: str) -> str:
    """A run id (or a unique prefix) to look up; a path to an existing run folder is accepted as it is."""
    from engine.names import check_name

    from engine.rundir import is_run_folder

    return run_id if is_run_folder(Path(run_id)) else check_name("run id", run_id)


def _number(value) -> str:
    """A loss for display; "-" when the run files hold none (or something that is not a number)."""
    return f"{value:.4f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _fmt_time(value) -> str:
    try:
        return datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M") if value else "-"
    except (TypeError, ValueError, OverflowError, OSError):  # not a time any clock shows
        return "-"


def run_document(row: dict, runs_dir: Optional[Path]) -> dict:
    """One run of `runs --json`, from the engine's summary."""
    from engine.rundir import runs_root

    from assistant.cli.jsonout import document

    run_dir = str((runs_root(runs_dir) / row["run_id"]).resolve())
    return document("RUN", {**row, "run_dir": row.get("run_dir") or run_dir})


@fail_on_engine_error
def list_runs(runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
              tui: bool = typer.Option(False, "--tui", help="Open the runs review in the TUI: configs, diff "
                                       "tables, loss charts, validation answers; compare two runs."),
              json_out: bool = typer.Option(False, "--json", help="Print {\"runs\": [...]} as JSON "
                                            "(docs/cli-json.md).")) -> None:
    """List runs: id, model, method, state, steps, final loss, date (--tui: review and compare them)."""
    if tui:
        from assistant.tui.app import run_app

        run_app(review=True, runs_dir=runs_dir)
        return
    from rich.console import Console

    import engine
    from assistant.cli.jsonout import emit
    from assistant.cli.tables import Column, print_table

    rows = engine.runs.list(runs_dir)
    left = _sessions_left(runs_dir)
    if json_out:
        emit({"runs": [run_document({**row, "state": "unknown", "wizard_stage": left[row["run_id"]]}
                                    if row["run_id"] in left else row, runs_dir) for row in rows]})
        return
    console = Console(highlight=False)
    if not rows:
        console.print("No runs yet. Start one with `lf-assistant` (guided) or `lf-assistant train CONFIG`.")
        return
    # The run id already carries the model, the method and the time: those columns go first when space is short.
    columns = [Column("run id"), Column("model", drop=3), Column("method", drop=2), Column("state"),
               Column("steps", justify="right"), Column("final loss", justify="right", drop=1),
               Column("started", drop=4)]
    table_rows = []
    for row in rows:
        steps = f"{row['step']}/{row['total_steps']}" if row.get("total_steps") else str(row.get("step") or 0)
        loss = _number(row.get("final_loss"))
        state = _state_text(row["state"]) if row["run_id"] not in left else safe(t(
            "review.wizard_stage", stage=t_or(f"stage.{left[row['run_id']]}.title", left[row["run_id"]])))
        table_rows.append([safe(row["run_id"]), safe(Path(str(row.get("model") or "-")).name),
                           safe(row.get("method") or "-"), state, steps, loss, _fmt_time(row.get("started_at"))])
    print_table(console, columns, table_rows)


def _sessions_left(runs_dir) -> dict[str, str]:
    """Run id -> the stage a wizard session that has not trained yet was left at (as the runs review says it)."""
    from assistant.wizard.review import list_runs as review_rows

    return {row.run_id: row.stage for row in review_rows(runs_dir) if row.stage is not None}


def _state_text(state: str) -> str:
    colour = {"completed": "green", "running": "cyan", "failed": "red", "stopped": "yellow"}.get(state, "white")
    return f"[{colour}]{safe(state)}[/]"


def status_document(run, status) -> dict:
    """`status --json`: the status fields, plus where the run's files are and whether it has ended."""
    from engine.rundir import find_complete_checkpoints

    from assistant.cli.jsonout import document

    st = status.to_json()
    checkpoint = st.get("last_checkpoint")
    if not checkpoint and st.get("output_dir"):
        found = find_complete_checkpoints(st["output_dir"])
        checkpoint = str(found[-1]) if found else None
    return document("status", {**st, "run_id": run.run_id, "run_dir": str(run.path.resolve()),
                               "state": st.get("state", "unknown"), "finished": st.get("state") in FINISHED_STATES,
                               "step": st.get("step", 0), "notes": st.get("notes", []),
                               "last_checkpoint": checkpoint, "pid": status.pid, "log_path": str(run.log_path.resolve()),
                               "metrics_path": str(run.metrics_path.resolve())})


@fail_on_engine_error
def status(run_id: str = typer.Argument(..., help="Run id (or a unique prefix)."),
           follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends."),
           runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
           json_out: bool = typer.Option(False, "--json", help="Print the status as JSON (docs/cli-json.md); with "
                                         "--follow one line per change, the last when it ended.")) -> None:
    """Show a run's state, step/total, latest loss and ETA; exit 1 when it failed."""
    import engine

    run = engine.runs.get(lookup_name(run_id), runs_dir)
    st = _follow_json(run, follow) if json_out else _follow_text(run, follow)
    if st.state == "failed":
        raise typer.Exit(1)


def _follow_json(run, follow: bool):
    from assistant.cli.jsonout import emit

    last = None
    while True:
        st = run.read_status()
        doc = status_document(run, st)
        key = (doc["state"], doc["step"], doc["loss"])
        if not follow:
            emit(doc)
            return st
        if key != last:
            emit(doc, lines=True)
            last = key
        if doc["finished"]:
            return st
        time.sleep(2)


def _follow_text(run, follow: bool):
    from rich.console import Console

    from assistant.command import self_command

    console = Console(highlight=False)
    while True:
        st = run.read_status()
        state = st.state
        eta = None if st.is_terminal else st.eta_s
        console.print(f"{safe(run.run_id)}: {_state_text(state)}")
        console.print(f"  step {st.step}/{st.total_steps or '?'}  loss {_number(st.loss)}  "
                      f"elapsed {fmt_duration(st.elapsed_s)}  ETA {fmt_duration(eta)}")
        if not follow or st.is_terminal:
            break
        time.sleep(2)
    if st.exit_reason and state in ("failed", "stopped"):
        console.print(f"  reason: {plain(st.exit_reason)}", markup=False)
        if st.last_checkpoint:
            console.print(f"  continue with: {self_command()} resume-train {plain(run.run_id)}", markup=False)
    if st.output_dir:
        console.print(f"  output: {plain(st.output_dir)}", markup=False)
    for note in st.notes:
        console.print(f"  note: {plain(note)}", markup=False)
    return st


@fail_on_engine_error
def stop(run_id: str = typer.Argument(..., help="Run id (the whole id: no prefix)."),
         runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
         force: bool = typer.Option(False, "--force", help="Also send SIGTERM to the training's processes (after "
                                    "checking they are that run's, not a reused pid).")) -> None:
    """Stop a running training at the end of its current step; it saves a checkpoint first and can be resumed."""
    import engine

    engine.stop(lookup_name(run_id), runs_dir=runs_dir, force=force)
    typer.echo(f"asked {plain(run_id)} to stop; it finishes its step, saves a checkpoint and records 'stopped'.")


@fail_on_engine_error
def resume_train(run_id: str = typer.Argument(..., help="Run id of a failed or stopped run (the whole id)."),
                 runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
                 detach: bool = typer.Option(
                     True, "--detach/--here",
                     help="Continue in the background (default), or here with a progress bar."),
                 checkpoint: Optional[str] = typer.Option(
                     None, "--checkpoint", metavar="N",
                     help="Continue from checkpoint-N of the run's output_dir instead of the newest (e.g. when the "
                          "newest is damaged).")) -> None:
    """Continue a failed or stopped run from its newest complete checkpoint."""
    import engine
    from assistant.command import run_command

    if not detach:
        from rich.console import Console

        from assistant.cli.train import report_end, run_with_progress

        console = Console(highlight=False)
        handle = run_with_progress(console, lambda on_log: engine.resume(
            lookup_name(run_id), runs_dir=runs_dir, detach=False, checkpoint=checkpoint, on_log=on_log))
        report_end(handle, console, json_out=False)
        return
    handle = engine.resume(lookup_name(run_id), runs_dir=runs_dir, detach=True, checkpoint=checkpoint)
    typer.echo(f"resumed {plain(handle.run_id)}; follow with: "
               f"{plain(run_command('status', handle.run_id, runs_dir, '--follow'))}")
