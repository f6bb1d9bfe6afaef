"""Code that runs inside each torchrun process of the multi-process tests.

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/parallel/workers.py CASE MODEL_DIR OUT_DIR

Every case compares the distributed computation with a single-process computation of the same global batch, made
inside the same process from a fresh copy of the model, and writes its measurements to OUT_DIR/<case>-rank<r>.json;
the pytest side asserts on them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from engine.data.collator import SFTCollator  # noqa: E402
from engine.training.loss import causal_lm_loss_sum, trained_tokens  # noqa: E402

LENGTHS = (7, 12, 5, 9)  # different lengths: padding inside the concatenated reference batch


def samples(vocab: int, lengths=LENGTHS, prompt: int = 3) -> list[dict]:
    generator = torch.Generator().manual_seed(11)
    out = []
    for n in lengths:
        ids = torch.randint(3, vocab, (n,), generator=generator).tolist()
        out.append({"input_ids": ids, "labels": [-100] * prompt + ids[prompt:]})
    return out


def load(model_dir: str, lora: bool = False):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    if lora:
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(3)
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj",
                                                                                   "o_proj", "gate_proj"]))
        # LoRA B starts at zero, which would leave A's gradient zero: give B values so every gradient is tested.
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.normal_(0, 0.02, generator=torch.Generator().manual_seed(5))
    model.train()
    return model


def reference_step(model, batch: dict, lr: float) -> tuple[float, dict, float]:
    """Single process: loss, gradients and the clipped-norm value for one SGD step on the whole batch."""
    loss_sum, _ = causal_lm_loss_sum(model, batch)
    loss = loss_sum / trained_tokens(batch)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    # The norm in float64: torch's fp32 foreach norm is off by ~4e-5 relative on this model.
    norm = sum(g.double().pow(2).sum() for g in grads.values()).sqrt()
    coef = min(1.0, 1.0 / (float(norm) + 1e-6))
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= lr * coef * p.grad
    return float(loss), grads, float(norm)


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))[:5]
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def full_params(model) -> dict:
    from torch.distributed.tensor import DTensor

    out = {}
    for name, param in model.named_parameters():
        value = param.full_tensor() if isinstance(param, DTensor) else param.detach()
        out[name.replace("_checkpoint_wrapped_module.", "")] = value.clone()
    return out


def distributed_step(strategy, train_model, model, batches: list[dict], lr: float) -> tuple[float, dict, float]:
    """The recipe's step: token-normalised loss over the global batch, strategy clipping, SGD."""
    step_tokens = sum(trained_tokens(b) for b in batches)
    denominator = strategy.loss_denominator(step_tokens)
    seen = 0.0
    for batch in batches:
        loss_sum, _ = causal_lm_loss_sum(train_model, batch)
        strategy.backward(loss_sum / denominator)
        seen += float(loss_sum.detach())
    params = [p for p in model.parameters() if p.requires_grad]
    grads = {}
    from torch.distributed.tensor import DTensor

    for name, p in model.named_parameters():
        if p.grad is not None:
            grads[name] = (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).detach().clone()
    norm = strategy.clip_grad_norm(params, 1.0)
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
    loss = strategy.sum_across_ranks(seen) / strategy.sum_across_ranks(step_tokens)
    return loss, grads, float(norm)


