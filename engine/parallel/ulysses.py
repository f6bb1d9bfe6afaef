"""Ulysses sequence parallelism: each of ``sp`` ranks holds 1/sp of every sequence, for every layer but attention.

    world = dp x sp on a DeviceMesh ("dp", "sp"); the sp ranks of one dp replica share the same micro-batches.

1. ``prepare_batch`` pads the sequence to a multiple of sp, shifts the labels on the whole sequence (a slice's last
   target is the next slice's first token) and keeps this rank's slice, with its true position ids.
2. Embeddings, MLPs, norms, the LM head and the loss run on the slice: activation memory per rank ~ 1/sp.
3. Around attention an all-to-all trades the slice of all heads for the whole sequence of 1/sp of the heads
   (so key/value heads must divide by sp), SDPA (or FlashAttention-2) runs, and a second all-to-all trades back.
   Both all-to-alls are autograd functions, so the backward pass routes gradients to the rank that owns them.
4. The loss stays on the slice: each rank's summed token loss is divided by the global token count, and
   gradients are summed over every rank (dp and sp) by the data-parallel wrapper (DDP, or FSDP2 on the same
   world). A replicated parameter's gradient on one sp rank only covers that rank's tokens; summing the sp ranks
   completes it, so no sp-size factor must be compensated (an averaging wrapper would shrink it by sp).
   ``reduce_sum`` gives the global loss value on every rank when one is wanted in the graph.

The machinery is installed only when ``wrap`` runs, after the model is fully built and before it is wrapped.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from engine.errors import ConfigError
from engine.parallel.common import DataParallelBase
from engine.data.collator import shift_labels

ATTENTION_NAME = "lf_ulysses"
# The attention we run on the whole sequence once heads are split; eager becomes SDPA (same maths, less memory).
INNER_ATTENTION = {"sdpa": "sdpa", "eager": "sdpa", "flash_attention_2": "flash_attention_2"}


class _AllReduceSum(torch.autograd.Function):
    """Sum over the group forward; identity backward. Every rank then holds (and back-propagates) the same global
    value, and each rank's own term gets gradient 1: counted once when the gradients are summed over ranks."""

    @staticmethod
    def forward(ctx, tensor, group):
        out = tensor.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherSequence(torch.autograd.Function):
    """All-gather slices along dim 1 forward; backward keeps this rank's slice of the gradient (not a sum: every
    rank back-propagates the same gathered value)."""

    @staticmethod
    def forward(ctx, tensor, group):
        ctx.group = group
        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, tensor.contiguous(), group=group)
        return torch.cat(parts, dim=1)

    @staticmethod
    def backward(ctx, grad):
        size, rank = dist.get_world_size(ctx.group), dist.get_rank(ctx.group)
        return grad.chunk(size, dim=1)[rank].contiguous(), None


def reduce_sum(tensor: torch.Tensor, group) -> torch.Tensor:
    return _AllReduceSum.apply(tensor, group)


def gather_sequence(tensor: torch.Tensor, group) -> torch.Tensor:
    return _GatherSequence.apply(tensor, group)


def _all_to_all(tensor: torch.Tensor, group) -> torch.Tensor:
    from torch.distributed._functional_collectives import all_to_all_single_autograd, wait_tensor

    return wait_tensor(all_to_all_single_autograd(tensor.contiguous(), None, None, group))


