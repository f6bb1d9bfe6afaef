"""Single-process checks of the parallel package: choosing a strategy, splitting data and sequences, masks."""

import pytest
import torch

from engine.errors import ConfigError
from engine.parallel import fsdp_mode, strategy_name
from engine.parallel.common import shard_step_groups
from engine.parallel.ulysses import SequenceParallel, attention_mask_for
from engine.training.loss import shift_labels


class Cfg:
    def __init__(self, **kw):
        self.cp_size, self.deepspeed, self.fsdp = 1, None, None
        self.__dict__.update(kw)


def test_strategy_choice_and_refusals():
    assert strategy_name(Cfg(), 1) == "single"
    assert strategy_name(Cfg(), 4) == "ddp"
    assert strategy_name(Cfg(fsdp="full_shard auto_wrap"), 2) == "fsdp2"
    assert strategy_name(Cfg(deepspeed="ds_z3.json"), 2) == "deepspeed"
    assert strategy_name(Cfg(cp_size=2, fsdp="full_shard"), 4) == "ulysses"
    with pytest.raises(ConfigError, match="needs 2 processes"):
        strategy_name(Cfg(cp_size=2), 1)
    with pytest.raises(ConfigError, match="must divide the number of processes"):
        strategy_name(Cfg(cp_size=2), 3)
    with pytest.raises(ConfigError, match="choose one"):
        strategy_name(Cfg(cp_size=2, deepspeed="ds.json"), 2)
    assert fsdp_mode(Cfg(fsdp="shard_grad_op auto_wrap")) == "shard_grad_op"
    assert fsdp_mode(Cfg(fsdp=True)) == "full_shard" and fsdp_mode(Cfg(fsdp="")) is None
    with pytest.raises(ConfigError, match="not understood"):
        fsdp_mode(Cfg(fsdp="offload_everything"))


def test_every_replica_gets_the_same_number_of_micro_batches():
    groups = [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8]]]  # grad_accum 2, five micro-batches
    ranks = [shard_step_groups(groups, r, 2) for r in range(2)]
    assert [len(g) for g in ranks[0]] == [len(g) for g in ranks[1]] == [2, 1]
    seen = [mb for rank in ranks for group in rank for mb in group]
    assert sorted(i for mb in seen for i in mb) == [0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8]  # first micro-batch twice
    assert ranks[0][0] == [[0, 1], [4, 5]] and ranks[1][0] == [[2, 3], [6, 7]]
    assert shard_step_groups(groups, 0, 1) is groups


def test_sequence_slices_carry_their_next_token_targets():
    ids = torch.arange(10, 17).view(1, 7)  # odd length: padded to 8
    labels = torch.tensor([[-100, -100, 12, 13, 14, 15, 16]])
    batch = {"input_ids": ids, "labels": labels, "attention_mask": torch.ones(1, 7, dtype=torch.long)}
    parts = [SequenceParallel(None, 2, r).shard_batch(batch) for r in range(2)]
    assert [p["input_ids"].tolist() for p in parts] == [[[10, 11, 12, 13]], [[14, 15, 16, 0]]]
    assert [p["position_ids"].tolist() for p in parts] == [[[0, 1, 2, 3]], [[4, 5, 6, 7]]]
    whole = torch.cat([p["shift_labels"] for p in parts], 1)
    assert whole[:, :7].tolist() == shift_labels(labels).tolist() and whole[0, 7] == -100
    assert parts[0]["shift_labels"][0, -1] == 14  # the last target of slice 0 is slice 1's first token


def test_masks_follow_transformers_rules():
    positions = torch.arange(6).view(1, 6)
    assert attention_mask_for(positions, None) is None  # one sequence: plain causal (SDPA's fast path)
    assert attention_mask_for(positions, torch.ones(1, 6)) is None
    packed = torch.tensor([[0, 1, 2, 0, 1, 0]])
    mask = attention_mask_for(packed, None)[0, 0]
    assert mask[4].tolist() == [False, False, False, True, True, False]  # token 4 sees only its own sequence
    left_padded = attention_mask_for(positions, torch.tensor([[0, 0, 1, 1, 1, 1]]))[0, 0]
    assert left_padded[0].all()  # a row with nothing to see sees everything (no NaN from SDPA)
    assert left_padded[3].tolist() == [False, False, True, True, False, False]


def test_heads_that_sequence_parallelism_cannot_split_are_refused(demo_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(demo_model_dir, attn_implementation="sdpa")
    with pytest.raises(ConfigError, match=r"cp_size 4 does not divide .* 2 key/value heads.*cp_size 1 or 2"):
        SequenceParallel(None, 4, 0).install(model)
