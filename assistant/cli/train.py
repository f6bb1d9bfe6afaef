"""`lf-assistant train`: train from a YAML config, here (with a progress bar) or detached."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from assistant.cli.common import fail_on_engine_error, safe
from assistant.formatting import fmt_duration


@fail_on_engine_error
def train(
    config: Path = typer.Argument(..., help="Training YAML (ours or LLaMA-Factory's).", show_default=False),
    overrides: Optional[List[str]] = typer.Argument(None, help="key=value overrides, e.g. max_steps=20 "
                                                             "model_name_or_path=models/lf-tiny-qwen3"),
    detach: bool = typer.Option(False, "--detach", "-d", help="Start in the background and return the run id; "
                                "training keeps going after the terminal closes."),
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help="Runs folder (default ./lf_runs)."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Name the run folder (default model_method_time)."),
    check: bool = typer.Option(False, "--check", help="Only validate the config and list every problem."),
    nproc_per_node: Optional[int] = typer.Option(None, "--nproc-per-node", help="Processes on this machine "
                                                 "(torchrun); default: from the GPU choice or the config."),
) -> None:
    """Fine-tune a model from a YAML config. Writes lf_runs/<run_id>/ (config, log, metrics, status) and the
    adapter or model into output_dir."""
    from rich.console import Console

    import engine
    from engine.api import config_warnings
    from engine.names import check_name

    console = Console(highlight=False)
    if run_id is not None:
        check_name("run id", run_id)
    cfg = engine.load_config(config, *(overrides or []))
    if cfg.unused_keys:
        console.print(f"[dim]accepted but not used here: {safe(', '.join(cfg.unused_keys))}[/]")
    problems = engine.validate(cfg)
    if check and not problems:
        problems = _data_problems(cfg)  # --check reads every row, as training will
    if problems:
        console.print(f"[bold red]{safe(config)}: {len(problems)} problem(s)[/]")
        for problem in problems:
            console.print(f"  [red]-[/] {safe(problem)}", markup=True, soft_wrap=True)
        raise typer.Exit(2)
    for warning in config_warnings(cfg):
        console.print(f"[yellow]warning:[/] {safe(warning)}", soft_wrap=True)
    if check:
        _print_default_differences(cfg, console)
        console.print(f"[green]{safe(config)}: no problems found.[/]")
        return
    if nproc_per_node:
        cfg.nproc_per_node = nproc_per_node
    if detach or (cfg.nproc_per_node or 1) > 1:
        handle = engine.train(cfg, detach=True, runs_dir=runs_dir, run_id=run_id, nproc_per_node=cfg.nproc_per_node)
        if not detach:
            console.print(f"run [bold]{safe(handle.run_id)}[/] started with {cfg.nproc_per_node} processes")
            status = handle.wait()
            console.print(f"[bold]{safe(status.state)}[/]: {safe(status.exit_reason or '')}")
            console.print(f"  run folder : {safe(handle.path)}\n  output     : {safe(status.output_dir)}")
            if status.state != "completed":
                raise typer.Exit(1)
            return
        console.print(f"started run [bold]{safe(handle.run_id)}[/] (pid {handle.process.pid})")
        console.print(f"  folder: {safe(handle.path)}")
        console.print(f"  follow: lf-assistant status {safe(handle.run_id)} --follow")
        return
    _train_with_progress(cfg, console, runs_dir=runs_dir, run_id=run_id)


def _print_default_differences(cfg, console) -> None:
    """Keys the config omits whose default here differs from LLaMA-Factory's, with the reason."""
    from engine.config import default_differences

    rows = default_differences(cfg)
    if not rows:
        return
    console.print("[bold]defaults that differ from LLaMA-Factory's[/] (keys this config omits):")
    for row in rows:
        console.print(f"  {row.key}: {safe(row.ours)} here, {safe(row.lf_default)} in LLaMA-Factory "
                      f"[dim]({safe(row.reason)})[/]", soft_wrap=True)


def _data_problems(cfg) -> list[str]:
    """What loading the datasets would refuse (bad rows, duplicate keys, invalid text), as problems."""
    from engine.config.paths import dataset_dir_of
    from engine.data.loader import load_examples, load_texts
    from engine.errors import DataError

    try:
        dataset_dir = dataset_dir_of(cfg)
        for names in (cfg.dataset, cfg.eval_dataset):
            if not names:
                continue
            if cfg.stage == "pt":
                load_texts(names, dataset_dir, max_samples=cfg.max_samples)
            else:
                load_examples(names, dataset_dir, max_samples=cfg.max_samples, ranking=cfg.stage in ("dpo", "rm"))
    except DataError as exc:
        return [str(exc)]
    return []


def _train_with_progress(cfg, console, *, runs_dir, run_id) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    import engine

    progress = Progress(TextColumn("[bold]training"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                        console=console, transient=False)
    task = progress.add_task("train", total=None, loss="-")

    def on_log(row: dict) -> None:
        if "step" in row and "loss" in row:
            progress.update(task, completed=row["step"], total=row["total_steps"], loss=f"{row['loss']:.4f}")
        elif "eval_loss" in row:
            progress.console.print(f"  step {row['step']}: eval loss {row['eval_loss']:.4f}")
        elif "message" in row and row["message"].startswith(("NOTE", "resumed", "data:", "model", "trainable")):
            progress.console.print(f"[dim]{safe(row['message'])}[/]")

    with progress:
        handle = engine.train(cfg, runs_dir=runs_dir, run_id=run_id, on_log=on_log)
    status = handle.status()
    final = status.final_loss
    console.print(f"[bold green]{safe(status.state)}[/]: {status.step} steps in "
                  f"{fmt_duration(status.runtime_s)}, final loss {final:.4f}" if final is not None else
                  f"[bold]{safe(status.state)}[/]")
    console.print(f"  run folder : {safe(handle.path)}")
    console.print(f"  output     : {safe(status.output_dir)}")
    if status.loss_plot:
        console.print(f"  loss plot  : {safe(status.loss_plot)}")
