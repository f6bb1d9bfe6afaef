"""Rules between a method's keys, as LLaMA-Factory's parser enforces them (LoRA variants, adapters, freeze tuning,
quantization), plus what the model folder says about them (layer count, module names). Each problem is a sentence
that says what to change; warnings are what trains differently from what the keys may suggest.
"""

from __future__ import annotations

from engine.config.model_check import linear_layers, local_config

LORA_ONLY = ("use_rslora", "use_dora", "pissa_init", "additional_target")


def _set(c, key: str) -> bool:
    value = getattr(c, key)
    return bool(value) if not isinstance(value, str) else bool(value.strip())


def method_problems(c) -> list[str]:
    """Relations between the method keys (LLaMA-Factory refuses the same combinations)."""
    lora = c.finetuning_type in ("lora", "qlora")
    problems = [f"{key} only applies to LoRA (finetuning_type is {c.finetuning_type}); remove it or use "
                "finetuning_type: lora." for key in LORA_ONLY if _set(c, key) and not lora]
    if _set(c, "freeze_extra_modules") and c.finetuning_type != "freeze":
        problems.append(f"freeze_extra_modules only applies to finetuning_type: freeze (it is {c.finetuning_type}); "
                        "with LoRA, additional_target trains whole modules.")
    adapters = [a for a in (c.adapter_name_or_path or "").split(",") if a.strip()]
    if c.quantization_bit:
        if c.pissa_init:
            problems.append("pissa_init cannot start from a quantized base (quantization_bit): PiSSA decomposes the "
                            "full-precision weights. Remove one of them.")
        if c.resize_vocab:
            problems.append("resize_vocab cannot resize the embeddings of a quantized base (quantization_bit).")
        if adapters and c.create_new_adapter:
            problems.append("create_new_adapter merges adapters into the base, which a quantized base "
                            "(quantization_bit) cannot take; remove one of them.")
        if len(adapters) > 1:
            problems.append("A quantized base (quantization_bit) takes a single adapter_name_or_path; merge the "
                            "others first (`lf-assistant export`).")
    if c.pissa_init:
        problems += _pissa_problems(c)
    return problems + _packing_problems(c)


def packing_in_use(c) -> str:
    """Which packing a config trains with, in words (`train --check` and the wizard's config table show it)."""
    if c.stage == "sft" and c.packing_enabled:
        within = "stays within each sample" if c.neat_packing else "spans the samples of a row"
        return (f"LLaMA-Factory's {'neat_packing' if c.neat_packing else 'packing'}: samples packed into rows of up "
                f"to cutoff_len tokens, rows batched (fewer steps per epoch); attention {within}")
    if c.stage == "pt" and c.packing_enabled:
        return "LLaMA-Factory's pre-training packing: the texts concatenated and cut into rows of cutoff_len tokens"
    if c.batching_strategy == "packed":
        return ("lf-assistant's batching_strategy: packed: each micro-batch as one padding-free row (the steps of "
                "padded batches), attention within each sample")
    return f"none (batching_strategy: {c.batching_strategy})"


def per_sample_packing(config) -> str | None:
    """The setting that packs several samples into one row with attention kept within each sample (from the
    restarting position ids), or None: lf-assistant's packed / dynamic batching, or LLaMA-Factory's neat_packing.
    Preference and reward stages never pack; LLaMA-Factory's plain packing attends across samples on purpose."""
    if config.stage == "sft" and config.neat_packing:
        return "neat_packing"
    if config.stage in ("sft", "pt") and not config.packing_enabled and config.batching_strategy in ("packed",
                                                                                                   "dynamic"):
        return f"batching_strategy: {config.batching_strategy}"
    return None


