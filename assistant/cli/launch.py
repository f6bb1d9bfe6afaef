"""`lf-assistant launch`: train on several processes (GPUs, CPU processes, nodes) through torchrun.

    lf-assistant launch CONFIG --nproc-per-node 2            # start here, wait, report
    lf-assistant launch CONFIG --nnodes 2 --nproc-per-node 8 --print [--slurm]   # commands for each node

Either way the run folder is prepared first (lf_runs/<run_id>/ with its sft.yaml); the commands refer to it.
"""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path
from typing import List, Optional

import typer

from assistant.cli.common import plain
from assistant.command import run_command


def _checked_address(value: str) -> str:
    """--master-addr's callback: a host name or an IPv4/IPv6 address goes into every node's command and the sbatch
    script, so a space, a newline or a shell character is refused here rather than quoted there."""
    if not re.fullmatch(r"[A-Za-z0-9._:%\[\]-]{1,255}", value):
        raise typer.BadParameter(f"{plain(value, keep_layout=False)!r} is not a host name or an IP address "
                                 "(letters, digits, '.', '-', ':' only).")
    return value


def launch(
    config: Path = typer.Argument(..., help="Training YAML (ours or LLaMA-Factory's).", show_default=False),
    overrides: Optional[List[str]] = typer.Argument(None, help="key=value overrides, e.g. max_steps=20"),
    nnodes: int = typer.Option(1, "--nnodes", min=1, help="Machines taking part (multi-node: use --print)."),
    nproc_per_node: Optional[int] = typer.Option(
        None, "--nproc-per-node", min=1, help="Processes per machine: one per GPU (default: the chosen GPUs; "
        "on CPU the config's nproc_per_node, else 1)."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU indices to use on each node, e.g. 0,1,2,3."),
    master_addr: str = typer.Option("HEAD_NODE_ADDRESS", "--master-addr", callback=_checked_address,
                                    help="Node 0's address (multi-node): a host name or an IP address."),
    master_port: int = typer.Option(29500, "--master-port", min=1, max=65535,
                                    help="Rendezvous port on node 0 (multi-node)."),
    print_only: bool = typer.Option(False, "--print", help="Only print the command for each node; start nothing."),
    slurm: bool = typer.Option(False, "--slurm", help="Also print (and save in the run folder) an sbatch script."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Start in the background and return the run id."),
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help="Runs folder (default ./lf_runs)."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Name the run folder (default model_method_time)."),
) -> None:
    """Train on several processes through torchrun, or print the command for every node (and a SLURM script)."""
    import engine
    from engine.api import plan_launch, prepare_run
    from engine.jsonio import write_text_atomic
    from engine.names import check_name

    if run_id is not None:
        check_name("run id", run_id)
    cfg = engine.load_config(config, *(overrides or []))
    problems = engine.validate(cfg)
    if problems:
        typer.echo(f"{plain(config)}: {len(problems)} problem(s)", err=True)
        for problem in problems:
            typer.echo(f"  - {plain(problem)}", err=True)
        raise typer.Exit(2)
    choice = _gpu_choice(gpus) if gpus else None  # a bad --gpus is refused before the run folder is made
    resolved, run = prepare_run(cfg, runs_dir=runs_dir, run_id=run_id)
    if choice is not None:
        from engine.devices import save_choice

        save_choice(choice, run.path)
    plan = plan_launch(run.path, resolved.stage, nproc_per_node=nproc_per_node, nnodes=nnodes,
                       master_addr=master_addr, master_port=master_port)
    text = plan.describe()
    write_text_atomic(run.path / "launch.sh", "#!/bin/sh\n" + text + "\n")
    if slurm:
        write_text_atomic(run.path / "launch.sbatch", plan.sbatch_script())
    if print_only or nnodes > 1:
        # The files hold the exact scripts; the terminal gets them with control characters shown, not obeyed.
        typer.echo(plain(text))
        if slurm:
            submit = shlex.join(["sbatch", str(run.path / "launch.sbatch")])
            typer.echo(f"\n# SLURM: {plain(submit, keep_layout=False)}\n" + plain(plan.sbatch_script()))
        follow = run_command("status", run.run_id, runs_dir, "--follow")
        typer.echo(f"\n# run folder: {plain(run.path, keep_layout=False)} (follow: {plain(follow, keep_layout=False)})")
        return
    _start_here(run, resolved.stage, plan.nproc_per_node, detach, runs_dir)


def _gpu_choice(gpus: str):
    from engine.devices import detect_devices, make_choice
    from engine.errors import DeviceError

    try:
        indices = [int(part) for part in gpus.split(",") if part.strip()]
    except ValueError:
        raise DeviceError(f"--gpus {gpus!r}: give GPU indices separated by commas, e.g. 0,1.") from None
    return make_choice(detect_devices(), indices)


def _start_here(run, stage: str, nproc: int, detach: bool, runs_dir: Optional[Path]) -> None:
    from engine.api import RunHandle, launch_detached, wait_and_record

    process = launch_detached(run, stage, nproc_per_node=nproc)
    typer.echo(f"started run {plain(run.run_id)}: {nproc} process(es), launcher pid {process.pid}")
    typer.echo(f"  folder: {plain(run.path)}   log: {plain(run.log_path)}")
    if detach:
        typer.echo(f"  follow: {plain(run_command('status', run.run_id, runs_dir, '--follow'))}")
        return
    last_step = None
    while process.poll() is None:
        status = run.read_status()
        if status.step != last_step and status.loss is not None:
            last_step = status.step
            typer.echo(f"  step {last_step}/{status.total_steps} loss {status.loss:.4f}")
        time.sleep(1.0)
    status = wait_and_record(RunHandle(run, process))
    state = status.state
    typer.echo(plain(f"{state}: {status.step} steps; {status.exit_reason or ''}".rstrip("; ")))
    if state != "completed":
        typer.echo(f"  see {plain(run.log_path)}", err=True)
        raise typer.Exit(1)
