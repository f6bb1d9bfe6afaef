"""DeepSpeed: the LLaMA-Factory ds_config "auto" values filled from our config, contradictions refused, and a clear
error where the package is missing (it is on these CPU machines). The engine itself needs GPUs."""

import importlib.util
import types

import pytest
import torch

from engine.errors import ConfigError
from engine.parallel.deepspeed import DeepSpeedStrategy, _EngineOptimizer, fill_auto_values, load_deepspeed_config

# LLaMA-Factory's examples/deepspeed/ds_z3_config.json, as users bring it.
LF_Z3 = {
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto", "zero_allow_untested_optimizer": True,
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
             "hysteresis": 2, "min_loss_scale": 1},
    "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": 3, "overlap_comm": False, "contiguous_gradients": True, "sub_group_size": 1e9,
                          "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
                          "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": True},
}


def train_config(**over):
    values = dict(per_device_train_batch_size=2, gradient_accumulation_steps=4, max_grad_norm=0.5, bf16=True,
                  fp16=False, learning_rate=1e-4, adam_beta1=0.9, adam_beta2=0.95, adam_epsilon=1e-8,
                  weight_decay=0.01, deepspeed=None, output_dir="out", resume_from_checkpoint=None)
    values.update(over)
    return types.SimpleNamespace(**values)


def test_auto_values_are_filled_from_the_config():
    filled = fill_auto_values(LF_Z3, train_config(), world_size=8, hidden_size=128)
    assert filled["train_micro_batch_size_per_gpu"] == 2 and filled["gradient_accumulation_steps"] == 4
    assert filled["train_batch_size"] == 2 * 4 * 8 and filled["gradient_clipping"] == 0.5
    assert filled["bf16"]["enabled"] is True and filled["fp16"]["enabled"] is False
    zero = filled["zero_optimization"]
    assert (zero["reduce_bucket_size"], zero["stage3_prefetch_bucket_size"],
            zero["stage3_param_persistence_threshold"]) == (128 * 128, int(0.9 * 128 * 128), 1280)
    assert LF_Z3["train_batch_size"] == "auto"  # the user's dict is not modified
    # Before the model is loaded the bucket sizes may stay "auto"; everything else must be filled.
    early = fill_auto_values(LF_Z3, train_config(), world_size=8)
    assert early["zero_optimization"]["reduce_bucket_size"] == "auto"
    with_optimizer = {**LF_Z3, "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto"}}}
    params = fill_auto_values(with_optimizer, train_config(), world_size=1, hidden_size=64)["optimizer"]["params"]
    assert params == {"lr": 1e-4, "betas": [0.9, 0.95]}


@pytest.mark.parametrize("change, message", [
    ({"train_batch_size": 64}, "train_batch_size is 64 but batch x accumulation x processes is 16"),
    ({"train_micro_batch_size_per_gpu": 3}, "per_device_train_batch_size is 2"),
    ({"scheduler": {"type": "WarmupLR"}}, "remove the section"),
    ({"fp16": {"enabled": True}}, "use bf16"),
    ({"wall_clock_breakdown": "auto"}, "nothing here fills them: wall_clock_breakdown"),
])
def test_contradictions_are_refused(change, message):
    with pytest.raises(ConfigError, match=message):
        fill_auto_values({**LF_Z3, **change}, train_config(), world_size=2, hidden_size=64)


def test_missing_file_and_package_say_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="ds_z3_config.json are good starting points"):
        load_deepspeed_config(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_deepspeed_config(tmp_path / "bad.json")
    if importlib.util.find_spec("deepspeed") is not None:
        pytest.skip("deepspeed is installed here; the missing-package message cannot be shown")
    with pytest.raises(ConfigError, match=r"not installed: pip install 'lf-assistant\[deepspeed\]'"):
        DeepSpeedStrategy(train_config(deepspeed=str(tmp_path / "ds.json")))


def test_the_schedule_drives_the_engine_optimizer():
    from engine.training.schedule import build_scheduler

    calls = []
    engine = types.SimpleNamespace(step=lambda: calls.append("step"), zero_grad=lambda: calls.append("zero"))
    inner = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1.0)
    optimizer = _EngineOptimizer(engine, inner)
    scheduler = build_scheduler(optimizer, "linear", 10, 0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    assert calls == ["step", "zero"] and inner.param_groups[0]["lr"] == pytest.approx(0.9)


def _stand_in_deepspeed(monkeypatch) -> dict:
    """Classes under the names DeepSpeed's checkpoints pickle (DeepSpeed itself is not installed here)."""
    import dataclasses
    import enum
    import sys

    for name in ("deepspeed", "deepspeed.runtime", "deepspeed.runtime.fp16", "deepspeed.runtime.fp16.loss_scaler",
                 "deepspeed.runtime.zero", "deepspeed.runtime.zero.config", "deepspeed.utils",
                 "deepspeed.utils.tensor_fragment"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))

    class DynamicLossScaler:
        def __init__(self):
            self.cur_scale, self.cur_iter, self.dynamic, self.dtype = 65536.0, 7, True, torch.float16

    class ZeroStageEnum(enum.IntEnum):
        optimizer_states = 1
        gradients = 2

    @dataclasses.dataclass
    class fragment_address:  # noqa: N801 - DeepSpeed's name
        numel: int
        start: int

    made = {}
    for cls, module in ((DynamicLossScaler, "deepspeed.runtime.fp16.loss_scaler"),
                        (ZeroStageEnum, "deepspeed.runtime.zero.config"),
                        (fragment_address, "deepspeed.utils.tensor_fragment")):
        cls.__module__, cls.__qualname__ = module, cls.__name__
        setattr(sys.modules[module], cls.__name__, cls)
        made[cls.__name__] = cls
    return made