def case_data_parallel(kind: str, model_dir: str, out: Path) -> dict:
    """DDP or FSDP2, full fine-tuning and LoRA: one step on rank-split data equals one step on the whole batch."""
    from engine.parallel.ddp import DDPStrategy
    from engine.parallel.fsdp2 import FSDP2Strategy

    strategy = DDPStrategy() if kind == "ddp" else FSDP2Strategy()
    results = {}
    for lora in (False, True):
        collate = SFTCollator(pad_token_id=0)
        data = samples(vocab=load(model_dir).config.vocab_size)
        groups = [[[0, 1], [2, 3]]]  # one optimizer step of two micro-batches of two samples
        mine = strategy.shard_groups(groups)
        reference = load(model_dir, lora)
        ref_loss, ref_grads, ref_norm = reference_step(reference, collate(data), lr=0.5)
        model = load(model_dir, lora)
        train_model = strategy.wrap(model, config=_Config())
        batches = [collate([data[i] for i in ids]) for ids in mine[0]]
        loss, grads, norm = distributed_step(strategy, train_model, model, batches, lr=0.5)
        params = full_params(model)
        ref_params = {n: p.detach() for n, p in reference.named_parameters()}
        results["lora" if lora else "full"] = {
            "samples_here": sorted(i for ids in mine[0] for i in ids),
            "loss": loss, "ref_loss": ref_loss, "norm": norm, "ref_norm": ref_norm,
            "grad_diff": max_diff({k: grads[k] for k in ref_grads}, ref_grads),
            "param_diff": max_diff(params, ref_params),
            "param_checksum": float(sum(p.double().sum() for p in params.values())),
            "changed": sum(1 for k in params if not torch.equal(params[k], load_param(model_dir, k, lora))),
        }
    strategy.close()
    return results


def load_param(model_dir: str, name: str, lora: bool) -> torch.Tensor:
    """The value a parameter had before the step."""
    cache = load_param.__dict__.setdefault("cache", {})
    if lora not in cache:
        cache[lora] = {n: p.detach().clone() for n, p in load(model_dir, lora).named_parameters()}
    return cache[lora][name]


def sp_batches(vocab: int) -> dict[str, dict]:
    """Odd length (padding path), a padded two-row batch (attention mask), and three packed sequences."""
    collate = SFTCollator(pad_token_id=0)
    odd = collate(samples(vocab, lengths=(13,)))
    masked = collate(samples(vocab, lengths=(13, 8)))
    parts = samples(vocab, lengths=(5, 4, 6), prompt=1)
    packed = {"input_ids": torch.tensor([sum((p["input_ids"] for p in parts), [])]),
              "labels": torch.tensor([sum((p["labels"] for p in parts), [])]),
              "position_ids": torch.tensor([sum((list(range(len(p["input_ids"]))) for p in parts), [])])}
    return {"odd_length": odd, "attention_mask": masked, "packed": packed}


def case_sequence_parallel(model_dir: str, out: Path) -> dict:
    """sp=2: the loss on slices, reduced with the autograd-aware sum, and every gradient (summed over the sp
    ranks) equal the single-process computation on the whole sequence."""
    from engine.parallel.ulysses import SequenceParallel, reduce_sum

    group = dist.new_group([0, 1])
    results = {}
    for lora in (False, True):
        reference, model = load(model_dir, lora), load(model_dir, lora)
        sp = SequenceParallel(group, 2, dist.get_rank())
        sp.install(model)
        for name, batch in sp_batches(model.config.vocab_size).items():
            reference.zero_grad(set_to_none=True)
            model.zero_grad(set_to_none=True)
            ref_sum, ref_tokens = causal_lm_loss_sum(reference, batch)
            (ref_sum / ref_tokens).backward()
            local = sp.shard_batch(batch)
            local_sum, local_tokens = causal_lm_loss_sum(model, local)
            tokens = reduce_sum(torch.tensor(float(local_tokens)), group)
            loss = reduce_sum(local_sum, group) / tokens
            loss.backward()
            grads = {}
            for pname, param in model.named_parameters():
                if param.grad is not None:
                    dist.all_reduce(param.grad, group=group)
                    grads[pname] = param.grad
            ref_grads = {n: p.grad for n, p in reference.named_parameters() if p.grad is not None}
            results[f"{'lora' if lora else 'full'}/{name}"] = {
                "loss": float(loss), "ref_loss": float(ref_sum / ref_tokens), "grad_diff": max_diff(grads, ref_grads),
                "grads": len(grads), "local_length": int(local["input_ids"].shape[1]),
                "full_length": int(batch["input_ids"].shape[1]), "tokens": float(tokens), "ref_tokens": ref_tokens}
    return results


