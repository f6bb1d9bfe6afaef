"""`lf-assistant data check|preview`: find every problem in a dataset file; see what training will learn.

Engine pieces are imported inside the commands: importing this module must not import torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from assistant.cli.common import fail_on_engine_error, plain, safe

app = typer.Typer(help="Check, convert and preview datasets.", no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False)

ROWS_SHOWN = 50


@app.command("check")
@fail_on_engine_error
def check(
    file: Path = typer.Argument(..., help="A data file: json, jsonl, csv, parquet or arrow.", show_default=False),
    file_format: Optional[str] = typer.Option(None, "--format", help="Read the file as alpaca or sharegpt "
                                         "(default: detected; OpenAI messages count as sharegpt)."),
    fix: Optional[Path] = typer.Option(None, "--fix", metavar="OUT", help="Write a repaired copy to OUT (.json or "
                                       ".jsonl, a new file); the input is never changed."),
    fill: Optional[List[str]] = typer.Option(None, "--fill", metavar="NAME=VALUE", help="With --fix: replace "
                                             "{{NAME}} placeholders by VALUE (repeatable)."),
    show_all: bool = typer.Option(False, "--all", help=f"List every problem (default: the first {ROWS_SHOWN})."),
) -> None:
    """List every problem of a dataset file with its row number; exit 1 when there are errors."""
    from rich.console import Console

    from engine.data.check import check_file, convert_file

    console = Console(highlight=False)
    if file_format is not None and file_format not in ("alpaca", "sharegpt"):
        raise typer.BadParameter(f"{file_format!r} is not a format; use alpaca or sharegpt.", param_hint="--format")
    values = _parse_fill(fill or [])
    if values and fix is None:
        raise typer.BadParameter("--fill writes the values into a copy, so it needs --fix OUT.", param_hint="--fill")
    report = check_file(file, formatting=file_format)
    _print_report(console, report, show_all)
    if fix is None:
        raise typer.Exit(0 if report.ok else 1)
    fixed = convert_file(file, fix, formatting=file_format, placeholders=values or None)
    console.print(f"\n[bold]Wrote {safe(fix)}[/]")
    for note in fixed.notes:
        console.print(f"  - {plain(note)}", markup=False)
    _print_report(console, fixed, show_all)
    raise typer.Exit(0 if fixed.ok else 1)


def _parse_fill(items: list[str]) -> dict[str, str]:
    values = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise typer.BadParameter(f"{item!r} is not NAME=VALUE (for example name=Ada).", param_hint="--fill")
        values[name.strip().strip("{}")] = value
    return values


def _print_report(console, report, show_all: bool) -> None:
    import json

    from rich.table import Table

    errors, warnings = len(report.errors), len(report.warnings)
    kind = f"{report.format}{' preference pairs' if report.ranking else ''}"
    status = "[green]ok[/]" if report.ok else f"[bold red]{errors} error(s)[/]"
    console.print(f"[bold]{safe(report.path)}[/]: {kind}, {report.rows} rows: {status}"
                  + (f", [yellow]{warnings} warning(s)[/]" if warnings else ""))
    if report.problems:
        shown = report.problems if show_all else report.problems[:ROWS_SHOWN]
        table = Table(show_edge=False, pad_edge=False)
        for column in ("row", "line", "field", "level", "problem"):
            table.add_column(column, no_wrap=column != "problem", overflow="fold")
        for problem in shown:
            color = "red" if problem.level == "error" else "yellow"
            table.add_row("-" if problem.row is None else str(problem.row),
                          "" if problem.line is None else str(problem.line), safe(problem.field or ""),
                          f"[{color}]{problem.level}[/]", safe(problem.message))
        console.print(table)
        if len(shown) < len(report.problems):
            console.print(f"... and {len(report.problems) - len(shown)} more (--all lists them).")
    entry = report.suggested_entry()
    if report.ok and entry is not None:
        name = report.path.stem
        console.print(f"Register it in dataset_info.json (next to the file) as:\n  "
                      f"{plain(json.dumps(name, ensure_ascii=False))}: {plain(json.dumps(entry, ensure_ascii=False))}",
                      markup=False, soft_wrap=True)


@app.command("preview")
@fail_on_engine_error
def preview(
    config: Path = typer.Argument(..., help="Training YAML (ours or LLaMA-Factory's).", show_default=False),
    overrides: Optional[List[str]] = typer.Argument(None, help="key=value overrides, e.g. dataset=identity "
                                                             "cutoff_len=256"),
    n: int = typer.Option(2, "--n", min=0, help="How many samples to show."),
) -> None:
    """Show the first samples as the model will see them, trained spans highlighted, with token counts."""
    from rich.console import Console

    import engine
    from engine.data.loader import load_examples
    from engine.data.preview import preview_data
    from engine.config.paths import dataset_dir_of
    from engine.errors import ConfigError
    from engine.models.loading import load_tokenizer
    from engine.models.resolve import resolve_model_path, resolve_template

    console = Console(highlight=False)
    cfg = engine.load_config(config, *(overrides or []))
    if not cfg.dataset:
        raise ConfigError(f"{config} names no dataset: set dataset (e.g. dataset=identity).")
    dataset_dir = dataset_dir_of(cfg)
    examples = load_examples(cfg.dataset, dataset_dir, max_samples=cfg.max_samples, ranking=cfg.stage == "dpo")
    model_path = resolve_model_path(cfg)
    tokenizer = load_tokenizer(model_path, trust_remote_code=cfg.trust_remote_code)
    template = resolve_template(cfg, model_path, tokenizer)
    result = preview_data(examples, tokenizer, template, cfg.cutoff_len, n=n, train_on_prompt=cfg.train_on_prompt,
                          mask_history=cfg.mask_history)
    print_preview(console, result, dataset_dir)


def print_preview(console, result, dataset_dir: Path) -> None:
    """Samples with trained spans in bold green, then the counts."""
    from rich.text import Text

    console.print(f"template [bold]{safe(result.template)}[/] | data from {safe(dataset_dir)}")
    console.print(Text.assemble("legend: ", ("prompt (not trained)", "dim"), "  ",
                                ("answer (trained)", "bold green")))
    for source, spans in result.shown:
        console.rule(safe(source))
        console.print(Text.assemble(*[(plain(text), "bold green" if trained else "dim") for text, trained in spans]))
    console.rule()
    share = 100 * result.trained_tokens / result.total_tokens if result.total_tokens else 0.0
    console.print(f"rows {result.rows} -> samples {result.samples} | tokens {result.total_tokens:,} "
                  f"(trained {result.trained_tokens:,}, {share:.0f}%) | longest {result.longest}")
    if result.truncated:
        console.print(f"[yellow]{result.truncated} sample(s) were cut to cutoff_len.[/]")
    if result.dropped:
        console.print(f"[yellow]{len(result.dropped)} row(s) dropped: no answer token fits in cutoff_len "
                      f"(first: {safe(result.dropped[0])}).[/]")