class _Engine:
    """What load_checkpoint does with the files, as DeepSpeed's engine does it: through its checkpoint engine."""

    class _TorchCheckpointEngine:
        def load(self, path, map_location=None):
            return torch.load(path, map_location=map_location, weights_only=False)

    def __init__(self):
        self.checkpoint_engine = self._TorchCheckpointEngine()

    def load_checkpoint(self, path):
        return self.checkpoint_engine.load(path, map_location=lambda storage, loc: storage)


@pytest.mark.parametrize("zipfile", [True, False])  # DeepSpeed saves the legacy format unless configured
def test_a_deepspeed_checkpoint_loads_without_running_code(zipfile, monkeypatch, tmp_path):
    from collections import OrderedDict

    from engine.parallel.deepspeed import checkpoint_classes, guard_checkpoint_loads

    ds = _stand_in_deepspeed(monkeypatch)
    admitted = checkpoint_classes()
    assert {c.__name__ for c in admitted} == {"DynamicLossScaler", "ZeroStageEnum", "fragment_address"}
    shards = {"optimizer_state_dict": {
        "zero_stage": ds["ZeroStageEnum"].gradients, "loss_scaler": ds["DynamicLossScaler"](),
        "dynamic_loss_scale": True, "overflow": False, "partition_count": [2], "ds_version": "0.18.0",
        "base_optimizer_state": {"state": {0: {"exp_avg": torch.ones(3)}}, "param_groups": [{"lr": 1e-4}]},
        "single_partition_of_fp32_groups": [torch.arange(3.0)],
        "param_slice_mappings": [OrderedDict(w=ds["fragment_address"](numel=4, start=0))]},
        "param_shapes": [OrderedDict(w=torch.Size([2, 2]))], "sparse_tensor_module_names": set(),
        "ds_config": {"zero_optimization": {"stage": 2}}}
    path = tmp_path / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    torch.save(shards, path, _use_new_zipfile_serialization=zipfile)
    engine = _Engine()
    guard_checkpoint_loads(engine, admitted)
    loaded = engine.load_checkpoint(str(path))["optimizer_state_dict"]
    assert loaded["zero_stage"] is ds["ZeroStageEnum"].gradients
    assert loaded["loss_scaler"].cur_scale == 65536.0 and loaded["loss_scaler"].dtype == torch.float16
    assert loaded["param_slice_mappings"][0]["w"] == ds["fragment_address"](4, 0)
    assert torch.equal(loaded["base_optimizer_state"]["state"][0]["exp_avg"], torch.ones(3))


@pytest.mark.parametrize("zipfile", [True, False])
def test_a_deepspeed_checkpoint_that_names_code_is_refused_and_nothing_runs(zipfile, monkeypatch, tmp_path):
    import os

    from engine.errors import EngineError
    from engine.parallel.deepspeed import checkpoint_classes, guard_checkpoint_loads

    _stand_in_deepspeed(monkeypatch)
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    path = tmp_path / "mp_rank_00_model_states.pt"
    torch.save({"module": {"w": torch.zeros(2)}, "lr_scheduler": Payload()}, path,
               _use_new_zipfile_serialization=zipfile)
    plain = _Engine()
    plain.load_checkpoint(str(path))  # what DeepSpeed's own loader does with it
    assert marker.exists()
    marker.unlink()
    engine = _Engine()
    guard_checkpoint_loads(engine, checkpoint_classes())
    with pytest.raises(EngineError, match="mp_rank_00_model_states.pt holds objects that can only be loaded by "
                                          "running code.*earlier complete checkpoint"):
        engine.load_checkpoint(str(path))
    assert not marker.exists()


def test_universal_checkpoint_loading_is_refused():
    with pytest.raises(ConfigError, match="checkpoint.load_universal"):
        fill_auto_values({**LF_Z3, "checkpoint": {"load_universal": True}}, train_config(), world_size=2,
                         hidden_size=64)
