"""`lf-assistant demo-model`: build a tiny offline model to try every stage without downloading anything."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from assistant.cli.common import plain, safe


def demo_model(
    name: Annotated[
        str, typer.Argument(help="Demo model to build: lf-tiny-qwen3 (template qwen) or lf-tiny-llama (llama3).")
    ] = "lf-tiny-qwen3",
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Folder to write the model into (default ./models/<name>).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when a finished build is there.")] = False,
) -> Path:
    """Build a tiny random-weight demo model offline (a few seconds) and print its folder."""
    # Imported here: the engine pulls in torch/transformers (seconds), which `lf-assistant --help` must not pay.
    from engine.models.demo import DEMO_MODELS, build_demo_model, demo_model_path, is_built

    console = Console()
    target = out.expanduser().resolve() if out is not None else demo_model_path(name)
    reused = not force and is_built(name, target)
    with console.status(f"Building {name} (tokenizer + random weights, offline)..."):
        path = build_demo_model(name, target, force=force)
    spec = DEMO_MODELS[name]
    verb = "Already built" if reused else "Built"
    console.print(f"[green]{verb}[/green] {safe(name)} ({spec.architecture}, template [bold]{spec.template}[/bold])")
    console.print(plain(path), soft_wrap=True, highlight=False, markup=False)
    console.print(
        f"Use it as model_name_or_path: {safe(path)}  with  template: {spec.template}. "
        "Its weights are random: training shows falling loss, answers are gibberish by design.",
        style="dim",
    )
    return path
