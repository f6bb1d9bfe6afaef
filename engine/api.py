"""The public face of the engine: load and validate configs, train (in this process or detached), resume, stop.

This module is the launcher: it alone, with the training process, writes a run's status. It takes the run
folder's and the output folder's locks before it writes anything and hands them to the process it starts, so two
trainings can never share a folder. Nothing here imports torch at module import; the TUI and the CLI stay fast.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from engine.config import TrainConfig, config_to_dict, dump_yaml, ignored_keys, load_config, read_yaml  # noqa: F401
from engine.config import validate as _validate
from engine.config import warnings as _warnings
from engine.errors import ConfigError, EngineError
from engine.messages import Message
from engine.names import check_name
from engine.ownership import Lock, acquire, handover_env, holds_lock, marker_run, output_dir_problem
from engine.runstatus import LIVE_STATES, ProcessIdentity, RunState, RunStatus, load_status_file
from engine.rundir import RunDir, find_run, new_run_id, runs_root


def validate(config: TrainConfig) -> list[str]:
    """Every problem of the config as a sentence that says what to change; [] when it can run."""
    return _validate(config)


def untrained_problem(config: TrainConfig, tokenizer, template, rows: list[dict]) -> str | None:
    """For SFT: the sentence training would stop with when no train row keeps a trained token (every answer cut
    off by cutoff_len, or empty), found before any model is loaded; None when some row trains. ``rows``: the
    dataset's examples (engine.data.loader.load_examples), split by val_size as training splits them."""
    if config.stage != "sft":
        return None
    from engine.recipes.sft import NOTHING_TRAINED, trains_nothing
    from engine.training.loop import split_validation

    train_rows, _ = split_validation(rows, config.val_size, config.seed)
    if train_rows and trains_nothing(train_rows, tokenizer, template, config):
        return f"{NOTHING_TRAINED.rstrip('.')} (cutoff_len is {config.cutoff_len})."
    return None


def config_warnings(config: TrainConfig) -> list[str]:
    """What the config allows but probably does not mean (e.g. a LoRA rank as wide as the layers)."""
    return _warnings(config)


@dataclass
class RunHandle:
    """A training run: its folder, and the process when it runs detached."""

    run: RunDir
    process: subprocess.Popen | None = None

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def path(self) -> Path:
        return self.run.path

    def status(self) -> RunStatus:
        return self.run.read_status()

    def metrics(self) -> list[dict]:
        return self.run.read_metrics()

    def wait(self, timeout: float | None = None, poll_s: float = 0.5) -> RunStatus:
        """Block until the run reaches completed / failed / stopped (judged by status.json, not the launcher)."""
        deadline = None if timeout is None else time.time() + timeout
        while True:
            if self.process is not None:
                self.process.poll()  # reap the child so a dead process is seen as dead
            status = self.run.read_status()
            if status.is_terminal:
                return status
            if deadline is not None and time.time() > deadline:
                raise TimeoutError(f"run {self.run_id} still {status.state} after {timeout} s")
            time.sleep(poll_s)


def _run_folder(config: TrainConfig, runs_dir, run_id: str | None, run_dir) -> tuple[RunDir, bool]:
    """The run folder, created now (a generated id never reuses a folder). Returns (run, created)."""
    if run_dir is not None:
        path = Path(run_dir)
        created = not path.exists()
        path.mkdir(parents=True, exist_ok=True)
        return RunDir(path), created
    root = runs_root(runs_dir)
    if root.exists() and not root.is_dir():
        raise EngineError(f"The runs folder {root} is a file, not a folder. Give --runs-dir (or $LFA_RUNS_DIR) a "
                          "folder, or leave it out for ./lf_runs.")
    root.mkdir(parents=True, exist_ok=True)
    if run_id is not None:
        path = root / check_name("run id", run_id)
        created = not path.exists()
        path.mkdir(exist_ok=True)
        return RunDir(path), created
    base_id = candidate = new_run_id(config.model_name_or_path or "lf-tiny-qwen3", config.method)
    for counter in range(2, 10_000):
        try:
            (root / candidate).mkdir()
            return RunDir(root / candidate), True
        except FileExistsError:
            candidate = f"{base_id}-{counter}"
    raise EngineError(f"Too many runs named {base_id} under {root}.")


