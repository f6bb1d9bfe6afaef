"""DeepSpeed ZeRO-2 / ZeRO-3 from a LLaMA-Factory-style ``deepspeed: ds_z3_config.json`` (optional extra, GPUs).

The JSON's "auto" values are filled from the training config the way the HF Trainer fills them (batch sizes,
clipping, precision, bucket sizes from the model's hidden size), so LLaMA-Factory's example files work as they
are. Our AdamW and learning-rate schedule stay in charge (``zero_allow_untested_optimizer``); a JSON "scheduler"
section is refused rather than run twice.

DeepSpeed averages gradients over the ranks, so the loss denominator is the global token count divided by the
world size: the gradient is again the single-process gradient of the whole step.

Resuming never unpickles code: DeepSpeed's checkpoint engine loads with ``weights_only=False``; ours admits
tensors, plain values and the few DeepSpeed classes its checkpoints hold (``guard_checkpoint_loads``).

Not exercised on this project's CPU machines (DeepSpeed needs CUDA and is not installed there): the config
filling, the checkpoint loader and the errors are tested, the engine path only on GPU machines.
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from typing import Any, Callable

import torch

from engine.errors import ConfigError, DeviceError
from engine.parallel.common import DataParallelBase, all_reduce_sum

INSTALL_HINT = "pip install 'lf-assistant[deepspeed]' (it needs CUDA), or remove the deepspeed key"
AUTO = "auto"


def require_deepspeed():
    """The deepspeed module, or a ConfigError that says how to get it."""
    if importlib.util.find_spec("deepspeed") is None:
        raise ConfigError(f"deepspeed is set in the config but the deepspeed package is not installed: {INSTALL_HINT}.")
    import deepspeed

    return deepspeed


def load_deepspeed_config(path: str | Path) -> dict:
    from engine.readers import read_json

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"deepspeed: {path} does not exist. LLaMA-Factory's examples/deepspeed/ds_z2_config.json "
                          "or ds_z3_config.json are good starting points.")
    data = read_json(path, what="DeepSpeed config")
    if not isinstance(data, dict):
        raise ConfigError(f"deepspeed: {path} must hold one JSON object.")
    return data


def fill_auto_values(ds_config: dict, config, *, world_size: int, hidden_size: int | None = None) -> dict:
    """A copy of ``ds_config`` with every "auto" replaced by the value our config implies; raises on "auto"
    values nobody can fill and on settings that contradict the config."""
    ds = copy.deepcopy(ds_config)
    micro, accum = config.per_device_train_batch_size, config.gradient_accumulation_steps
    _fill(ds, "train_micro_batch_size_per_gpu", micro)
    _fill(ds, "gradient_accumulation_steps", accum)
    _fill(ds, "train_batch_size", micro * accum * world_size)
    _fill(ds, "gradient_clipping", config.max_grad_norm)
    for section, wanted in (("fp16", config.fp16), ("bf16", config.bf16)):
        if isinstance(ds.get(section), dict):
            _fill(ds[section], "enabled", bool(wanted))
    optimizer = ds.get("optimizer", {}).get("params", {})
    for key, value in (("lr", config.learning_rate), ("betas", [config.adam_beta1, config.adam_beta2]),
                       ("eps", config.adam_epsilon), ("weight_decay", config.weight_decay)):
        _fill(optimizer, key, value)
    zero = ds.get("zero_optimization", {})
    if hidden_size:
        _fill(zero, "reduce_bucket_size", hidden_size * hidden_size)
        _fill(zero, "stage3_prefetch_bucket_size", int(0.9 * hidden_size * hidden_size))
        _fill(zero, "stage3_param_persistence_threshold", 10 * hidden_size)
    _check(ds, config, world_size, hidden_size)
    return ds


def _fill(section: dict, key: str, value: Any) -> None:
    if section.get(key) == AUTO:
        section[key] = value


def _check(ds: dict, config, world_size: int, hidden_size: int | None) -> None:
    # Bucket sizes need the model's hidden size: left "auto" until the model is loaded.
    left = [p for p in _auto_paths(ds) if hidden_size or not p.startswith("zero_optimization.")]
    problems = []
    if left:
        problems.append(f"these values are \"auto\" but nothing here fills them: {', '.join(left)}")
    micro = ds.get("train_micro_batch_size_per_gpu")
    if isinstance(micro, int) and micro != config.per_device_train_batch_size:
        problems.append(f"train_micro_batch_size_per_gpu is {micro} but per_device_train_batch_size is "
                        f"{config.per_device_train_batch_size}: set it to \"auto\"")
    total = ds.get("train_batch_size")
    expected = config.per_device_train_batch_size * config.gradient_accumulation_steps * world_size
    if isinstance(total, int) and total != expected:
        problems.append(f"train_batch_size is {total} but batch x accumulation x processes is {expected}: set it "
                        "to \"auto\"")
    if "scheduler" in ds:
        problems.append("it has a \"scheduler\" section; the learning-rate schedule comes from lr_scheduler_type: "
                        "remove the section")
    if (ds.get("fp16") or {}).get("enabled") is True:
        problems.append("fp16 is not supported with DeepSpeed here (two loss scalers): use bf16")
    checkpoint = ds.get("checkpoint")
    if isinstance(checkpoint, dict) and checkpoint.get("load_universal"):
        problems.append("checkpoint.load_universal is set: DeepSpeed reads universal checkpoints by unpickling "
                        "them (running any code they name), so it is not used here; resume from this run's own "
                        "checkpoints, or remove the key")
    if problems:
        raise ConfigError("deepspeed config: " + "; ".join(problems) + ".")


def _auto_paths(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _auto_paths(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")] if node == AUTO else []


class DeepSpeedStrategy(DataParallelBase):
    """ZeRO stage 2 or 3 as the JSON says; the engine is built when the optimizer exists."""

    name = "deepspeed"
    grad_norm_before_step = False  # the engine clips inside its own step and reports that norm afterwards

    def __init__(self, config) -> None:
        self.deepspeed = require_deepspeed()
        if not torch.cuda.is_available():
            raise DeviceError("DeepSpeed needs CUDA GPUs and none is visible. On CPU use several processes without "
                              "the deepspeed key (DDP), or fsdp: full_shard.")
        super().__init__()
        self.ds_config = load_deepspeed_config(config.deepspeed)
        self.train_config = config
        self.engine = None

    @property
    def zero_stage(self) -> int:
        return int(self.ds_config.get("zero_optimization", {}).get("stage", 0))

    def wrap(self, model: torch.nn.Module, config) -> Callable:
        self.model = model
        hidden = getattr(getattr(model, "config", None), "hidden_size", None)
        self.ds_config = fill_auto_values(self.ds_config, config, world_size=self.world_size, hidden_size=hidden)
        return _EngineCall(self)

    def wrap_optimizer(self, optimizer):
        self.engine, ds_optimizer, _, _ = self.deepspeed.initialize(model=self.model, optimizer=optimizer,
                                                                    config=self.ds_config)
        guard_checkpoint_loads(self.engine)
        return _EngineOptimizer(self.engine, ds_optimizer)

    def loss_denominator(self, step_tokens: int) -> float:
        # DeepSpeed divides the summed gradients by the world size; multiply it back through the denominator.
        return max(all_reduce_sum(step_tokens), 1.0) / self.world_size

    def backward(self, loss: torch.Tensor) -> None:
        # The loss is already normalised over the whole step, accumulation included; the engine decides when to
        # reduce (gradient_accumulation_steps in its config).
        self.engine.backward(loss, scale_wrt_gas=False)

    def clip_grad_norm(self, params, max_norm: float) -> torch.Tensor:
        """DeepSpeed clips inside its step (gradient_clipping); this reports the norm of the previous step."""
        norm = self.engine.get_global_grad_norm() if self.engine is not None else None
        return torch.tensor(float("nan") if norm is None else float(norm))

    def save_model(self, save_fn: Callable[[Path], None], folder: Path) -> None:
        writer = self._model_writer(save_fn)
        if self.is_main:
            writer(folder)
        self.barrier()

    def _model_writer(self, save_fn: Callable[[Path], None]) -> Callable[[Path], None]:
        """Gather now (ZeRO-3: a collective), write later on rank 0."""
        if self.zero_stage != 3:
            return save_fn
        from engine.parallel.fsdp2 import write_with_state_dict

        state = self.engine._zero3_consolidated_16bit_state_dict()  # full tensors on rank 0, {} elsewhere
        return lambda folder: write_with_state_dict(self.model, state, save_fn, folder)

    def save_checkpoint(self, write: Callable, save_fn: Callable[[Path], None], optimizer) -> Path | None:
        """Every rank writes its ZeRO shards into a staging folder; rank 0 then writes the checkpoint folder and
        moves the shards into it as deepspeed/ before the completion marker."""
        import os
        import shutil

        staging = Path(self.train_config.output_dir) / STAGING
        if self.is_main:
            shutil.rmtree(staging, ignore_errors=True)
        self.barrier()
        self.engine.save_checkpoint(str(staging), tag="state")
        writer = self._model_writer(save_fn)
        self.barrier()
        folder = None
        if self.is_main:
            def save_with_shards(target: Path) -> None:
                writer(target)
                os.replace(staging, target / "deepspeed")

            folder = write(save_with_shards, _ShardMarker())
        self.barrier()
        return folder

    def checkpoint_optimizer(self, optimizer):
        return _ShardLoader(self)


STAGING = ".deepspeed-staging"

CHECKPOINT_CLASSES = (
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.utils.tensor_fragment.fragment_address",
)
"""The classes DeepSpeed's own ZeRO checkpoints pickle beside tensors, plain containers, torch.Size and dtypes (the
optimizer's loss scaler, the ZeRO stage, the fp32 partitions' slice map). Nothing else is admitted."""


def checkpoint_classes(names=CHECKPOINT_CLASSES) -> list[type]:
    """Those of `names` the installed DeepSpeed defines (a class that moved in another version is simply absent:
    a checkpoint that holds it is then refused, not loaded by running code)."""
    import importlib

    found = []
    for name in names:
        module, _, attr = name.rpartition(".")
        try:
            found.append(getattr(importlib.import_module(module), attr))
        except (ImportError, AttributeError):
            continue
    return found


def safe_checkpoint_load(path, map_location=None, *, classes: list[type]):
    """torch.load of one DeepSpeed checkpoint file with weights_only=True and `classes` admitted: DeepSpeed's own
    TorchCheckpointEngine loads with weights_only=False, which runs whatever code the file names."""
    import pickle

    from engine.errors import EngineError

    try:
        with torch.serialization.safe_globals(classes):
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        named = [line.strip() for line in str(exc).splitlines() if "Unsupported global" in line][:1]
        what = f" ({named[0][:200]})" if named else ""
        raise EngineError(f"{path} holds objects that can only be loaded by running code from the file{what}; "
                          "a DeepSpeed checkpoint holds tensors, plain values and a few DeepSpeed classes only. "
                          "lf-assistant does not load it: resume from an earlier complete checkpoint "
                          "(`lf-assistant resume-train RUN_ID --checkpoint N`), or start a new run from the "
                          "checkpoint's weights.") from None


def guard_checkpoint_loads(ds_engine, classes: list[type] | None = None) -> None:
    """Make every file DeepSpeed's `load_checkpoint` reads (model states, ZeRO optimizer shards) go through
    `safe_checkpoint_load`: its checkpoint engine's `load` is the one call they all pass."""
    admitted = checkpoint_classes() if classes is None else classes
    checkpoint_engine = ds_engine.checkpoint_engine
    checkpoint_engine.load = lambda path, map_location=None: safe_checkpoint_load(path, map_location,
                                                                                  classes=admitted)


