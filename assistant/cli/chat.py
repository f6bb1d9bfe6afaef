"""`lf-assistant chat INFER.yaml`: talk to a fine-tuned model in the terminal, or answer a prompt file in batches."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from assistant.cli.common import fail_on_engine_error, plain, safe

HELP_LINE = "Type a message and press Enter. /clear starts a new conversation, /exit quits."


@fail_on_engine_error
def chat(
    config: Path = typer.Argument(..., help="Inference YAML (ours or LLaMA-Factory's examples/inference/*.yaml).",
                                  show_default=False),
    overrides: Optional[List[str]] = typer.Argument(None, help="key=value overrides, e.g. template=qwen "
                                                             "max_new_tokens=256 do_sample=false"),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Answer every prompt in this file instead of "
                                           "chatting (.txt: one per line; .jsonl: prompt / instruction / messages)."),
    out: Optional[Path] = typer.Option(None, "--out", help="With --prompts: the JSONL to write, a new file or an "
                                       "earlier validation output (default: validation.jsonl beside the prompt "
                                       "file; never the prompt file itself)."),
    base: bool = typer.Option(False, "--base", help="With --prompts: also answer with the base model, side by side."),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="With --prompts: prompts generated together."),
    system: Optional[str] = typer.Option(None, "--system", help="System prompt of the conversation."),
    completion: bool = typer.Option(False, "--completion", help="With --prompts: continue each prompt as plain "
                                    "text, without the chat template (a continued pre-training run, stage pt)."),
) -> None:
    """Chat with a model (streamed, multi-turn; /clear, /exit), or with --prompts FILE --out FILE.jsonl answer a
    prompt file without interaction (add --base for base-vs-tuned answers side by side)."""
    from rich.console import Console

    from engine.inference import load_infer_config

    console = Console(highlight=False)
    infer = load_infer_config(config, *(overrides or []))
    if infer.unused_keys:
        from rich.markup import escape

        console.print(f"[dim]accepted but not used here: {escape(', '.join(infer.unused_keys))}[/]")
    if prompts is not None:
        _answer_file(console, infer, prompts, out or default_out(prompts), base, batch_size, config, completion)
        return
    if out is not None or base:
        console.print("[yellow]--out and --base only apply with --prompts; starting an interactive chat.[/]")
    _interactive(console, infer, system)


def default_out(prompts: Path) -> Path:
    """validation.jsonl beside the prompt file, or <stem>-answers.jsonl when the prompt file has that name."""
    out = prompts.with_name("validation.jsonl")
    return prompts.with_name(f"{prompts.stem}-answers.jsonl") if out.name == prompts.name else out


def _answer_file(console, infer, prompts: Path, out: Path, base: bool, batch_size: int, config: Path,
                 completion: bool = False) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from engine.inference.validate import run_validation

    progress = Progress(TextColumn("[bold]generating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console)
    task = progress.add_task("generate", total=None)
    with progress:
        rows = run_validation(infer, prompts, out, base=base, batch_size=batch_size, inputs=(config,),
                              completion=completion,
                              on_progress=lambda done, total: progress.update(task, completed=done, total=total))
    console.print(f"wrote {len(rows)} answers to [bold]{safe(out)}[/] "
                  f"(template {safe(rows[0]['template']) if rows else '-'})")
    def shown(text: str | None, cut: bool) -> str:  # "…" where the line is shortened; a mark where generation was
        text = text or ""
        return safe(text[:100]) + ("…" if len(text) > 100 else "") + (" [yellow](cut at max_new_tokens)[/]" if cut
                                                                       else "")

    for row in rows[:3]:
        console.print(f"  [dim]prompt:[/] {shown(row['prompt'], False)}", markup=True, soft_wrap=True)
        if base:
            console.print(f"  [dim]base:  [/] {shown(row['base'], row.get('base_cut') is True)}", markup=True,
                          soft_wrap=True)
        console.print(f"  [dim]tuned: [/] {shown(row['tuned'], row.get('tuned_cut') is True)}", markup=True,
                      soft_wrap=True)
    cut = sum(bool(row.get("tuned_cut")) + bool(row.get("base_cut")) for row in rows)
    if cut:
        console.print(f"  {cut} answer(s) ran to max_new_tokens and were cut; raise it in the config to see them "
                      "whole")


def _interactive(console, infer, system: str | None) -> None:
    from engine.inference.chat_model import ChatModel

    with console.status("loading the model..."):
        model = ChatModel(infer)
    plan = model.plan
    adapters = f" + {', '.join(plan.adapters)}" if plan.adapters else ""
    console.print(f"[bold]{safe(plan.base_model + adapters)}[/] | template [bold]{safe(model.template_name)}[/] "
                  f"({safe(plan.template_origin)})", soft_wrap=True)
    for note in plan.notes:
        console.print(f"[yellow]note:[/] {safe(note)}", soft_wrap=True)
    console.print(f"[dim]{HELP_LINE}[/]")
    history: list[dict] = []
    try:
        while True:
            try:
                text = input("\nuser> ")
            except EOFError:
                break
            command = text.strip()
            if command in ("/exit", "/quit"):
                break
            if command == "/clear":
                history = []
                console.print("[dim](new conversation)[/]")
                continue
            if not command:
                continue
            history.append({"role": "user", "content": text})
            answer = _stream_answer(model, history, system)
            if answer is None:
                history.pop()  # interrupted: the turn is dropped, the conversation goes on
            else:
                history.append({"role": "assistant", "content": answer})
    finally:
        model.close()


def _stream_answer(model, history: list[dict], system: str | None) -> str | None:
    sys.stdout.write("assistant> ")
    sys.stdout.flush()
    pieces: list[str] = []
    stream = model.stream_chat(history, system)
    try:
        for piece in stream:
            pieces.append(piece)
            sys.stdout.write(plain(piece))
            sys.stdout.flush()
    except KeyboardInterrupt:
        stream.close()  # stops generation in its thread
        sys.stdout.write("\n(interrupted)\n")
        return None
    sys.stdout.write("\n")
    return "".join(pieces)
