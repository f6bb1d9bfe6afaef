"""The public face of the engine: load and validate configs, train (in this process or detached), find runs.

Nothing here imports torch at module import; the TUI and the CLI stay fast.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from engine.config import TrainConfig, config_to_dict, dump_yaml, load, read_yaml
from engine.config import validate as _validate
from engine.config import warnings as _warnings
from engine.errors import ConfigError, EngineError
from engine.rundir import RunDir, new_run_id, runs_root


def load_config(source: str | Path | dict[str, Any], *overrides: str, **kw_overrides: Any) -> TrainConfig:
    """A TrainConfig from a YAML path or a dict, with ``key=value`` strings and keyword overrides applied.

    Unknown keys raise ConfigError naming the nearest valid key; LLaMA-Factory keys lf-assistant does not support
    are refused by name. Relative paths in the config (dataset_dir, deepspeed) are later resolved against the
    config file's folder, then the working directory.
    """
    return load("train", source, *overrides, **kw_overrides)


def ignored_keys(source: str | Path | dict[str, Any] | TrainConfig) -> list[str]:
    """Keys of another tool's YAML that we accept but do not use (so the user is told, not surprised)."""
    config = source if isinstance(source, TrainConfig) else load_config(source)
    return list(config.unused_keys)


def validate(config: TrainConfig) -> list[str]:
    """Every problem of the config as a sentence that says what to change; [] when it can run."""
    return _validate(config)


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

    def status(self) -> dict:
        return self.run.read_status()

    def metrics(self) -> list[dict]:
        return self.run.read_metrics()

    def wait(self, timeout: float | None = None, poll_s: float = 0.5) -> dict:
        """Block until the run reaches completed / failed / stopped (judged by status.json, not the launcher)."""
        deadline = None if timeout is None else time.time() + timeout
        while True:
            if self.process is not None:
                self.process.poll()  # reap the child so a dead process is seen as dead
            status = self.run.read_status()
            if status.get("state") in ("completed", "failed", "stopped"):
                return status
            if deadline is not None and time.time() > deadline:
                raise TimeoutError(f"run {self.run_id} still {status.get('state')} after {timeout} s")
            time.sleep(poll_s)


def prepare_run(config: TrainConfig, *, runs_dir: str | Path | None = None, run_id: str | None = None,
                run_dir: str | Path | None = None) -> tuple[TrainConfig, RunDir]:
    """Create the run folder and write its resolved, self-contained config before anything trains."""
    from engine.config.paths import dataset_dir_of
    from engine.rundir import default_output_dir

    problems = _validate(config)
    if problems:
        raise ConfigError("The config has problems:\n- " + "\n- ".join(problems))
    model = config.model_name_or_path or "lf-tiny-qwen3"
    if run_dir is None and run_id is None:
        # Two runs started in the same second get -2, -3 ...: a run folder is never shared.
        base_id = run_id = new_run_id(model, config.method)
        counter = 2
        while (runs_root(runs_dir) / run_id).exists():
            run_id, counter = f"{base_id}-{counter}", counter + 1
    run = RunDir(Path(run_dir) if run_dir else runs_root(runs_dir) / run_id)
    if (run.path / "status.json").exists() and run.read_status().get("state") not in (None, "pending"):
        raise EngineError(f"Run folder {run.path} already holds a run. Choose another run id.")
    run.path.mkdir(parents=True, exist_ok=True)
    # Absolute paths so the saved config reproduces the run from anywhere.
    dataset_dir = dataset_dir_of(config)
    resolved = replace(config, dataset_dir=str(dataset_dir.resolve()))
    if resolved.model_name_or_path and Path(resolved.model_name_or_path).expanduser().exists():
        resolved.model_name_or_path = str(Path(resolved.model_name_or_path).expanduser().resolve())
    if not resolved.output_dir:
        resolved.output_dir = default_output_dir(model, config.method, run.run_id, config.stage)
    resolved.output_dir = str(Path(resolved.output_dir).expanduser().resolve())
    if resolved.deepspeed and not Path(resolved.deepspeed).is_absolute():
        candidate = Path(resolved.deepspeed)
        resolved.deepspeed = str((candidate if candidate.exists() else config.base_dir() / candidate).resolve())
    resolved.config_dir = str(run.path.resolve())
    dump_yaml(config_to_dict(resolved), run.path / f"{config.stage}.yaml")
    run.update_status(state="pending", run_id=run.run_id, model=model, method=config.method, stage=config.stage,
                      output_dir=resolved.output_dir, created_at=time.time())
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
    resolved, run = prepare_run(config, runs_dir=runs_dir, run_id=run_id, run_dir=run_dir)
    nproc_per_node = nproc_per_node or resolved.nproc_per_node
    if detach or (nproc_per_node or 1) > 1:
        handle = RunHandle(run, launch_detached(run, resolved.stage, env=env, nproc_per_node=nproc_per_node))
        if not detach:
            code = handle.process.wait()
            if run.read_status().get("state") not in ("completed", "failed", "stopped"):
                reason = f"training processes exited with code {code} before recording an end; see {run.log_path}"
                run.append_event("failed", reason=reason)
                run.update_status(state="failed", finished_at=time.time(), exit_reason=reason)
        return handle
    _train_here(resolved, run, on_log, stop)
    return RunHandle(run, None)


