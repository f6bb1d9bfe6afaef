"""FSDP2 (``torch.distributed.fsdp.fully_shard``): parameters, gradients and optimizer state sharded across ranks.

Each decoder layer is its own FSDP unit (gathered just before it runs, freed after), the root holds embeddings,
final norm and head. On GPU with bf16/fp16 the layers compute in that dtype and reduce gradients in fp32. Saving
gathers the full state dict to rank 0, so the output folder loads with plain ``from_pretrained``; checkpoints keep
the full (gathered) optimizer state, so a run can resume on a different number of ranks.

We call ``fully_shard`` ourselves: the HF Trainer silently falls back to DDP for FSDP on CPU.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import torch

from engine.parallel.common import DataParallelBase, broadcast_parameters, decoder_layers

# LLaMA-Factory / HF `fsdp:` values: full_shard frees gathered layers after forward (least memory);
# shard_grad_op keeps them until backward (less communication, ZeRO-2-like).
RESHARD_AFTER_FORWARD = {"full_shard": True, "shard_grad_op": False}


class FSDP2Strategy(DataParallelBase):
    """Fully sharded data parallel, one unit per decoder layer."""

    name = "fsdp2"
    sharded_gradients = True

    def __init__(self, reshard_after_forward: bool = True) -> None:
        super().__init__()
        self.reshard_after_forward = reshard_after_forward
        self.mesh = None

    def wrap(self, model: torch.nn.Module, config) -> torch.nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, fully_shard

        device = next(model.parameters()).device
        self.mesh = init_device_mesh(device.type, (self.world_size,))
        broadcast_parameters(model)  # every rank must shard the same weights
        policy = mixed_precision_policy(config, device)
        layers = decoder_layers(model)
        for layer in layers:
            fully_shard(layer, mesh=self.mesh, mp_policy=policy, reshard_after_forward=self.reshard_after_forward)
        # The root is needed again at once by the loss, so it stays gathered after forward.
        fully_shard(model, mesh=self.mesh, mp_policy=policy, reshard_after_forward=False)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)
                # gloo has no pre-multiplied sum; a plain SUM also is what our loss normalisation expects.
                module.set_force_sum_reduction_for_comms(True)
        self.model = model
        return model

    def checkpoint_optimizer(self, optimizer):
        return FullOptimizerState(self.model, optimizer)

    def save_model(self, save_fn: Callable[[Path], None], folder: Path) -> None:
        state = gather_full_state_dict(self.model)  # collective: every rank takes part
        if self.is_main:
            write_with_state_dict(self.model, state, save_fn, folder)
        self.barrier()

    def save_checkpoint(self, write: Callable, save_fn: Callable[[Path], None], optimizer) -> Path | None:
        model_state = gather_full_state_dict(self.model)
        optimizer_state = FullOptimizerState(self.model, optimizer).state_dict()
        folder = None
        if self.is_main:
            folder = write(lambda target: write_with_state_dict(self.model, model_state, save_fn, target),
                           FrozenOptimizerState(optimizer_state))
        self.barrier()
        return folder


def mixed_precision_policy(config, device: torch.device):
    """bf16/fp16 compute with fp32 gradient reduction on GPU. On a CPU the parameters stay as loaded: fp32, or
    with bf16 units under bf16 autocast a bf16 frozen base with fp32 trainables (engine.training.setup)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if device.type != "cuda" or not (config.bf16 or config.fp16):
        return MixedPrecisionPolicy()
    dtype = torch.bfloat16 if config.bf16 else torch.float16
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def gather_full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Full, unsharded tensors on rank 0's CPU ({} elsewhere). A PEFT model saves only what trains, so only the
    trainable tensors are gathered; other models save everything."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.tensor import DTensor

    if hasattr(model, "get_base_model"):
        gathered = {}
        for name, param in model.named_parameters():
            if param.requires_grad:
                full = param.full_tensor() if isinstance(param, DTensor) else param.detach()
                gathered[name] = full.cpu()
        return gathered if torch.distributed.get_rank() == 0 else {}
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    # Gathered copies no longer share storage, so save_pretrained would write a tied head twice.
    for alias in _tied_aliases(model):
        state.pop(alias, None)
    return state


def _tied_aliases(model: torch.nn.Module) -> list[str]:
    """Names under which an already-named parameter appears again (lm_head.weight tied to the embeddings)."""
    seen, aliases = set(), []
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:
            aliases.append(name)
        seen.add(id(param))
    return aliases


def write_with_state_dict(model: torch.nn.Module, state: dict, save_fn: Callable[[Path], None], folder: Path) -> None:
    """Run the method's own save (save_pretrained) with the gathered tensors instead of the local shards."""
    with _plain_class(model), _state_dict_override(model, state):
        save_fn(folder)


@contextmanager
def _state_dict_override(model: torch.nn.Module, state: dict):
    # save_pretrained (transformers and PEFT) reads model.state_dict(); an instance attribute shadows the method.
    model.state_dict = lambda *args, **kwargs: dict(state)
    try:
        yield
    finally:
        del model.state_dict


@contextmanager
def _plain_class(model: torch.nn.Module):
    # fully_shard swaps the class for a generated "FSDP<Name>" subclass; save_pretrained would write that name
    # into config.json's "architectures".
    sharded_class = type(model)
    plain = next((c for c in sharded_class.__mro__[1:] if not c.__name__.startswith("FSDP")), sharded_class)
    model.__class__ = plain
    try:
        yield
    finally:
        model.__class__ = sharded_class


class FullOptimizerState:
    """The optimizer as checkpoint files see it: full (unsharded) tensors keyed by parameter name."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_optimizer_state_dict(self.model, self.optimizer, options=options)

    def load_state_dict(self, state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(self.model, self.optimizer, state, options=StateDictOptions(full_state_dict=True))


class FrozenOptimizerState:
    """A state gathered beforehand on every rank, handed to rank 0's checkpoint writer."""

    def __init__(self, state: dict) -> None:
        self.state = state

    def state_dict(self) -> dict:
        return self.state
