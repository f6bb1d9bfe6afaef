"""Parallel strategies. ``setup_strategy(config)`` picks one from the launch environment and the config.

One process: SingleDevice. Several (started by torchrun, see engine.parallel.launch):
  cp_size > 1            -> Ulysses sequence parallel (dp x sp), over FSDP2 when ``fsdp`` is set, else DDP
  deepspeed: ds.json     -> DeepSpeed ZeRO (stage from the JSON)
  fsdp: full_shard|...   -> FSDP2
  otherwise              -> DDP
Each module is imported only when chosen, so a single-device run never touches torch.distributed, and importing
this package (engine.parallel.launch does, from the CLI) does not import torch.
"""

from __future__ import annotations

import os

from engine.errors import ConfigError

STRATEGIES = {
    "single": "engine.parallel.single",
    "ddp": "engine.parallel.ddp",
    "fsdp2": "engine.parallel.fsdp2",
    "deepspeed": "engine.parallel.deepspeed",
    "ulysses": "engine.parallel.ulysses",
}


def fsdp_mode(config) -> str | None:
    """The config's FSDP request normalised to full_shard / shard_grad_op, or None.

    Accepts LLaMA-Factory/HF spellings ("full_shard auto_wrap", "shard_grad_op", true)."""
    value = getattr(config, "fsdp", None)
    if value in (None, False, "", "no", "none"):
        return None
    words = set(str(value).lower().replace(",", " ").split()) if value is not True else {"full_shard"}
    if "shard_grad_op" in words:
        return "shard_grad_op"
    if words & {"full_shard", "hybrid_shard", "true", "fsdp2", "auto_wrap"}:
        return "full_shard"
    raise ConfigError(f"fsdp: {value!r} is not understood. Use full_shard (least memory) or shard_grad_op.")


def strategy_name(config, world_size: int) -> str:
    """Which strategy a run with ``world_size`` processes uses; refuses combinations we cannot run."""
    cp_size = int(getattr(config, "cp_size", 1) or 1)
    if world_size <= 1:
        if cp_size > 1:
            raise ConfigError(f"cp_size is {cp_size}: sequence parallelism needs {cp_size} processes (one per "
                              f"device). Start the run with nproc_per_node {cp_size} (lf-assistant launch), or set "
                              "cp_size: 1.")
        return "single"
    if getattr(config, "deepspeed", None) and (cp_size > 1 or fsdp_mode(config)):
        raise ConfigError("deepspeed cannot be combined with cp_size > 1 or fsdp: choose one (FSDP2 + cp_size works).")
    if cp_size > 1:
        if world_size % cp_size:
            raise ConfigError(f"cp_size {cp_size} must divide the number of processes ({world_size}): the processes "
                              f"form (data parallel) x (sequence parallel) groups. Use {world_size // cp_size * cp_size}"
                              f" or {(world_size // cp_size + 1) * cp_size} processes, or another cp_size.")
        return "ulysses"
    if getattr(config, "deepspeed", None):
        return "deepspeed"
    return "fsdp2" if fsdp_mode(config) else "ddp"


def setup_strategy(config):
    """The strategy for this process, built from the torchrun environment and the config."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    name = strategy_name(config, world_size)
    if name == "single":
        from engine.parallel.single import SingleDevice

        return SingleDevice()
    if name == "ddp":
        from engine.parallel.ddp import DDPStrategy

        return DDPStrategy()
    if name == "fsdp2":
        from engine.parallel.fsdp2 import RESHARD_AFTER_FORWARD, FSDP2Strategy

        return FSDP2Strategy(reshard_after_forward=RESHARD_AFTER_FORWARD[fsdp_mode(config)])
    if name == "deepspeed":
        from engine.parallel.deepspeed import DeepSpeedStrategy

        return DeepSpeedStrategy(config)
    from engine.parallel.ulysses import UlyssesStrategy

    return UlyssesStrategy(sp_size=int(config.cp_size), fsdp=fsdp_mode(config))