def _recipe(stage: str):
    if stage == "dpo":
        from engine.recipes import dpo

        return dpo
    from engine.recipes import sft

    return sft


def _train_here(config: TrainConfig, run: RunDir, on_log, stop=None) -> dict:
    from engine.recipes.sft import record_failure
    from engine.training.loop import StopFlag

    run.update_status(state="running", pid=os.getpid(), started_at=time.time())
    try:
        return _recipe(config.stage).train(config, run, on_log=on_log, stop=stop or StopFlag())
    except KeyboardInterrupt:
        run.update_status(state="stopped", finished_at=time.time(), exit_reason="interrupted (Ctrl-C)")
        raise
    except EngineError as exc:
        record_failure(run, str(exc))
        raise
    except Exception as exc:
        record_failure(run, f"{type(exc).__name__}: {exc}")
        raise


def launch_detached(run: RunDir, stage: str = "sft", *, env: dict[str, str] | None = None,
                    nproc_per_node: int | None = None) -> subprocess.Popen:
    """Start the recipe as its own session (it survives the terminal closing); output goes to train.log.

    Several processes (``nproc_per_node``, the config's nproc_per_node, or the GPU choice in device.json) start
    through torchrun, every rank's output prefixed with its rank in train.log."""
    from engine.parallel.launch import plan_launch

    plan = plan_launch(run.path, stage, nproc_per_node=nproc_per_node)
    command = plan.local_command()
    child_env = {**os.environ, **plan.env, **(env or {}), "PYTHONUNBUFFERED": "1"}
    # The package must be importable from the child even when started outside the repo.
    root = str(Path(__file__).resolve().parent.parent)
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (root, child_env.get("PYTHONPATH", "")) if p)
    with open(run.log_path, "a", encoding="utf-8") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=child_env, start_new_session=True, cwd=os.getcwd())
    run.update_status(pid=process.pid, started_at=time.time(), command=command)
    run.append_event("launched", pid=process.pid, command=command)
    return process


def resume(run_id: str, *, runs_dir: str | Path | None = None, detach: bool = True,
           env: dict[str, str] | None = None) -> RunHandle:
    """Continue a failed or stopped run from its newest complete checkpoint, in the same run folder."""
    from engine.rundir import find_run

    run = find_run(run_id, runs_dir)
    status = run.read_status()
    if status.get("state") == "running":
        raise EngineError(f"Run {run.run_id} is still running (pid {status.get('pid')}); nothing to resume.")
    if status.get("state") == "completed":
        raise EngineError(f"Run {run.run_id} already completed.")
    stage = status.get("stage") or "sft"
    config_path = run.path / f"{stage}.yaml"
    data = read_yaml(config_path)
    data["resume_from_checkpoint"] = "auto"
    data["overwrite_output_dir"] = True
    dump_yaml(data, config_path)
    run.update_status(state="pending", exit_reason=None, finished_at=None, resumed_at=time.time())
    run.append_event("resume_requested")
    if detach:
        return RunHandle(run, launch_detached(run, stage, env=env))
    config = load_config(config_path)
    _train_here(config, run, None)
    return RunHandle(run, None)


def stop(run_id: str, *, runs_dir: str | Path | None = None) -> dict:
    """Ask a running training to stop: it saves a checkpoint and records "stopped"."""
    import signal

    from engine.rundir import find_run, pid_alive

    run = find_run(run_id, runs_dir)
    status = run.read_status()
    pid = status.get("pid")
    if status.get("state") != "running" or not pid_alive(pid):
        raise EngineError(f"Run {run.run_id} is not running (state: {status.get('state')}).")
    os.kill(pid, signal.SIGTERM)
    run.append_event("stop_requested", pid=pid)
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