def _resolve_paths(config: TrainConfig, run: RunDir) -> TrainConfig:
    """Absolute paths, so the saved config reproduces the run from anywhere."""
    from engine.config.paths import dataset_dir_of
    from engine.rundir import default_output_dir

    dataset_dir = dataset_dir_of(config)
    resolved = replace(config, dataset_dir=str(dataset_dir.resolve()))
    if resolved.model_name_or_path and Path(resolved.model_name_or_path).expanduser().exists():
        resolved.model_name_or_path = str(Path(resolved.model_name_or_path).expanduser().resolve())
    if not resolved.output_dir:
        resolved.output_dir = default_output_dir(config.model_name_or_path or "lf-tiny-qwen3", config.method,
                                                 run.run_id, config.stage)
    resolved.output_dir = str(Path(resolved.output_dir).expanduser().resolve())
    if resolved.tokenized_path:  # relative to the working dir, as LLaMA-Factory reads it
        resolved.tokenized_path = str(Path(resolved.tokenized_path).expanduser().resolve())
    if resolved.deepspeed and not Path(resolved.deepspeed).is_absolute():
        from engine.config.paths import find_relative_file

        found = find_relative_file(resolved.deepspeed, config.base_dir())
        resolved.deepspeed = str(found or (config.base_dir() / resolved.deepspeed).resolve())
    resolved.config_dir = str(run.path.resolve())
    return resolved


def _prepare(config: TrainConfig, *, runs_dir=None, run_id=None, run_dir=None) -> tuple[TrainConfig, RunDir,
                                                                                         list[Lock]]:
    """Validate, take the run folder's and output folder's locks, check the disk, write the config and a pending
    status. Returns the locks still held; on any problem nothing of the user's is touched and they are dropped."""
    problems = _validate(config)
    if problems:
        raise ConfigError("The config has problems:\n- " + "\n- ".join(problems))
    run, created = _run_folder(config, runs_dir, run_id, run_dir)
    locks: list[Lock] = []
    made_output = False
    try:
        locks.append(acquire(run.path, run_id=run.run_id, what="run folder"))
        if load_status_file(run.status_path).state != RunState.PENDING:
            raise EngineError(f"Run folder {run.path} already holds a run. Choose another run id.")
        resolved = _resolve_paths(config, run)
        new_output = not Path(resolved.output_dir).exists()
        locks.append(acquire(resolved.output_dir, run_id=run.run_id, what="output_dir"))
        made_output = new_output  # only once its lock is ours: a folder another run just made is never cleaned
        # Only checked here: the folder is claimed (and an earlier run's results removed) as training starts
        problem = output_dir_problem(resolved.output_dir, run.run_id, overwrite=resolved.overwrite_output_dir,
                                     resume=bool(resolved.resume_from_checkpoint))
        if problem:
            raise EngineError(problem)
        from engine.preflight import check_before_training

        notes = check_before_training(resolved, resolved.model_name_or_path, run.path, Path(resolved.output_dir))
        dump_yaml(config_to_dict(resolved), run.path / f"{config.stage}.yaml")
        run.update_status(state=RunState.PENDING, run_id=run.run_id, model=config.model_name_or_path or "lf-tiny-qwen3",
                          method=config.method, stage=config.stage, output_dir=resolved.output_dir,
                          created_at=time.time(), notes=notes, **_resume_progress(resolved))
    except BaseException:
        for lock in locks:
            lock.release()
        if created:
            _remove_if_only_lock(run.path)
        if made_output:  # a refused run leaves no empty output_dir behind
            _remove_if_only_lock(Path(resolved.output_dir))
        raise
    return resolved, run, locks


def _resume_progress(config: TrainConfig) -> dict:
    """A run that starts from a checkpoint is at that checkpoint's step from the first: its status says so (and
    the total it was planned for) while the model loads, instead of step 0 of an unknown total."""
    from engine.rundir import checkpoint_progress, resolve_resume

    try:
        folder = resolve_resume(config.resume_from_checkpoint, Path(config.output_dir))
    except ConfigError:
        return {}  # training says what is wrong with it
    progress = checkpoint_progress(folder) if folder else None
    if progress is None:
        return {}
    step, total = progress
    return {"step": step, **({"total_steps": total} if total else {})}


def _remove_if_only_lock(folder: Path) -> None:
    """A run folder this call created and nothing but its lock file went into: take it away again."""
    from engine.ownership import LOCK_NAME

    if folder.is_dir() and all(p.name == LOCK_NAME for p in folder.iterdir()):
        (folder / LOCK_NAME).unlink(missing_ok=True)
        folder.rmdir()