def _packing_problems(c) -> list[str]:
    """packing / neat_packing are LLaMA-Factory's (SFT rows of cutoff_len); batching_strategy is lf-assistant's."""
    problems = []
    if c.neat_packing and c.stage != "sft":
        problems.append(f"neat_packing only applies to stage sft (stage is {c.stage}), as in LLaMA-Factory.")
    if c.stage == "sft" and c.packing_enabled and c.batching_strategy != "padded":
        problems.append(f"packing is LLaMA-Factory's packing (samples packed into rows of cutoff_len, fewer steps) "
                        f"and batching_strategy: {c.batching_strategy} is lf-assistant's own batching; keep one "
                        "(batching_strategy: packed packs each micro-batch and keeps the steps of padded batches).")
    if c.stage == "sft" and c.packing_enabled and not c.neat_packing and c.cp_size > 1:
        problems.append("packing (attention across the samples of a row) does not combine with cp_size > 1; use "
                        "neat_packing: true or batching_strategy: packed with sequence parallelism.")
    return problems


def _pissa_problems(c) -> list[str]:
    problems = []
    if c.stage == "kto" or (c.stage == "dpo" and c.pref_loss not in ("orpo", "simpo")):
        problems.append(f"pissa_init cannot be used with stage {c.stage}"
                        f"{'' if c.stage == 'kto' else f' and pref_loss {c.pref_loss}'}: the reference model would "
                        "be the PiSSA residual, not the base (LLaMA-Factory refuses it too). Use orpo or simpo, or "
                        "plain LoRA.")
    if c.fsdp or c.deepspeed:
        problems.append("pissa_init needs the whole model in one process (its SVD and the final conversion); it "
                        "does not combine with fsdp or deepspeed. Use DDP (several GPUs without fsdp/deepspeed).")
    return problems


def method_warnings(c) -> list[str]:
    """What the model folder says about the method keys: layers beyond the count, unknown module names."""
    cfg = local_config(c.model_name_or_path)
    if cfg is None:
        return []
    out = []
    text = cfg.get("text_config", cfg) if isinstance(cfg.get("text_config"), dict) else cfg
    from engine.methods.freeze import config_layer_count, layer_note

    layers = config_layer_count(cfg)
    note = layer_note(layers, c.freeze_trainable_layers) if c.finetuning_type == "freeze" and layers else None
    if note:
        out.append(note)
    if c.rope_scaling and isinstance(text.get("max_position_embeddings"), int):
        context = (text.get("rope_scaling") or text.get("rope_parameters") or {}).get(
            "original_max_position_embeddings") or text["max_position_embeddings"]
        if c.cutoff_len <= context:
            out.append(f"rope_scaling: {c.rope_scaling} changes nothing: cutoff_len {c.cutoff_len} fits the model's "
                       f"context ({context}), so LLaMA-Factory leaves RoPE as it is, and so does lf-assistant.")
    return out


def additional_target_problems(model: str | None, additional_target: str | None) -> list[str]:
    """A problem for each additional_target name that matches no module of the (local) model."""
    names = [n.strip() for n in (additional_target or "").split(",") if n.strip()]
    if not names or local_config(model) is None:
        return []
    layers = linear_layers(model)
    if layers is None or layers.modules is None:
        return []
    problems = []
    for name in names:
        if not any(full == name or full.endswith("." + name) for full in layers.modules):
            problems.append(f"additional_target {name!r} matches no module of this model (e.g. embed_tokens, "
                            f"lm_head, norm).")
    return problems


# What LLaMA-Factory needs to train LoRA on a pre-quantized checkpoint, by quant_method in config.json.
PREQUANTIZED_NEEDS = {"gptq": "the gptqmodel package (with optimum)", "awq": "the autoawq package",
                      "aqlm": "the aqlm package", "quanto": "the optimum-quanto package", "eetq": "the eetq package",
                      "hqq": "the hqq package", "bitsandbytes": "the bitsandbytes package",
                      "fp8": "a GPU with FP8 support", "mxfp4": "the kernels package (triton MXFP4)"}


def prequantized_problem(model: str, method: str) -> str:
    """Why a pre-quantized checkpoint does not train here, with what LLaMA-Factory needs for it."""
    needs = PREQUANTIZED_NEEDS.get(method.lower(), f"the {method} quantization package")
    return (f"model_name_or_path {model} is a pre-quantized checkpoint ({method}): LLaMA-Factory trains LoRA on it "
            f"with {needs} on a CUDA GPU, and lf-assistant does not load pre-quantized weights. Use the model's "
            "full-precision version (and quantization_bit: 4 for QLoRA on a CUDA GPU, quantized on the fly).")