def seq_to_heads(x: torch.Tensor, group, sp: int) -> torch.Tensor:
    """(B, H, S/sp, D) on each rank -> (B, H/sp, S, D): all heads of a slice become 1/sp of the heads, whole."""
    b, h, s, d = x.shape
    chunks = x.reshape(b, sp, h // sp, s, d).permute(1, 0, 2, 3, 4)  # chunk j (heads group j) goes to rank j
    received = _all_to_all(chunks, group)  # received[i]: my heads group, sequence slice i
    return received.permute(1, 2, 0, 3, 4).reshape(b, h // sp, sp * s, d)


def heads_to_seq(x: torch.Tensor, group, sp: int) -> torch.Tensor:
    """(B, S, H/sp, D) -> (B, S/sp, H, D): the inverse trade, after attention."""
    b, s, h, d = x.shape
    chunks = x.reshape(b, sp, s // sp, h, d).permute(1, 0, 2, 3, 4)  # chunk j (sequence slice j) goes to rank j
    received = _all_to_all(chunks, group)  # received[i]: my slice, heads group i
    return received.permute(1, 2, 0, 3, 4).reshape(b, s // sp, sp * h, d)


def attention_mask_for(position_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """The (B, 1, S, S) boolean mask transformers would build for the whole sequence; None when plain causal.

    With a 2-D padding mask: causal and key not padded. Without one: causal within each packed sequence, a new
    sequence starting wherever positions do not continue (transformers' find_packed_sequence_indices rule).
    Rows with no visible key (left padding) see every key, as transformers does, so SDPA gives no NaN."""
    b, s = position_ids.shape
    causal = torch.ones(s, s, dtype=torch.bool, device=position_ids.device).tril()
    if attention_mask is not None:
        if bool(attention_mask.all()):
            return None
        mask = causal[None, None] & attention_mask.bool()[:, None, None, :]
    else:
        first = position_ids[:, :1] - 1
        segments = (torch.diff(position_ids, prepend=first, dim=-1) != 1).cumsum(-1)
        if bool((segments[:, -1] == 0).all()):
            return None
        mask = causal[None, None] & (segments[:, None, :, None] == segments[:, None, None, :])
    return mask | ~mask.any(dim=-1, keepdim=True)


class SequenceParallel:
    """The slicing of batches and the distributed attention for one sp group; testable without a strategy."""

    def __init__(self, group, sp_size: int, sp_rank: int) -> None:
        self.group, self.sp, self.rank = group, sp_size, sp_rank
        self.inner = "sdpa"
        self.full_positions: torch.Tensor | None = None
        self.full_padding: torch.Tensor | None = None
        self.mask: torch.Tensor | None = None

    def shard_batch(self, batch: dict) -> dict:
        """This rank's slice of a collated batch: input_ids, position_ids, shift_labels (+ attention_mask), and
        any per-row (1-D) tensor unchanged."""
        ids = batch["input_ids"]
        rows, length = ids.shape
        positions = batch.get("position_ids")
        if positions is None:
            positions = torch.arange(length, device=ids.device).expand(rows, length)
        targets = batch["shift_labels"] if "shift_labels" in batch else shift_labels(batch["labels"])
        mask = batch.get("attention_mask")
        pad = (-length) % self.sp
        if pad:
            # Padding goes after every real token, so causal attention already hides it from them; it continues
            # the positions and is marked attended, which keeps the plain-causal fast path.
            ids = F.pad(ids, (0, pad), value=0)
            positions = torch.cat([positions, positions[:, -1:] + torch.arange(1, pad + 1, device=ids.device)], 1)
            targets = F.pad(targets, (0, pad), value=-100)
            mask = F.pad(mask, (0, pad), value=1) if mask is not None else None
        part = slice(self.rank * (length + pad) // self.sp, (self.rank + 1) * (length + pad) // self.sp)
        out = {"input_ids": ids[:, part], "position_ids": positions[:, part].contiguous(),
               "shift_labels": targets[:, part]}
        if mask is not None:
            out["attention_mask"] = mask[:, part]
        for key, value in batch.items():  # per-row facts (a reward model's last position) stay whole
            if key not in out and key not in ("labels", "shift_labels") and value.dim() == 1:
                out[key] = value
        return out

    def install(self, model: torch.nn.Module) -> None:
        """Route every attention layer through the sp all-to-all, after checking the heads divide."""
        from transformers import AttentionInterface

        config = model.config
        heads, kv_heads = config.num_attention_heads, getattr(config, "num_key_value_heads", None)
        kv_heads = kv_heads or heads
        if heads % self.sp or kv_heads % self.sp:
            divisors = [d for d in range(1, kv_heads + 1) if kv_heads % d == 0 and heads % d == 0]
            raise ConfigError(f"cp_size {self.sp} does not divide the model's attention heads ({heads} query, "
                              f"{kv_heads} key/value heads): Ulysses gives each rank whole heads. Use cp_size "
                              f"{' or '.join(map(str, divisors))}.")
        current = config._attn_implementation
        if current != ATTENTION_NAME:
            if current not in INNER_ATTENTION:
                raise ConfigError(f"Sequence parallelism supports sdpa, eager and flash_attention_2 attention; the "
                                  f"model uses {current}. Load it with attn_implementation='sdpa'.")
            self.inner = INNER_ATTENTION[current]
        AttentionInterface.register(ATTENTION_NAME, ulysses_attention)
        layers = [m for m in model.modules() if hasattr(m, "num_key_value_groups") and hasattr(m, "o_proj")]
        if not layers:
            raise ConfigError(f"Sequence parallelism found no attention layer it knows in {type(model).__name__}.")
        for module in layers:
            module.lf_sequence_parallel = self
        _set_attention(model, ATTENTION_NAME)
        decoder = _decoder_stack(model)
        decoder.register_forward_pre_hook(self._gather_layout, with_kwargs=True)

    def _gather_layout(self, _module, args, kwargs):
        """Before the decoder runs: the whole sequence's positions and padding, for the attention mask."""
        positions = kwargs.get("position_ids")
        if positions is None:
            raise ConfigError("Sequence-parallel batches must carry position_ids (engine.parallel.ulysses "
                              "prepare_batch adds them); this forward came without.")
        self.full_positions = self._gather(positions)
        padding = kwargs.get("attention_mask")
        self.full_padding = self._gather(padding) if padding is not None and padding.dim() == 2 else None
        self.mask = attention_mask_for(self.full_positions, self.full_padding)
        return args, kwargs

    def _gather(self, tensor: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(tensor) for _ in range(self.sp)]
        dist.all_gather(parts, tensor.contiguous(), group=self.group)
        return torch.cat(parts, dim=1)


def ulysses_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers attention-interface function: all-to-all, attention on the whole sequence, all-to-all back."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    sp: SequenceParallel = module.lf_sequence_parallel
    q, k, v = (seq_to_heads(t, sp.group, sp.sp) for t in (query, key, value))
    if sp.inner == "flash_attention_2":
        # FlashAttention takes the 2-D padding mask, and packed sequences from the whole sequence's positions.
        kwargs = {**kwargs, "position_ids": sp.full_positions}
        out, _ = ALL_ATTENTION_FUNCTIONS["flash_attention_2"](module, q, k, v, sp.full_padding, dropout=dropout,
                                                               scaling=scaling, **kwargs)
    else:
        kwargs.pop("position_ids", None)
        out, _ = ALL_ATTENTION_FUNCTIONS["sdpa"](module, q, k, v, sp.mask, dropout=dropout, scaling=scaling, **kwargs)
    return heads_to_seq(out, sp.group, sp.sp), None


def _set_attention(model: torch.nn.Module, name: str) -> None:
    # Every sub-config the layers read (the text config of multimodal models included) points at our function.
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            config._attn_implementation = name


def _decoder_stack(model: torch.nn.Module) -> torch.nn.Module:
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = inner.get_decoder() if hasattr(inner, "get_decoder") else getattr(inner, "model", None)
    if decoder is None:
        raise ConfigError(f"Sequence parallelism cannot find the decoder stack of {type(inner).__name__}.")
    return decoder


class UlyssesStrategy(DataParallelBase):
    """dp x sp processes: sp ranks split each sequence, dp replicas split the batch; DDP or FSDP2 over them all."""

    name = "ulysses"

    def __init__(self, sp_size: int, fsdp: str | None = None) -> None:
        from engine.parallel.ddp import DDPStrategy
        from engine.parallel.fsdp2 import RESHARD_AFTER_FORWARD, FSDP2Strategy

        self.data_parallel = (FSDP2Strategy(RESHARD_AFTER_FORWARD[fsdp]) if fsdp else DDPStrategy())
        self.owns_group = False  # the data-parallel strategy owns the process group
        self.rank, self.world_size = self.data_parallel.rank, self.data_parallel.world_size
        self.local_rank, self.is_main = self.data_parallel.local_rank, self.data_parallel.is_main
        self.sharded_gradients = self.data_parallel.sharded_gradients
        self.sp_size, self.sp_rank = sp_size, self.rank % sp_size
        # The mesh is (dp, sp) row-major: ranks dp*sp .. dp*sp+sp-1 share a replica and split its sequences.
        self.dp_size, self.dp_rank = self.world_size // sp_size, self.rank // sp_size
        self.data_parallel.dp_rank, self.data_parallel.dp_size = self.dp_rank, self.dp_size
        self.sp_group = None
        self.sequence_parallel: SequenceParallel | None = None
        self.model = None

    def wrap(self, model: torch.nn.Module, config) -> torch.nn.Module:
        from torch.distributed.device_mesh import init_device_mesh

        device = next(model.parameters()).device
        mesh = init_device_mesh(device.type, (self.dp_size, self.sp_size), mesh_dim_names=("dp", "sp"))
        self.sp_group = mesh.get_group("sp")
        self.sequence_parallel = SequenceParallel(self.sp_group, self.sp_size, mesh.get_local_rank("sp"))
        self.sequence_parallel.install(model)
        self.model = model
        return self.data_parallel.wrap(model, config)

    def wrap_frozen(self, model: torch.nn.Module) -> None:
        """A reference model computes on the same slices, so its attention must gather the sequence too."""
        self.sequence_parallel.install(model)

    def sequence_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return reduce_sum(tensor, self.sp_group)

    def micro_batch(self, *, sync: bool):
        return self.data_parallel.micro_batch(sync=sync)

    def shard_groups(self, groups: list) -> list:
        return self.data_parallel.shard_groups(groups)

    def prepare_batch(self, batch: dict) -> dict:
        return self.sequence_parallel.shard_batch(batch)

    def checkpoint_optimizer(self, optimizer):
        return self.data_parallel.checkpoint_optimizer(optimizer)

    def save_model(self, save_fn, folder) -> None:
        self.data_parallel.save_model(save_fn, folder)

    def save_checkpoint(self, write, save_fn, optimizer):
        return self.data_parallel.save_checkpoint(write, save_fn, optimizer)

    def close(self) -> None:
        self.data_parallel.close()