def prepare_run(config: TrainConfig, *, runs_dir: str | Path | None = None, run_id: str | None = None,
                run_dir: str | Path | None = None) -> tuple[TrainConfig, RunDir]:
    """Create the run folder and write its resolved, self-contained config before anything trains."""
    resolved, run, locks = _prepare(config, runs_dir=runs_dir, run_id=run_id, run_dir=run_dir)
    for lock in locks:
        lock.release()
    return resolved, run


def train(config: TrainConfig | str | Path | dict, *, detach: bool = False, runs_dir: str | Path | None = None,
          run_id: str | None = None, run_dir: str | Path | None = None, env: dict[str, str] | None = None,
          on_log: Callable[[dict], None] | None = None, stop=None, nproc_per_node: int | None = None) -> RunHandle:
    """Train. ``detach=True`` starts a separate process that outlives this one and returns at once;
    otherwise training runs here and the handle returns when it has ended (status says how).

    ``env`` adds environment variables to the detached process (e.g. CUDA_VISIBLE_DEVICES from the GPU choice).
    ``stop`` (an engine.training.loop.StopFlag) lets the caller end an in-process run cleanly after a step.
    ``nproc_per_node`` > 1 (or a multi-GPU choice in the run folder) trains through torchrun, always in child
    processes; without ``detach`` this call then waits for them.
    """
    if not isinstance(config, TrainConfig):
        config = load_config(config)
    resolved, run, locks = _prepare(config, runs_dir=runs_dir, run_id=run_id, run_dir=run_dir)
    nproc_per_node = nproc_per_node or resolved.nproc_per_node
    if detach or (nproc_per_node or 1) > 1:
        handle = RunHandle(run, launch_detached(run, resolved.stage, env=env, nproc_per_node=nproc_per_node,
                                                locks=locks))
        if not detach:
            wait_and_record(handle)
        return handle
    _train_here(resolved, run, locks, on_log, stop)
    return RunHandle(run, None)


def wait_and_record(handle: RunHandle) -> RunStatus:
    """Wait for the launched processes; if they ended without recording an end, record that (as the launcher)."""
    code = handle.process.wait()
    if not handle.run.read_status().is_terminal:
        reason = f"training processes exited with code {code} before recording an end; see {handle.run.log_path}"
        handle.run.append_event("failed", reason=reason)
        said = Message("run.exited_early", reason, {"code": code, "log": str(handle.run.log_path)})
        handle.run.update_status(state=RunState.FAILED, finished_at=time.time(), exit_reason=reason,
                                 exit_message=said.to_dict())
    return handle.run.read_status()


def _train_here(config: TrainConfig, run: RunDir, locks: list[Lock], on_log, stop=None) -> RunStatus:
    from engine.recipes import run_stage
    from engine.recipes.entry import record_failure
    from engine.training.loop import StopFlag

    run.update_status(state=RunState.RUNNING, process=ProcessIdentity.current(), started_at=time.time())
    try:
        return run_stage(config, run, on_log=on_log, stop=stop or StopFlag())
    except KeyboardInterrupt:
        run.update_status(state=RunState.STOPPED, finished_at=time.time(), exit_reason="interrupted (Ctrl-C)",
                          exit_message=Message("run.interrupted", "interrupted (Ctrl-C)").to_dict())
        raise
    except EngineError as exc:
        record_failure(run, exc)
        raise
    except Exception as exc:
        record_failure(run, exc)
        raise
    finally:
        for lock in locks:
            lock.release()


def _take_locks(run: RunDir, output_dir: str | None) -> list[Lock]:
    locks = [acquire(run.path, run_id=run.run_id, what="run folder")]
    try:
        if output_dir:
            locks.append(acquire(output_dir, run_id=run.run_id, what="output_dir"))
    except BaseException:
        locks[0].release()
        raise
    return locks


def launch_detached(run: RunDir, stage: str = "sft", *, env: dict[str, str] | None = None,
                    nproc_per_node: int | None = None, locks: list[Lock] | None = None) -> subprocess.Popen:
    """Start the recipe as its own session (it survives the terminal closing); output goes to train.log.

    The run's locks (taken here unless given) pass to the new process, which holds them until it ends. Several
    processes (``nproc_per_node``, the config's nproc_per_node, or the GPU choice in device.json) start through
    torchrun, every rank's output prefixed with its rank in train.log."""
    from engine.parallel.launch import plan_launch

    if locks is None:
        locks = _take_locks(run, run.read_status().output_dir)
    try:
        plan = plan_launch(run.path, stage, nproc_per_node=nproc_per_node)
        command = plan.local_command()
        child_env = {**os.environ, **plan.env, **(env or {}), "PYTHONUNBUFFERED": "1", **handover_env(locks)}
        # The package must be importable from the child even when started outside the repo.
        root = str(Path(__file__).resolve().parent.parent)
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (root, child_env.get("PYTHONPATH", "")) if p)
        with open(run.log_path, "a", encoding="utf-8") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=child_env, start_new_session=True, cwd=os.getcwd(),
                                       pass_fds=[lock.fd for lock in locks if lock.fd is not None])
        run.update_status(process=ProcessIdentity.of(process.pid), started_at=time.time(), command=command)
        run.append_event("launched", pid=process.pid, command=command)
    finally:
        for lock in locks:  # the child holds them now (or nobody does, if it could not start)
            lock.release()
    return process


