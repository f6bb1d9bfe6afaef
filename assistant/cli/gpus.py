"""`lf-assistant gpus`: which GPUs this machine has, which are free, and what a run would use."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from assistant.cli.common import safe

CPU_SPEED_NOTE = (
    "Training runs on the CPU{precision}. How fast depends on the model and this machine's load: the wizard's "
    "pre-flight times a few real steps of your config before it starts (the README gives measured figures for "
    "the demo model and SmolLM2-135M on 2 cores)."
)
CPU_PRECISION = {
    False: ", in fp32 (this CPU has no bf16 units, where bf16 trains 10-20x slower)",
    True: ("; it has {units} units, so a config with bf16: true trains in bf16 as on a GPU (the frozen weights in "
           "half the memory; on SmolLM2-135M LoRA 1.5-2.1x the fp32 speed: see the README)"),
}


def gpus(
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON (docs/cli-json.md).")] = False,
    timeout: Annotated[float, typer.Option(min=0.1, help="Seconds to wait for each vendor tool.")] = 10.0,
) -> None:
    """List GPUs with memory use, utilisation and what holds busy ones; say which would be used."""
    # engine.devices imports neither torch nor transformers at module level: this command stays fast.
    from engine.devices import detect_devices, selection_advice

    console = Console()
    with console.status("Asking amd-smi / rocm-smi / nvidia-smi...") if not json_out else _no_status():
        report = detect_devices(timeout_s=timeout)
    advice = selection_advice(report)
    if json_out:
        from assistant.cli.jsonout import document, emit

        data = report.to_dict()
        emit(document("gpus", {**data, "gpus": [document("GPU", gpu) for gpu in data["gpus"]],
                               "advice": {"kind": advice.kind, "candidates": advice.candidates,
                                          "message": advice.message}}))
        return
    if report.gpus:
        _print_gpu_table(console, report)
    for note in report.notes:
        console.print(f"[dim]note: {safe(note)}[/dim]", highlight=False)
    console.print(safe(advice.message), style="bold green" if advice.kind == "single" else "bold")
    if advice.kind == "cpu":
        precision = CPU_PRECISION[bool(report.cpu_bf16)].format(units=report.cpu_bf16)
        console.print(CPU_SPEED_NOTE.format(precision=precision), style="dim")


def _print_gpu_table(console: Console, report) -> None:
    from assistant.cli.tables import Column, print_table

    # Names and numbers stay whole; only the state column (the process list) wraps on narrow terminals.
    columns = [Column("index", justify="right"), Column("name"), Column("memory used", justify="right"),
               Column("total", justify="right", drop=1), Column("util", justify="right", drop=2),
               Column("state", wrap=True, min_width=12)]
    rows = []
    for gpu in report.gpus:
        util = "?" if gpu.utilization_pct is None else f"{gpu.utilization_pct:.0f}%"
        if gpu.free:
            state = "[green]free[/green]"
        else:
            state = "[red]busy[/red]" + (f" by {safe(', '.join(gpu.processes))}" if gpu.processes else "")
        rows.append([str(gpu.index), safe(gpu.name), f"{gpu.memory_used_mib / 1024:.1f} GiB",
                     f"{gpu.memory_total_mib / 1024:.1f} GiB", util, state])
    print_table(console, columns, rows, title=f"GPUs ({safe(report.platform)}, from {safe(report.tool)})")


class _no_status:
    """Stand-in for console.status when printing JSON: a spinner would corrupt the output."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
