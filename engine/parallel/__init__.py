"""Parallel strategies. ``setup_strategy(config)`` picks one from the launch environment and the config."""

from __future__ import annotations

import os

from engine.parallel.single import SingleDevice


def setup_strategy(config):
    """SingleDevice unless launched by torchrun with several processes (then DDP/FSDP2/DeepSpeed/Ulysses)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return SingleDevice()
    from engine.errors import ConfigError

    raise ConfigError("Multi-process training is not available in this build; run on one device.")