def plan_launch(run_dir: str | Path, stage: str = "sft", **options):
    """How a prepared run folder is started on several processes or nodes (engine.parallel.launch.LaunchPlan)."""
    from engine.parallel.launch import plan_launch as _plan

    return _plan(run_dir, stage, **options)


def resume(run_id: str, *, runs_dir: str | Path | None = None, detach: bool = True,
           env: dict[str, str] | None = None, checkpoint: str | int | None = None,
           on_log: Callable[[dict], None] | None = None) -> RunHandle:
    """Continue a failed or stopped run from its newest complete checkpoint (or ``checkpoint``: N or
    checkpoint-N of its output_dir, e.g. when the newest is damaged), in the same run folder. Without
    ``detach`` it trains here, ``on_log`` seeing each log row as in ``train``."""
    run = find_run(run_id, runs_dir, prefix=False)
    status = run.read_status()
    if status.state == RunState.COMPLETED:
        raise EngineError(f"Run {run.run_id} already completed.")
    if status.state == RunState.FAILED and status.output_dir is None and status.exit_reason:
        raise EngineError(f"Run {run.run_id} cannot be resumed in its folder: {status.exit_reason}")
    if status.never_started:
        raise EngineError(f"Run {run.run_id} was prepared but never started (`launch --print` writes such runs): "
                          f"start it with the command that was printed, or train it in its own folder: "
                          f"`{_start_prepared_command(run, status.stage)}`.")
    start_from = _checkpoint_name(checkpoint, status.output_dir) if checkpoint is not None else "auto"
    locks = _take_locks(run, status.output_dir)  # a live run holds them: refused, naming it
    try:
        owner = marker_run(Path(status.output_dir)) if status.output_dir else None
        if owner not in (None, run.run_id):
            raise EngineError(f"output_dir {status.output_dir} now holds the results of run {owner}; resuming "
                              f"{run.run_id} there would continue from another run's checkpoints.")
        config_path = run.path / f"{status.stage}.yaml"
        data = read_yaml(config_path)
        data["resume_from_checkpoint"] = start_from
        dump_yaml(data, config_path)
        run.clear_stop_request()
        run.update_status(state=RunState.PENDING, exit_reason=None, exit_message=None, finished_at=None,
                          resumed_at=time.time(),
                          eta_s=None)  # the killed attempt's ETA would count down to 0:00 while this one loads
        run.append_event("resume_requested")
    except BaseException:
        for lock in locks:
            lock.release()
        raise
    if detach:
        return RunHandle(run, launch_detached(run, status.stage, env=env, locks=locks))
    _train_here(load_config(config_path), run, locks, on_log)
    return RunHandle(run, None)


def prepared_run_words(run_dir: str | Path, config_file: str) -> list:
    """`train RUN/CONFIG --run-id ID --runs-dir RUNS`: the command's words that train a prepared run (launch
    --print, the wizard's write-only mode) in its own folder rather than a new one (_prepare takes a pending one)."""
    run_dir = Path(run_dir)
    return ["train", run_dir / config_file, "--run-id", run_dir.name, "--runs-dir", run_dir.parent]


def _start_prepared_command(run: RunDir, stage: str) -> str:
    return "lf-assistant " + shlex.join(map(str, prepared_run_words(run.path, f"{stage}.yaml")))


def _checkpoint_name(checkpoint: str | int, output_dir: str | None) -> str:
    """The complete checkpoint of ``output_dir`` that ``checkpoint`` (N or checkpoint-N, nothing else: it stays
    inside the run's output folder) names, as a path."""
    from engine.rundir import find_complete_checkpoints

    name = str(checkpoint).strip()
    name = f"checkpoint-{name}" if name.isdigit() else name
    complete = {p.name: p for p in find_complete_checkpoints(output_dir or "")}
    if not complete:
        raise EngineError(f"--checkpoint {checkpoint!r}: {output_dir} holds no complete checkpoint, so there is "
                          "nothing to resume from. Start the run again (`lf-assistant train` with its config).")
    if name not in complete:
        raise EngineError(f"--checkpoint {checkpoint!r} is not a complete checkpoint of {output_dir}; give N or "
                          f"checkpoint-N of one of: {', '.join(complete)}.")
    return str(complete[name])


