"""`lf-assistant export EXPORT.yaml`: merge a LoRA adapter into its base, or re-save a full fine-tune."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from assistant.cli.common import fail_on_engine_error, safe


@fail_on_engine_error
def export(
    config: Path = typer.Argument(..., help="Export YAML (ours or LLaMA-Factory's examples/merge_lora/*.yaml).",
                                  show_default=False),
    overrides: Optional[List[str]] = typer.Argument(None, help="key=value overrides, e.g. export_dir=models/x-merged "
                                                             "adapter_name_or_path=saves/... template=qwen"),
) -> None:
    """Export a standalone model: LoRA/QLoRA adapters merged into the full-precision base (checked: the weights
    changed and the logits match base + adapter), or a full fine-tune re-saved. Writes sharded safetensors, the
    tokenizer with the training chat template, an Ollama Modelfile and lfa_export.json."""
    from rich.console import Console

    from engine.export import load_export_config
    from engine.export.run import export_model

    console = Console(highlight=False)
    cfg = load_export_config(config, *(overrides or []))
    if cfg.unused_keys:
        from rich.markup import escape

        console.print(f"[dim]accepted but not used here: {escape(', '.join(cfg.unused_keys))}[/]")
    with console.status("exporting...") as status:
        def on_progress(step: int, total: int, text: str) -> None:
            status.update(f"\\[{step}/{total}] {safe(text)}")
            console.print(f"[dim]\\[{step}/{total}][/] {safe(text)}", soft_wrap=True)

        result = export_model(cfg, on_progress=on_progress)
    for check in result.checks:
        mark = "[green]ok[/]" if check.passed else "[red]FAILED[/]"
        console.print(f"  {mark} {safe(check.name)}: [dim]{safe(check.detail)}[/]", soft_wrap=True)
    for note in result.notes:
        console.print(f"  [yellow]note:[/] {safe(note)}", soft_wrap=True)
    what = "merged" if result.operation == "merge" else "re-saved (full fine-tune: nothing to merge)"
    console.print(f"[bold green]exported to {safe(result.export_dir)}[/] ({what}; template {safe(result.template)}; "
                  f"{len(result.files)} weight file(s))", soft_wrap=True)
    from assistant.command import self_command

    if result.gguf:
        console.print(f"  GGUF: {safe(result.export_dir / result.gguf)} (the Modelfile points at it)", soft_wrap=True)
    console.print(f"  chat with it: {self_command()} chat INFER.yaml model_name_or_path={safe(result.export_dir)} "
                  "adapter_name_or_path=null", soft_wrap=True)
