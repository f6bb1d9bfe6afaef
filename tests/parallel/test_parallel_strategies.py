"""DDP, FSDP2 and Ulysses sequence parallelism on 2 CPU processes give the single-process numbers (fp32)."""

import pytest
from torchrun_util import run_workers

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def results(demo_model_dir, tmp_path_factory):
    """One torchrun start for the three comparisons (each process pays ~10 s of imports)."""
    return run_workers(["ddp", "fsdp2", "sp"], demo_model_dir, tmp_path_factory.mktemp("strategies"))


@pytest.mark.multiproc
@pytest.mark.parametrize("kind", ["ddp", "fsdp2"])
def test_one_step_equals_single_process_on_the_whole_batch(results, kind):
    ranks = results[kind]
    assert ranks[0]["full"]["samples_here"] == [0, 1] and ranks[1]["full"]["samples_here"] == [2, 3]
    for method in ("full", "lora"):
        here = [r[method] for r in ranks]
        for result in here:
            assert result["loss"] == pytest.approx(result["ref_loss"], abs=TOLERANCE)
            assert result["grad_diff"] < TOLERANCE
            assert result["param_diff"] < TOLERANCE, result  # after clipping by the global norm and an SGD step
            # The clipping norm is the whole gradient's, not a shard's (FSDP2 shards it).
            assert result["norm"] == pytest.approx(result["ref_norm"], rel=1e-5)
            assert result["changed"] == (24 if method == "full" else 20)
        # Both ranks end with identical weights.
        assert here[0]["param_checksum"] == here[1]["param_checksum"]


@pytest.mark.multiproc
def test_sequence_parallel_matches_the_whole_sequence(results):
    for rank in results["sp"]:
        assert set(rank) == {f"{m}/{b}" for m in ("full", "lora") for b in ("odd_length", "attention_mask", "packed")}
        for name, result in rank.items():
            assert result["loss"] == pytest.approx(result["ref_loss"], abs=TOLERANCE), name
            assert result["grad_diff"] < TOLERANCE, name
            assert result["tokens"] == result["ref_tokens"], name
            assert result["grads"] == (24 if name.startswith("full") else 20), name
            # Odd lengths are padded to a multiple of sp=2 and halved.
            assert result["local_length"] == (result["full_length"] + 1) // 2, name