def stop(run_id: str, *, runs_dir: str | Path | None = None, force: bool = False) -> RunStatus:
    """Ask a running training to stop: it finishes its step, saves a checkpoint and records "stopped".

    The request is a file in the run folder that every rank agrees on at the next step, so no process is
    signalled. ``force`` also sends SIGTERM to the training's process group, after checking by pid, start time and
    host that it is that training's process and not another that reused its pid, and that it holds the run
    folder's lock (a status file can be edited; the lock cannot be faked by another process)."""
    run = find_run(run_id, runs_dir, prefix=False)
    status = run.read_status()
    if status.state not in LIVE_STATES:
        raise EngineError(f"Run {run.run_id} is not running (state: {status.state}).")
    if status.never_started:
        raise EngineError(f"Run {run.run_id} was prepared but never started (`launch --print` writes such runs): "
                          "nothing runs, so there is nothing to stop.")
    if status.process is None:
        raise EngineError(f"Run {run.run_id}'s status names no training process that can be checked (pid, start time "
                          "and host); it was not started by lf-assistant or its status was edited. Nothing was "
                          f"signalled; check with `lf-assistant status {run.run_id}`.")
    run.request_stop("stop command")
    if force:
        identity = status.process
        if identity is None or identity.alive() is not True or not holds_lock(identity.pid, run.path):
            raise EngineError(f"Run {run.run_id}'s process cannot be verified on this host (pid "
                              f"{identity.pid if identity else '-'} is gone, or does not hold the run folder's lock); "
                              "nothing was signalled. The stop request is written and the run ends at its next step.")
        if os.getpgid(identity.pid) == identity.pid:  # a session leader we started: its group is the run
            os.killpg(identity.pid, signal.SIGTERM)
        else:
            os.kill(identity.pid, signal.SIGTERM)
    run.append_event("stop_requested", force=force)
    return status


def load_infer_config(source, *overrides: str, **kw_overrides: Any):
    """An inference config (LLaMA-Factory keys: model_name_or_path, adapter_name_or_path, template, ...)."""
    from engine.inference import load_infer_config as _load

    return _load(source, *overrides, **kw_overrides)


def chat(config, *overrides: str):
    """A ChatModel (``.chat(messages)``, ``.stream_chat``, ``.batch_chat(conversations)``) from an inference config
    or its YAML path. The template must match the one the model was trained with."""
    from engine.inference.chat_model import ChatModel

    if not hasattr(config, "model_name_or_path"):
        config = load_infer_config(config, *overrides)
    return ChatModel(config)


def validate_model(config, prompts: list[str], out: str | Path, *, base: bool = False, batch_size: int = 16,
                   on_progress=None) -> list[dict]:
    """Answer ``prompts`` with the tuned model (and the base with ``base=True``); rows written to ``out`` (JSONL)."""
    from engine.inference.validate import run_validation

    if not hasattr(config, "model_name_or_path"):
        config = load_infer_config(config)
    return run_validation(config, prompts, out, base=base, batch_size=batch_size, on_progress=on_progress)


def export(config, *overrides: str, on_progress=None):
    """Merge a LoRA adapter into its base (or re-save a full fine-tune) into export_dir, checked after writing."""
    from engine.export import load_export_config
    from engine.export.run import export_model

    if not hasattr(config, "export_dir"):
        config = load_export_config(config, *overrides)
    return export_model(config, on_progress=on_progress)


def measure_steps(config, *, steps: int = 3, env: dict[str, str] | None = None, should_stop=None,
                  timeout_s: float | None = None):
    """Pre-flight: time ``steps`` real optimizer steps of ``config`` (the longest micro-batches first) in a child
    process on the chosen device, writing nothing of the run; returns an engine.measurement.Measurement with the
    step time, peak memory, tokens/s, the predicted total time and whether it fits (with a smaller micro-batch
    and a larger gradient accumulation proposed when it does not)."""
    from engine.measurement import measure_steps as _measure

    if isinstance(config, (str, Path, dict)):
        config = load_config(config)
    return _measure(config, steps=steps, env=env, should_stop=should_stop or (lambda: False), timeout_s=timeout_s)
