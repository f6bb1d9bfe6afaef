"""Packing as data: rows, positions, labels at boundaries, bin packing and each batcher's plan of an epoch."""

import random

import pytest
import torch

from engine.config import TrainConfig
from engine.data import IGNORE_INDEX, SFTCollator
from engine.data.packing import (PackedCollator, best_fit_decreasing, pack_features, padding_efficiency,
                                 segment_lengths)
from engine.errors import ConfigError
from engine.training.batching import (BATCHERS, BucketedBatcher, DynamicBatcher, LFPackedBatcher, PackedBatcher,
                                      PaddedBatcher, build_batcher)


def skewed_samples(count: int, seed: int = 0, longest: int = 200) -> list[dict]:
    """Lognormal lengths (many short, a few long), prompts masked, like encoded SFT samples."""
    rng = random.Random(seed)
    samples = []
    for _ in range(count):
        n = min(longest, max(4, int(rng.lognormvariate(3.3, 0.8))))
        ids = [rng.randrange(3, 500) for _ in range(n)]
        samples.append({"input_ids": ids, "labels": [IGNORE_INDEX] * (n // 3) + ids[n // 3:]})
    return samples


def test_pack_features_restarts_positions_and_masks_each_first_label():
    samples = [{"input_ids": [5, 6, 7], "labels": [5, 6, 7]}, {"input_ids": [8, 9], "labels": [8, 9]}]
    row = pack_features(samples)
    assert row.input_ids == [5, 6, 7, 8, 9]
    assert row.position_ids == [0, 1, 2, 0, 1]
    # Token 7 (end of sample 1) must not learn to predict 8 (start of sample 2): that label is ignored.
    assert row.labels == [IGNORE_INDEX, 6, 7, IGNORE_INDEX, 9]
    assert row.lengths == [3, 2] == segment_lengths(row.position_ids)
    assert samples[0]["labels"] == [5, 6, 7]  # the caller's samples are not modified


def test_packed_collator_makes_one_padding_free_row_with_the_same_trained_tokens():
    samples = skewed_samples(5)
    packed, padded = PackedCollator()(samples), SFTCollator(pad_token_id=0)(samples)
    total = sum(len(s["input_ids"]) for s in samples)
    assert packed["input_ids"].shape == packed["position_ids"].shape == packed["labels"].shape == (1, total)
    assert int(packed["attention_mask"].sum()) == int(padded["attention_mask"].sum()) == total
    # The recipe counts a step's trained tokens as labels[:, 1:] != -100: the same number either way.
    assert int((packed["labels"][:, 1:] != -100).sum()) == int((padded["labels"][:, 1:] != -100).sum())
    assert padded["input_ids"].numel() > total  # padding was there to remove


def test_pack_features_rejects_bad_samples():
    with pytest.raises(ValueError):
        pack_features([])
    with pytest.raises(ValueError):
        pack_features([{"input_ids": [1, 2], "labels": [1]}])
    with pytest.raises(ValueError):
        segment_lengths([1, 2, 0])


def test_best_fit_decreasing_fills_bins_within_capacity_and_counts_stay_fixed():
    lengths = [len(s["input_ids"]) for s in skewed_samples(300, longest=128)]
    bins = best_fit_decreasing(lengths, 256)
    assert sorted(i for b in bins for i in b) == list(range(300))
    assert all(sum(lengths[i] for i in b) <= 256 for b in bins)
    assert len(bins) <= sum(lengths) / 256 * 1.25 + 1  # close to the lower bound, not one sample per bin
    other = best_fit_decreasing(lengths, 256, order=random.Random(1).sample(range(300), 300))
    assert len(other) == len(bins) and other != bins  # ties moved, the count did not
    with pytest.raises(ValueError, match="longer than the token budget"):
        best_fit_decreasing([10, 300], 256)


def test_padding_efficiency():
    lengths = [10, 30, 20, 20]
    assert padding_efficiency(lengths, [[0, 1], [2, 3]], packed=False) == pytest.approx(80 / 100)
    assert padding_efficiency(lengths, [[0, 1], [2, 3]], packed=True) == 1.0


def _check_epoch_plan(batcher, count: int) -> list[list[list[int]]]:
    plan = batcher.groups(0)
    seen = [i for step in plan for micro in step for i in micro]
    assert sorted(seen) == list(range(count)), "every sample exactly once per epoch"
    assert batcher.groups(0) == plan, "the plan depends only on seed and epoch (resume sees the same batches)"
    assert batcher.groups(1) != plan
    assert batcher.steps_per_epoch() == len(plan) == len(batcher.groups(1))
    return plan


@pytest.mark.parametrize("name", sorted(BATCHERS))
def test_every_batcher_plans_a_complete_reproducible_epoch(name):
    samples = skewed_samples(203)
    if name == "dynamic":
        batcher = DynamicBatcher(samples, SFTCollator(0), 4, 2, 7, token_budget=4 * 200)
    else:
        batcher = BATCHERS[name](samples, SFTCollator(0), 4, 2, 7)
    plan = _check_epoch_plan(batcher, len(samples))
    assert all(1 <= len(step) <= 2 for step in plan)
    batch = batcher.collate(plan[0][0])
    assert batch["input_ids"].shape == batch["labels"].shape
    assert ("position_ids" in batch) == (name in ("packed", "dynamic"))


def test_packed_uses_the_padded_steps_and_bucketing_cuts_padding():
    samples = skewed_samples(256)
    lengths = [len(s["input_ids"]) for s in samples]
    padded = PaddedBatcher(samples, SFTCollator(0), 4, 2, 7)
    packed = PackedBatcher(samples, SFTCollator(0), 4, 2, 7)
    bucketed = BucketedBatcher(samples, SFTCollator(0), 4, 2, 7)
    assert packed.groups(3) == padded.groups(3)  # same samples in every step: an honest like-for-like comparison
    micro = lambda b: [m for step in b.groups(0) for m in step]  # noqa: E731
    assert all(len(m) == 4 for m in micro(bucketed))
    assert padding_efficiency(lengths, micro(bucketed), packed=False) > \
        padding_efficiency(lengths, micro(padded), packed=False) + 0.2


def test_dynamic_batches_respect_the_token_budget():
    samples = skewed_samples(300)
    batcher = DynamicBatcher(samples, SFTCollator(0), 2, 1, 3, token_budget=512)
    for step in batcher.groups(0):
        for micro in step:
            batch = batcher.collate(micro)
            assert batch["input_ids"].shape[0] == 1 and batch["input_ids"].shape[1] <= 512
    padded_steps = PaddedBatcher(samples, SFTCollator(0), 2, 1, 3).steps_per_epoch()
    assert batcher.steps_per_epoch() < padded_steps  # fuller micro-batches, so fewer of them
    with pytest.raises(ConfigError, match="token budget"):
        DynamicBatcher(samples, SFTCollator(0), 1, 1, 3, token_budget=100)


def test_build_batcher_follows_the_config():
    samples = skewed_samples(40)
    pick = lambda **kw: build_batcher(TrainConfig(**kw), samples, SFTCollator(0), pad_token_id=0)  # noqa: E731
    assert type(pick()) is PaddedBatcher
    assert type(pick(batching_strategy="packed")) is PackedBatcher
    assert type(pick(packing=True)) is LFPackedBatcher  # LLaMA-Factory's packing: rows of cutoff_len
    assert type(pick(neat_packing=True)) is LFPackedBatcher and not pick(neat_packing=True).collate_fn.cross_attention
    assert type(pick(packing=True, stage="pt")) is PaddedBatcher  # pre-training rows are made by the recipe
    assert type(pick(batching_strategy="bucketed")) is BucketedBatcher
    dynamic = pick(batching_strategy="dynamic", per_device_train_batch_size=3, cutoff_len=256)
    assert type(dynamic) is DynamicBatcher and dynamic.token_budget == 3 * 256
    config = TrainConfig()
    config.batching_strategy = "sorted"
    with pytest.raises(ConfigError, match="padded, bucketed, packed, dynamic"):
        build_batcher(config, samples, SFTCollator(0))
    packed = pick(batching_strategy="packed").collate([0])["position_ids"][0]
    assert torch.equal(packed, torch.arange(len(samples[0]["input_ids"])))
