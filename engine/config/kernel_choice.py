"""Which fused kernels a config asks for (``kernel_config``): the names and how the key is read. No torch here, so
``train --check`` finds a misspelt kernel before the model loads; engine/kernels/patch.py applies them."""

from __future__ import annotations

from typing import Literal

from engine.errors import ConfigError

KERNEL_NAMES: tuple[str, ...] = ("rms_norm", "swiglu", "rope", "gated_delta_rule", "cross_entropy",
                                 "fused_linear_ce")
KernelSelection = list[str] | Literal["auto", "none"]


def parse_kernel_config(value: str | dict | list | bool | None) -> KernelSelection:
    """'auto', 'none', or the list of kernel names; ConfigError naming the valid values otherwise."""
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"name"})
        if unknown:
            raise ConfigError(f"kernel_config has unknown keys {unknown}; the only key is 'name' "
                              f"(auto, none, or a comma-separated list of {', '.join(KERNEL_NAMES)})")
        value = value.get("name")
    if value is None or value is False:
        return "none"
    if value is True:
        return "auto"
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [str(name).strip().lower() for name in names if str(name).strip()]
    if names in ([], ["none"]):
        return "none"
    if names == ["auto"]:
        return "auto"
    if "auto" in names or "none" in names:
        raise ConfigError(f"kernel_config name {value!r} mixes auto/none with kernel names; use auto, none, or "
                          f"a comma-separated list of: {', '.join(KERNEL_NAMES)}")
    unknown = [name for name in names if name not in KERNEL_NAMES]
    if unknown:
        raise ConfigError(f"kernel_config name {', '.join(unknown)} is not a kernel; use auto, none, or a "
                          f"comma-separated list of: {', '.join(KERNEL_NAMES)}")
    return [name for name in KERNEL_NAMES if name in names]
