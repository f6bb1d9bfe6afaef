"""`lf-assistant data check|preview|list|templates|add|download`: find every problem in a dataset file; see what training will learn.

Engine pieces are imported inside the commands: importing this module must not import torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from assistant.cli.common import fail_on_engine_error, plain, safe

JSON_HELP = "Print the result as JSON (docs/cli-json.md)."

app = typer.Typer(help="Check, convert and preview datasets.", no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False)

ROWS_SHOWN = 50


@app.command("check")
@fail_on_engine_error
def check(
    file: Path = typer.Argument(..., help="A data file: json, jsonl, csv, parquet or arrow.", show_default=False),
    file_format: Optional[str] = typer.Option(None, "--format", help="Read the file as alpaca, sharegpt, openai "
                                         "(OpenAI messages with tool calls) or text (pre-training); default: detected."),
    fix: Optional[Path] = typer.Option(None, "--fix", metavar="OUT", help="Write a repaired copy to OUT (.json or "
                                       ".jsonl, a new file); the input is never changed."),
    fill: Optional[List[str]] = typer.Option(None, "--fill", metavar="NAME=VALUE", help="With --fix: replace "
                                             "{{NAME}} placeholders by VALUE (repeatable)."),
    show_all: bool = typer.Option(False, "--all", help=f"List every problem (default: the first {ROWS_SHOWN})."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """List every problem of a dataset file with its row number; exit 1 when there are errors."""
    from rich.console import Console

    from engine.data.check import check_file, check_text_file, convert_file, looks_like_text
    from engine.data.files import read_rows

    console = Console(highlight=False)
    if file_format is not None and file_format not in ("alpaca", "sharegpt", "openai", "text"):
        raise typer.BadParameter(f"{file_format!r} is not a format; use alpaca, sharegpt, openai or text.",
                                 param_hint="--format")
    values = _parse_fill(fill or [])
    if values and fix is None:
        raise typer.BadParameter("--fill writes the values into a copy, so it needs --fix OUT.", param_hint="--fill")
    text = file_format == "text" or (file_format is None and looks_like_text(file, read_rows(file).rows))
    if text and fix is not None:
        raise typer.BadParameter("--fix repairs conversations and pairs; pre-training text has nothing to convert.",
                                 param_hint="--fix")
    report = check_text_file(file) if text else check_file(file, formatting=file_format)
    fixed = convert_file(file, fix, formatting=file_format, placeholders=values or None) if fix else None
    if json_out:
        from assistant.cli.jsonout import emit

        emit(dict(_report_document(report), fixed=_report_document(fixed) if fixed else None))
        raise typer.Exit(0 if (fixed or report).ok else 1)
    _print_report(console, report, show_all)
    if fixed is None:
        raise typer.Exit(0 if report.ok else 1)
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


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def _report_document(report) -> dict:
    from assistant.cli.jsonout import document

    problems = [document("PROBLEM", vars(problem)) for problem in report.problems]
    return document("data check", {"path": str(report.path), "format": report.format, "ranking": report.ranking,
                                   "rows": report.rows, "ok": report.ok, "errors": len(report.errors),
                                   "warnings": len(report.warnings), "problems": problems,
                                   "suggested_entry": report.suggested_entry(), "notes": report.notes})


def _print_report(console, report, show_all: bool) -> None:
    import json

    from assistant.cli.tables import Column, print_table

    errors, warnings = len(report.errors), len(report.warnings)
    kind = f"{report.format}{' preference pairs' if report.ranking else ''}"
    status = "[green]ok[/]" if report.ok else f"[bold red]{errors} error(s)[/]"
    console.print(f"[bold]{safe(report.path)}[/]: {kind}, {report.rows} rows: {status}"
                  + (f", [yellow]{warnings} warning(s)[/]" if warnings else ""))
    if report.problems:
        shown = report.problems if show_all else report.problems[:ROWS_SHOWN]
        columns = [Column("row", justify="right"), Column("line", justify="right", drop=1), Column("field"),
                   Column("level"), Column("problem", wrap=True)]
        rows = [["-" if problem.row is None else str(problem.row), "" if problem.line is None else str(problem.line),
                 safe(problem.field or ""), f"[{'red' if problem.level == 'error' else 'yellow'}]{problem.level}[/]",
                 safe(problem.message)] for problem in shown]
        print_table(console, columns, rows)
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
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show the first samples as the model will see them, trained spans highlighted, with token counts."""
    from rich.console import Console

    import engine
    from engine.data.loader import data_options, load_examples, load_texts
    from engine.data.preview import preview_data, preview_text
    from engine.config.paths import dataset_dir_of
    from engine.errors import ConfigError
    from engine.models.loading import load_tokenizer
    from engine.models.resolve import resolve_model_path, resolve_template

    console = Console(highlight=False)
    cfg = engine.load_config(config, *(overrides or []))
    if not cfg.dataset:
        raise ConfigError(f"{config} names no dataset: set dataset (e.g. dataset=identity).")
    dataset_dir = dataset_dir_of(cfg)
    model_path = resolve_model_path(cfg)
    tokenizer = load_tokenizer(model_path, trust_remote_code=cfg.trust_remote_code)
    template = resolve_template(cfg, model_path, tokenizer)
    if cfg.stage == "pt":  # raw text cut into rows, as the pre-training recipe reads it
        texts = load_texts(cfg.dataset, dataset_dir, **data_options(cfg))
        from engine.data.chunks import preprocessing_chunks

        chunks = preprocessing_chunks(len(texts), cfg.preprocessing_batch_size, cfg.preprocessing_num_workers)
        from engine.data.pretrain import pretrain_block

        result = preview_text(texts, tokenizer, template, pretrain_block(cfg), n=n, packing=cfg.packing_enabled,
                              control_tokens_in_text=cfg.allow_special_tokens_in_text, chunks=chunks)
    else:  # dpo and rm read chosen/rejected pairs; kto rows show whether their answer is marked desirable
        examples = load_examples(cfg.dataset, dataset_dir, **data_options(cfg), ranking=cfg.stage in ("dpo", "rm"))
        result = preview_data(examples, tokenizer, template, cfg.cutoff_len, n=n,
                              train_on_prompt=cfg.train_on_prompt, mask_history=cfg.mask_history)
    if json_out:
        from assistant.cli.jsonout import document, emit

        shown = [{"source": source, "spans": [{"text": text, "trained": trained} for text, trained in spans]}
                 for source, spans in result.shown]
        emit(document("data preview", {**vars(result), "dataset_dir": str(dataset_dir.resolve()), "shown": shown}))
        return
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
    if result.untrained:
        console.print(f"[yellow]{len(result.untrained)} row(s) train nothing: no answer token fits in cutoff_len "
                      f"(first: {safe(result.untrained[0])}). They are kept, as LLaMA-Factory keeps them (they count "
                      "in its steps).[/]")