class _ShardMarker:
    """optimizer.pt of a DeepSpeed checkpoint: only where the real (sharded) state lives."""

    def state_dict(self) -> dict:
        return {"deepspeed": "deepspeed", "tag": "state"}


class _ShardLoader:
    """Loads the engine's shards of the checkpoint being resumed when the recipe loads "the optimizer"."""

    def __init__(self, strategy: DeepSpeedStrategy) -> None:
        self.strategy = strategy

    def load_state_dict(self, marker: dict) -> None:
        from engine.rundir import resolve_resume

        config = self.strategy.train_config
        folder = resolve_resume(config.resume_from_checkpoint, Path(config.output_dir))
        guard_checkpoint_loads(self.strategy.engine)  # again: DeepSpeed may have made a new checkpoint engine
        self.strategy.engine.load_checkpoint(str(folder / marker["deepspeed"]), tag=marker["tag"],
                                             load_lr_scheduler_states=False, load_module_strict=False)


class _EngineCall:
    """What the recipe calls as its model: the DeepSpeed engine's forward (ZeRO-3 gathers parameters there)."""

    def __init__(self, strategy: DeepSpeedStrategy) -> None:
        self.strategy = strategy

    @property
    def module(self) -> torch.nn.Module:
        return self.strategy.model

    def __call__(self, *args, **kwargs):
        return self.strategy.engine(*args, **kwargs)


class _EngineOptimizer(torch.optim.Optimizer):
    """The recipe's optimizer calls mapped onto the engine: step runs the ZeRO step (clipping included), the
    schedule drives the wrapped optimizer's param_groups, zero_grad is the engine's. An Optimizer subclass
    because torch's LR schedulers accept nothing else; torch's own __init__ is skipped on purpose (it would
    re-register the parameters the engine already owns)."""

    def __init__(self, engine, optimizer) -> None:  # noqa: super-init-not-called
        self.engine, self.optimizer = engine, optimizer
        self.defaults, self.state = optimizer.defaults, optimizer.state

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def step(self) -> None:
        self.engine.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.engine.zero_grad()

    def state_dict(self) -> dict:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)