def recipe_config(model_dir: str, out: Path, **over):
    import engine

    base = {"model_name_or_path": model_dir, "dataset": "identity", "dataset_dir": str(REPO / "data"),
            "template": "qwen", "cutoff_len": 64, "max_samples": 16, "per_device_train_batch_size": 2,
            "learning_rate": 2e-3, "max_steps": 4, "logging_steps": 1, "save_steps": 2, "seed": 7,
            "lr_scheduler_type": "constant", "plot_loss": False, "finetuning_type": "full"}
    base.update(over)
    config = engine.load_config(base)
    config.fsdp = "full_shard"  # not a YAML key yet: the strategy reads it with getattr
    return config


def case_fsdp_recipe(model_dir: str, out: Path) -> dict:
    """The SFT recipe under FSDP2: full fine-tuning saves a model from_pretrained loads; LoRA saves an adapter,
    and a run resumed from its step-2 checkpoint (sharded optimizer state gathered) ends with the same weights."""
    from engine.recipes import run_stage
    from engine.rundir import RunDir

    results = {}
    lora = {"finetuning_type": "lora", "learning_rate": 5e-2}
    runs = {"full": {"max_steps": 2},
            "lora": lora,
            "resumed": {**lora, "resume_from_checkpoint": str(out / "lora" / "checkpoint-2")}}
    for name, over in runs.items():
        config = recipe_config(model_dir, out, output_dir=str(out / name), **over)
        run = RunDir(out / f"run-{name}")
        run.path.mkdir(exist_ok=True)
        status = run_stage(config, run)
        results[name] = {"state": status.state, "step": status.step,
                         "strategy": run.read_status().parallel,
                         "losses": [m["loss"] for m in run.read_metrics() if "loss" in m]}
        dist.barrier()  # rank 0 finishes writing the output before anyone reads it
    return results


def case_composed_recipe(model_dir: str, out: Path) -> dict:
    """Ulysses sp=2 over DDP, over FSDP2, and with gradient checkpointing: the same training, the same losses."""
    from engine.recipes import run_stage
    from engine.rundir import RunDir

    results = {}
    variants = {"sp_ddp": (None, False), "sp_fsdp2": ("full_shard", False), "sp_ddp_checkpointing": (None, True)}
    for name, (fsdp, checkpointing) in variants.items():
        config = recipe_config(model_dir, out, output_dir=str(out / name), finetuning_type="lora", max_steps=3,
                               learning_rate=5e-2, cp_size=2, save_steps=100, gradient_checkpointing=checkpointing)
        config.fsdp = fsdp
        run = RunDir(out / f"run-{name}")
        run.path.mkdir(exist_ok=True)
        status = run_stage(config, run)
        results[name] = {"state": status.state, "strategy": run.read_status().parallel,
                         "losses": [m["loss"] for m in run.read_metrics() if "loss" in m],
                         "grad_norms": [m["grad_norm"] for m in run.read_metrics() if "grad_norm" in m]}
        dist.barrier()
    return results


class _Config:
    """The two fields strategies read from a TrainConfig."""

    bf16 = False
    fp16 = False


CASES = {
    "ddp": lambda model_dir, out: case_data_parallel("ddp", model_dir, out),
    "fsdp2": lambda model_dir, out: case_data_parallel("fsdp2", model_dir, out),
    "sp": case_sequence_parallel,
    "fsdp_recipe": case_fsdp_recipe,
    "composed_recipe": case_composed_recipe,
}


def main() -> None:
    """CASES is comma-separated: one torchrun start (imports cost ~10 s per process here) serves several cases."""
    cases, model_dir, out = sys.argv[1].split(","), sys.argv[2], Path(sys.argv[3])
    rank = int(os.environ.get("RANK", "0"))
    dist.init_process_group("gloo")  # owned here, so a strategy's close() leaves it to the next case
    for case in cases:
        torch.manual_seed(0)
        result = CASES[case](model_dir, out)
        (out / f"{case}-rank{rank}.json").write_text(json.dumps(result, indent=2))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