@app.command("list")
@fail_on_engine_error
def list_datasets(
    dataset_dir: Optional[Path] = typer.Option(None, "--dataset-dir", help="Folder holding dataset_info.json "
                                               "(default ./data, else the demo data shipped with lf-assistant)."),
    pairs: bool = typer.Option(False, "--pairs", help="For preference training (stage: dpo): only pairs are "
                               "available."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """The datasets registered in dataset_info.json: the names `dataset:` takes, and which can train here."""
    from rich.console import Console

    from engine.data.registry import find_dataset_dir

    from assistant.cli.tables import Column, print_table
    from assistant.wizard.stages import data as data_stage

    folder = find_dataset_dir(str(dataset_dir) if dataset_dir else data_stage.default_dir()).resolve()
    rows = data_stage.list_datasets(folder, ranking=pairs)
    if json_out:
        from assistant.cli.jsonout import document, emit

        datasets = [document("DATASET", vars(row)) for row in rows]
        emit(document("data list", {"dataset_dir": str(folder), "datasets": datasets}))
        return
    console = Console(highlight=False)
    columns = [Column("name"), Column("format", drop=2), Column("pairs", drop=1), Column("usable"),
               Column("note", wrap=True, min_width=16)]
    print_table(console, columns, [[safe(r.name), safe(r.formatting), "yes" if r.ranking else "no",
                                    "[green]yes[/]" if r.available else "[dim]no[/]", safe(r.note)] for r in rows],
                title=f"{safe(folder)}/dataset_info.json")


@app.command("templates")
@fail_on_engine_error
def templates(
    pattern: Optional[str] = typer.Argument(None, help="Only templates whose name contains this text.",
                                            show_default=False),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """The chat templates `template:` takes (LLaMA-Factory's names), or `auto` for the model's own."""
    from rich.console import Console

    from engine.data.templates import TEMPLATES

    from assistant.cli.tables import Column, print_table

    chosen = [t for name, t in TEMPLATES.items() if pattern is None or pattern.lower() in name.lower()]
    if json_out:
        from assistant.cli.jsonout import document, emit

        emit(document("data templates", {"templates": [document("TEMPLATE", vars(t)) for t in chosen]}))
        return
    console = Console(highlight=False)
    if not chosen:
        console.print(f"No template name contains {safe(pattern)!r}; `lf-assistant data templates` lists all.")
        raise typer.Exit(1)
    columns = [Column("template"), Column("reasoning", drop=1), Column("tool format", drop=1),
               Column("default system prompt", wrap=True, min_width=16)]
    print_table(console, columns, [[safe(t.name), "yes" if t.reasoning else "", safe(t.tool_format),
                                    safe(t.default_system.strip())] for t in chosen],
                title=f"{len(chosen)} chat templates; template: auto uses the model's own")


@app.command("add")
@fail_on_engine_error
def add(
    file: Path = typer.Argument(..., help="Your data file (json, jsonl, csv, parquet, arrow); it is never changed.",
                                show_default=False),
    name: str = typer.Option(..., "--name", help="The dataset's name in dataset_info.json (what `dataset:` takes).",
                             show_default=False),
    dataset_dir: Path = typer.Option(Path("data"), "--dataset-dir", help="Folder holding dataset_info.json."),
    convert: bool = typer.Option(False, "--convert", help="Write a converted, repaired copy (.json) instead of a "
                                 "plain copy (see `data check --fix`)."),
    pairs: bool = typer.Option(False, "--pairs", help="The file holds preference pairs (for stage: dpo)."),
) -> None:
    """Copy a checked data file into the dataset folder and register it in dataset_info.json (atomically)."""
    from engine.data.registry import find_dataset_dir
    from engine.errors import DataError

    from assistant.wizard.stages import data as data_stage

    if not file.is_file():
        raise DataError(f"{file} is not a file.")
    folder = find_dataset_dir(str(dataset_dir)).resolve()
    record, problems = data_stage.bring_in(folder, file.resolve(), name, convert=convert, ranking=pairs)
    if record is None:
        raise DataError(f"{file} was not added:\n" + "\n".join(problems))
    typer.echo(f"added {record['name']}: {record['file']} (registered in {folder / 'dataset_info.json'}); "
               f"train on it with dataset={record['name']} dataset_dir={folder}")


@app.command("download")
@fail_on_engine_error
def download(
    name: str = typer.Argument(..., help="A hub dataset registered in dataset_info.json (hf_hub_url or ms_hub_url).",
                               show_default=False),
    dataset_dir: Path = typer.Option(Path("data"), "--dataset-dir", help="Folder holding dataset_info.json."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Where hub datasets are kept (a config's "
                                             "cache_dir; default: the Hugging Face datasets cache)."),
) -> None:
    """Download a hub dataset into the cache training reads it from (resumable: run it again after a cancel),
    then check every file."""
    from rich.console import Console

    from engine.data.hub import hub_dataset, is_cached, snapshot_dir
    from engine.data.registry import find_dataset_dir, get_dataset_spec
    from engine.models.dataset_download import start_dataset_download

    from assistant.cli.models import follow_to_end

    console = Console(highlight=False)
    spec = get_dataset_spec(name, find_dataset_dir(str(dataset_dir)))
    cache = str(cache_dir) if cache_dir else None
    ref = hub_dataset(spec)
    if ref.source != "script" and is_cached(ref, cache):
        console.print(f"[green]{safe(name)}: already downloaded and complete in {safe(snapshot_dir(ref, cache))}[/]")
        return
    job = start_dataset_download(spec, cache)
    console.print(f"{safe(job.progress.message)}\n-> {safe(job.target)}", soft_wrap=True)
    final = follow_to_end(job)
    console.print(f"[green]{safe(name)}: {safe(final.message)}[/green]", soft_wrap=True)
