"""`lf-assistant train`: train from a YAML config, here (with a progress bar) or detached."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import typer

from assistant.cli.common import fail_on_engine_error, plain, safe
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
    gpus: Optional[str] = typer.Option(None, "--gpus", metavar="0,1", help="GPU indices to train on (as `gpus` "
                                       "numbers them; one process each). Default: every visible device."),
    nproc_per_node: Optional[int] = typer.Option(None, "--nproc-per-node", help="Processes on this machine "
                                                 "(torchrun); default: from the GPU choice or the config."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead (docs/cli-json.md): the check with "
                                  "--check, else the run's status once started (--detach) or ended."),
) -> None:
    """Fine-tune a model from a YAML config. Writes lf_runs/<run_id>/ (config, log, metrics, status) and the
    adapter or model into output_dir."""
    from rich.console import Console

    import engine
    from engine.api import config_warnings
    from engine.names import check_name

    console = Console(highlight=False, stderr=json_out)
    if run_id is not None:
        check_name("run id", run_id)
    if gpus:
        _gpu_indices(gpus)  # a mistyped --gpus is refused with --check too
    config = _shipped_if_missing(config, console)
    cfg = engine.load_config(config, *(overrides or []))
    if nproc_per_node is not None:  # before validation: its range is checked with the config's keys
        cfg.nproc_per_node = nproc_per_node
    skipped = list(cfg.unused_keys)
    problems = engine.validate(cfg)
    if check and not problems:
        found: dict = {}  # the tokenizer and template, and the train rows, as the two checks read them
        problems = _template_problems(cfg, found) or _data_problems(cfg, found) or _trained_token_problems(cfg, found)
    if json_out and (check or problems):
        _emit_check(config, cfg, skipped, problems)
        raise typer.Exit(2 if problems else 0)
    if problems:  # (the keys accepted but not used are listed once the config can run)
        console.print(f"[bold red]{safe(config)}: {len(problems)} problem(s)[/]")
        for problem in problems:
            lines = safe(problem, keep_layout=True).replace("\n", "\n    ")
            console.print(f"  [red]-[/] {lines}", markup=True, soft_wrap=True)
        raise typer.Exit(2)
    if skipped:
        console.print(f"[dim]accepted but not used here: {safe(', '.join(skipped))}[/]")
    for warning in config_warnings(cfg):
        console.print(f"[yellow]warning:[/] {safe(warning)}", soft_wrap=True)
    if check:
        from engine.config.validate import check_notes

        for note in check_notes(cfg):
            console.print(f"[dim]{safe(note)}[/]", soft_wrap=True)
        _print_default_differences(cfg, console)
        console.print(f"[green]{safe(config)}: no problems found.[/]")
        return
    run_dir = _pin_gpus(cfg, gpus, runs_dir, run_id) if gpus else None
    if detach or (cfg.nproc_per_node or 1) > 1:
        _train_detached(cfg, console, detach=detach, json_out=json_out, runs_dir=runs_dir, run_id=run_id,
                        run_dir=run_dir)
        return
    _train_with_progress(cfg, console, runs_dir=runs_dir, run_id=run_id, run_dir=run_dir, json_out=json_out)


def _shipped_if_missing(config: Path, console) -> Path:
    """`examples/...` named from a folder that has none (an installed lf-assistant): the example it ships."""
    from engine.resources import shipped_example

    if config.exists():
        return config
    shipped = shipped_example(config)
    if shipped is None:
        return config
    console.print(f"[dim]{safe(config)} is not here; using the example shipped with lf-assistant: {safe(shipped)}[/]",
                  soft_wrap=True)
    return shipped


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


def _template_problems(cfg, found: dict) -> list[str]:
    """What the chat template says once it meets the model's tokenizer (control tokens it lacks, say), as training
    would find right after loading it; only for a model folder on this machine (a hub id is not fetched here)."""
    from pathlib import Path

    from engine.errors import EngineError
    from engine.models.loading import load_tokenizer
    from engine.models.resolve import resolve_model_path, resolve_template

    from engine.models.demo import demo_model_path

    folder = Path(cfg.model_name_or_path).expanduser() if cfg.model_name_or_path else demo_model_path()
    if not folder.is_dir() or cfg.trust_remote_code:  # a check runs none of a model's own code
        return []
    try:
        model_path = resolve_model_path(cfg)
        tokenizer = load_tokenizer(model_path, trust_remote_code=False)
        template = resolve_template(cfg, model_path, tokenizer)
    except EngineError as exc:
        return [str(exc)]
    except Exception as exc:  # noqa: BLE001 - a tokenizer transformers cannot read: said, not a traceback
        return [f"The tokenizer in {folder} cannot be read ({type(exc).__name__}: {str(exc)[:200]}); "
                "training would stop there too."]
    if cfg.train_on_prompt and getattr(template, "efficient_eos", False):  # the family's template, when unnamed
        return [f"Template {template.name!r} cannot train on prompts (its answers share one EOS, as LLaMA-Factory "
                "refuses too); set train_on_prompt: false."]
    found.update(tokenizer=tokenizer, template=template)
    return []


def _trained_token_problems(cfg, found: dict) -> list[str]:
    """SFT whose every train row loses its answer (cut off by cutoff_len, or empty): training would stop on it
    only after loading the model. Rows are encoded a chunk at a time until one trains something."""
    if not found.get("rows") or "tokenizer" not in found:
        return []
    from engine.api import untrained_problem

    problem = untrained_problem(cfg, found["tokenizer"], found["template"], found["rows"])
    return [problem] if problem else []


def _data_problems(cfg, found: dict) -> list[str]:
    """What loading the datasets would refuse (bad rows, duplicate keys, invalid text), as problems; the train rows
    go into ``found`` when every training dataset could be read."""
    from engine.config.paths import dataset_dir_of
    from engine.data.loader import load_examples, load_texts, split_names
    from engine.errors import DataError

    from engine.data.hub import hub_dataset, is_cached
    from engine.data.registry import get_dataset_spec
    from engine.data.tokenized import has_tokenized

    if cfg.tokenized_path and has_tokenized(cfg.tokenized_path):
        return []  # the saved samples are read, not the datasets
    try:
        dataset_dir = dataset_dir_of(cfg)
        for names, training in ((cfg.dataset, True), (cfg.eval_dataset, False)):
            # Hub datasets not downloaded yet are listed (check_notes), not read: training downloads them.
            readable = [n.strip() for n in (names or "").split(",") if n.strip() and _on_disk(
                get_dataset_spec(n.strip(), dataset_dir), cfg.cache_dir, hub_dataset, is_cached)]
            if not readable:
                continue
            # the rows training reads (the seed draws num_samples); the mix is left out: only some may be on disk
            options = {"max_samples": cfg.max_samples, "seed": cfg.seed, "cache_dir": cfg.cache_dir}
            if cfg.stage == "pt":
                load_texts(readable, dataset_dir, **options)
                continue
            rows = load_examples(readable, dataset_dir, **options, ranking=cfg.stage in ("dpo", "rm"))
            if training and len(readable) == len(split_names(names)):  # every training dataset is on disk
                found["rows"] = rows
    except DataError as exc:
        return [str(exc)]
    return []


def _on_disk(spec, cache_dir, hub_dataset, is_cached) -> bool:
    if spec.is_local or spec.script_url:
        return True
    ref = hub_dataset(spec)
    return is_cached(ref, cache_dir)


def _emit_check(config: Path, cfg, skipped: list[str], problems: list[str]) -> None:
    """The `train --check --json` document: the resolved settings and what the overrides changed."""
    import engine
    from engine.config import config_to_dict

    from assistant.cli.jsonout import document, emit

    settings = config_to_dict(cfg)
    original = config_to_dict(engine.load_config(config))
    changed = {key: {"from": original.get(key), "to": value} for key, value in settings.items()
               if original.get(key) != value}
    from engine.config.validate import check_notes

    emit(document("train --check", {"config": str(config), "ok": not problems, "problems": problems,
                                    "ignored_keys": skipped, "settings": settings, "changed": changed,
                                    "notes": check_notes(cfg)}))


def _gpu_indices(gpus: str) -> list[int]:
    """The indices --gpus names; DeviceError when it is not a comma-separated list of them."""
    from engine.errors import DeviceError

    try:
        indices = [int(part) for part in gpus.split(",") if part.strip()]
    except ValueError:
        raise DeviceError(f"--gpus {gpus!r}: give GPU indices separated by commas, e.g. 0,1.") from None
    if not indices:
        raise DeviceError("--gpus: name at least one GPU index, e.g. --gpus 0.")
    return indices


def _pin_gpus(cfg, gpus: str, runs_dir, run_id) -> Path:
    """Prepare the run folder with the GPU choice (device.json), as the wizard's GPU stage does: the launcher,
    resume-train and the wizard's later stages all read it. In-process training gets the visibility variable
    here, before CUDA starts."""
    from engine.api import prepare_run
    from engine.devices import check_process_count, detect_devices, make_choice, save_choice

    choice = make_choice(detect_devices(), _gpu_indices(gpus))
    if cfg.nproc_per_node:
        check_process_count(choice, cfg.nproc_per_node)
    else:
        cfg.nproc_per_node = choice.nproc
    _resolved, run = prepare_run(cfg, runs_dir=runs_dir, run_id=run_id)
    save_choice(choice, run.path)
    pinned = choice.launch_env()
    for key in set(os.environ) - set(pinned):  # ROCm: a leftover CUDA_VISIBLE_DEVICES would narrow the choice
        del os.environ[key]
    os.environ.update(pinned)
    return run.path


def _train_detached(cfg, console, *, detach: bool, json_out: bool, runs_dir, run_id, run_dir) -> None:
    import engine
    from assistant.command import run_command

    handle = engine.train(cfg, detach=True, runs_dir=runs_dir, run_id=run_id, run_dir=run_dir,
                          nproc_per_node=cfg.nproc_per_node)
    if not detach:
        console.print(f"run [bold]{safe(handle.run_id)}[/] started with {cfg.nproc_per_node} processes")
        status = handle.wait()
        if json_out:
            _emit_status(handle)
        else:
            console.print(f"[bold]{safe(status.state)}[/]: {safe(status.exit_reason or '')}")
            console.print(f"  run folder : {safe(handle.path)}\n  output     : {safe(status.output_dir)}")
        if status.state != "completed":
            raise typer.Exit(1)
        return
    if json_out:
        _emit_status(handle)
        return
    console.print(f"started run [bold]{safe(handle.run_id)}[/] (pid {handle.process.pid})")
    console.print(f"  folder: {safe(handle.path)}")
    console.print(f"  follow: {plain(run_command('status', handle.run_id, runs_dir, '--follow'))}", markup=False)


def _emit_status(handle) -> None:
    import engine
    from assistant.cli.jsonout import emit
    from assistant.cli.runs import status_document

    run = engine.runs.get(str(handle.path))
    emit(status_document(run, run.read_status()))


def _train_with_progress(cfg, console, *, runs_dir, run_id, run_dir, json_out: bool) -> None:
    import engine

    handle = run_with_progress(console, lambda on_log: engine.train(
        cfg, runs_dir=runs_dir, run_id=run_id, run_dir=run_dir, on_log=on_log), quiet=json_out)
    report_end(handle, console, json_out=json_out)


class _RunClock:
    """The bar's elapsed time and ETA as the run counts them: elapsed over every attempt (a resumed run goes on
    from the interrupted one's; model loading before the first step is not training), the ETA at this attempt's
    pace. Both come with each logged row and tick on between rows."""

    def __init__(self) -> None:
        self.elapsed_s: float | None = None
        self.eta_s: float | None = None
        self.at = 0.0

    def update(self, row: dict) -> None:
        import time

        self.elapsed_s, self.eta_s, self.at = row.get("elapsed_s"), row.get("eta_s"), time.monotonic()

    def text(self) -> str:
        import time

        since = time.monotonic() - self.at
        elapsed = None if self.elapsed_s is None else self.elapsed_s + since
        eta = None if self.eta_s is None else max(self.eta_s - since, 0.0)
        return f"{fmt_duration(elapsed)} elapsed, ETA {fmt_duration(eta)}"


def run_with_progress(console, start, *, quiet: bool = False):
    """``start(on_log)`` trains in this process; meanwhile a bar shows step/total, the loss, and the run's own
    elapsed time and ETA, with the run's messages above it. Returns what ``start`` returns (the run's handle)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn
    from rich.text import Text

    clock = _RunClock()

    class ClockColumn(ProgressColumn):
        def render(self, task) -> Text:
            return Text(clock.text(), style="progress.elapsed")

    progress = Progress(TextColumn("[bold]training"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("loss {task.fields[loss]}"), ClockColumn(), console=console, transient=False,
                        disable=quiet)
    task = progress.add_task("train", total=None, loss="-")
    shown = []  # the bar appears with the run's first line: a config refused before that draws no empty bar

    def on_log(row: dict) -> None:
        if not shown:
            progress.start()
            shown.append(True)
        if "step" in row and "loss" in row:
            clock.update(row)
            progress.update(task, completed=row["step"], total=row["total_steps"], loss=f"{row['loss']:.4f}")
        elif "eval_loss" in row:
            progress.console.print(f"  step {row['step']}: eval loss {row['eval_loss']:.4f}")
        elif "message" in row and row["message"].startswith(("NOTE", "resumed", "data:", "stage", "trainable")):
            progress.console.print(f"[dim]{safe(row['message'])}[/]")

    try:
        return start(on_log)
    finally:
        if shown:
            progress.stop()


def report_end(handle, console, *, json_out: bool) -> None:
    """How a run trained in this process ended: its state, steps, time, final loss and folders (exit 1 unless it
    completed), or its status document with --json."""
    status = handle.status()
    if json_out:
        _emit_status(handle)
    else:
        final = status.final_loss
        ended = f": {safe(status.exit_reason)}" if status.exit_reason and status.exit_reason != "completed" else ""
        console.print(f"[bold green]{safe(status.state)}[/]: {status.step} steps in "
                      f"{fmt_duration(status.runtime_s)}, final loss {final:.4f}" if final is not None else
                      f"[bold]{safe(status.state)}[/]{ended}", soft_wrap=True)
        console.print(f"  run folder : {safe(handle.path)}")
        console.print(f"  output     : {safe(status.output_dir)}")
        if status.loss_plot:
            console.print(f"  loss plot  : {safe(status.loss_plot)}")
    if status.state != "completed":
        raise typer.Exit(1)
