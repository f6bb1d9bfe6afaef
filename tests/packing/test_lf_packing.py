"""LLaMA-Factory's packing in an LLaMA-Factory config: SFT samples packed into rows of up to cutoff_len tokens
(its greedy knapsack), the rows batched, so an epoch has fewer steps over the same tokens; attention spans a row's
samples, except with neat_packing. lf-assistant's step-preserving packing is batching_strategy: packed."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import engine
from engine.config import TrainConfig
from engine.config.method_check import packing_in_use
from engine.data import IGNORE_INDEX
from engine.data.packing import PackedRowsCollator
from engine.training.batching import LFPackedBatcher, PaddedBatcher, lf_knapsack
from engine.training.loss import model_inputs

from tests.packing.test_packing_data import skewed_samples

REPO = Path(__file__).resolve().parents[2]
LF_PROCESSOR_UTILS = Path("/work/lf-ref/src/llamafactory/data/processor/processor_utils.py")


def test_knapsack_fills_rows_as_llamafactory():
    lengths = [len(s["input_ids"]) for s in skewed_samples(500, longest=250)]
    rows = lf_knapsack(lengths, 255)
    assert sorted(i for row in rows for i in row) == list(range(500))  # every sample once
    assert all(sum(lengths[i] for i in row) <= 255 for row in rows)
    assert len(rows) < 500 / 3
    if LF_PROCESSOR_UTILS.is_file():  # the reference implementation, read from LLaMA-Factory's source
        spec = importlib.util.spec_from_file_location("lf_processor_utils", LF_PROCESSOR_UTILS)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
        expected = module.greedy_knapsack(list(lengths), 255)
        assert [[lengths[i] for i in row] for row in rows] == expected


def test_rows_fewer_steps_same_tokens():
    from engine.data.chunks import preprocessing_chunks

    samples = skewed_samples(2 * 1000 + 37, longest=120)
    packed = LFPackedBatcher(samples, 0, 4, 2, seed=3, capacity=255, neat=False,
                             chunks=preprocessing_chunks(len(samples), 1000, None))
    padded = PaddedBatcher(samples, None, 4, 2, 3)
    assert packed.steps_per_epoch() * 3 < padded.steps_per_epoch()
    seen = [i for step in packed.groups(0) for micro in step for row in micro for i in packed.rows[row]]
    assert sorted(seen) == list(range(len(samples)))  # one epoch covers every sample once
    batch = packed.collate(packed.groups(0)[0][0])
    assert batch["input_ids"].shape[0] == 4 and batch["input_ids"].shape[1] <= 255
    real = sum(len(samples[i]["input_ids"]) for row in packed.groups(0)[0][0] for i in packed.rows[row])
    assert int(batch["attention_mask"].sum()) == real
    assert packed.groups(1) != packed.groups(0)  # rows are reshuffled every epoch


def test_neat_packing_blocks_attention_across_samples(demo_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(demo_model_dir).eval()
    first = {"input_ids": [11, 12, 13, 14, 15], "labels": [IGNORE_INDEX] * 5}
    second = {"input_ids": [21, 22, 23, 24], "labels": [IGNORE_INDEX] * 4}
    with torch.no_grad():
        alone = model(torch.tensor([second["input_ids"]])).logits[0]
        for cross in (False, True):
            batch = PackedRowsCollator(0, cross_attention=cross)([[first, second]])
            logits = model(**model_inputs(batch), use_cache=False).logits[0, 5:]
            if cross:  # LLaMA-Factory's packing: the second sample sees the first
                assert not torch.allclose(logits, alone, atol=1e-4)
            else:
                torch.testing.assert_close(logits, alone, atol=1e-4, rtol=1e-4)


def test_check_says_which_packing_is_in_use():
    assert packing_in_use(TrainConfig(packing=True)).startswith("LLaMA-Factory's packing")
    assert "stays within each sample" in packing_in_use(TrainConfig(neat_packing=True))
    assert packing_in_use(TrainConfig(batching_strategy="packed")).startswith("lf-assistant's batching_strategy")
    config = engine.load_config({"dataset": "identity", "dataset_dir": str(REPO / "data"), "packing": True,
                                 "batching_strategy": "dynamic"})
    assert any("keep one" in p for p in engine.validate(config))


def run(tmp_path, model_dir, name, **over):
    config = {"model_name_or_path": str(model_dir), "dataset": "identity", "dataset_dir": str(REPO / "data"),
              "template": "qwen", "cutoff_len": 256, "per_device_train_batch_size": 2, "num_train_epochs": 1,
              "max_samples": 16, "finetuning_type": "full", "learning_rate": 2e-3, "logging_steps": 1,
              "save_strategy": "no", "plot_loss": False, "lr_scheduler_type": "constant",
              "output_dir": str(tmp_path / name)}
    handle = engine.train(engine.load_config({**config, **over}), runs_dir=tmp_path / "runs")
    assert handle.status().state == "completed"
    return handle.status(), [m["loss"] for m in handle.metrics() if "loss" in m]


def test_packing_trains_an_epoch_in_fewer_steps(demo_model_dir, tmp_path):
    padded, _ = run(tmp_path, demo_model_dir, "padded")
    packed, _ = run(tmp_path, demo_model_dir, "packed", packing=True)
    assert padded.step == 8 and packed.step == 3  # 16 samples, 1,124 tokens: 8 padded steps; 5 rows, 3 steps
    assert packed.num_input_tokens_seen == padded.num_input_tokens_seen  # the same tokens
    assert packed.num_trained_tokens == padded.num_trained_tokens


@pytest.mark.slow
def test_packed_rows_learn(demo_model_dir, tmp_path):
    base = base_weights(demo_model_dir)
    status, curve = run(tmp_path, demo_model_dir, "learns", packing=True, num_train_epochs=4, save_strategy="no")
    assert curve[-1] < curve[0], curve
    from safetensors.torch import load_file

    tuned = load_file(Path(status.output_dir) / "model.safetensors")
    assert all(not torch.equal(base[k], tuned[k]) for k in base if "self_attn" in k)


def base_weights(model_dir):
    from safetensors.torch import load_file

    return load_file(Path(model_dir) / "model.safetensors")


def test_lf_packing_follows_the_configs_preprocessing_batches():
    """build_batcher packs within the batches preprocessing_batch_size / preprocessing_num_workers give: a row never
    takes samples of two batches, so another batch size packs other rows."""
    import engine
    from engine.training.batching import build_batcher

    samples = skewed_samples(40, longest=60)
    rows = {}
    for batch, workers in ((1000, None), (7, None), (1000, 3)):
        config = engine.load_config({"stage": "sft", "packing": True, "cutoff_len": 256,
                                     "preprocessing_batch_size": batch, "preprocessing_num_workers": workers})
        rows[batch, workers] = build_batcher(config, samples, None, pad_token_id=0).rows
    assert all(len({i // 7 for i in row}) == 1 for row in rows[7, None])
    shards = [range(0, 14), range(14, 27), range(27, 40)]  # 40 rows in 3 contiguous shards: 14, 13, 13
    assert all(len({next(n for n, s in enumerate(shards) if i in s) for i in row}) == 1 for row in rows[1000, 3])
    assert rows[1000, None] != rows[7, None]


def test_rows_that_train_nothing_are_packed_with_their_batch():
    """LLaMA-Factory packs each preprocessing batch of ROWS, a row whose answer truncation cut away included: it
    takes its room in a packed row there, so here too (leaving it out moved every later batch boundary)."""
    import engine
    from engine.data.chunks import preprocessing_chunks
    from engine.data.encode import IGNORE_INDEX, EncodedSamples, encode_in_chunks
    from engine.training.batching import build_batcher

    rows = [{"length": 20, "source": f"d:{i}", "trains": i not in (1, 5)} for i in range(9)]

    def encode(part):  # as encode_supervised reports a row with no trained token
        samples = [{"input_ids": [1] * r["length"], "labels": [1 if r["trains"] else IGNORE_INDEX] * r["length"]}
                   for r in part]
        return EncodedSamples(samples, untrained=[r["source"] for r in part if not r["trains"]])

    samples = encode_in_chunks(encode, rows, preprocessing_chunks(len(rows), 3, None))
    assert samples.untrained == ["d:1", "d:5"] and len(samples) == 9
    assert samples.chunks == [range(0, 3), range(3, 6), range(6, 9)]
    config = engine.load_config({"stage": "sft", "packing": True, "cutoff_len": 256, "preprocessing_batch_size": 3})
    packed = build_batcher(config, samples, None, pad_token_id=0).rows
    assert sorted(sorted(row) for row in packed) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
