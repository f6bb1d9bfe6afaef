"""Merge LoRA adapters into the base weights, and prove the merge happened.

A merge can fail silently (pain point 11: an export that is byte-for-byte the base model). So each adapter is
checked twice while both versions are at hand:

1. Weights: for every adapted matrix whose update B·A is non-zero, the entries with the largest update must change,
   and equal base + update (within the dtype's rounding).
2. Logits: the merged model's logits on a few probe prompts must match the unmerged base + adapter model's.

Several adapters merge in order, each into the weights the previous ones left, as LLaMA-Factory does. Adapters that
touch the same matrix add up there, so what the export must hold at an earlier adapter's entries is the base plus
every later adapter's update too: each fingerprint carries the updates merged after it (``carry_forward``).

Tied input/output embeddings (small Qwen, Llama 3.2, Gemma) share one tensor; when an adapter touches either side,
the output side gets its own copy first, so merging changes only what the adapter trained (pain point #8859).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from engine.checks import Check, with_faults  # noqa: F401 - Check: export's name for it
from engine.errors import ModelError
from engine.messages import Message
from engine.inference.source import attach_adapter

TOP_K_ENTRIES = 8  # entries checked per adapted matrix: the largest |update|, so rounding cannot hide them
# Logits tolerance relative to the largest reference logit: fp32 merging differs only by summation order (measured
# ~1e-6 on the demo model); 16-bit weights round the merged sum once more (bf16 has 8 bits of mantissa).
LOGITS_REL_TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}


@dataclass
class Fingerprint:
    """Where one adapted matrix must differ from the base, and what it must become."""

    param: str
    index: torch.Tensor
    base: torch.Tensor
    """The entries before this fingerprint's adapter merged (earlier adapters already in them)."""
    delta: torch.Tensor
    """The update the entries take: this adapter's B·A, plus that of every adapter merged after it."""


def merge_adapters(model, adapters: list[str], probe: dict, *, base_model: str,
                   progress: Callable[[str], None] = lambda _msg: None) -> tuple[object, list[Check], list[Fingerprint],
                                                                                 list[Message]]:
    """(merged model, checks, fingerprints of what the export must hold, notes). Raises ModelError when an adapter
    changes nothing."""
    checks: list[Check] = []
    prints: list[Fingerprint] = []
    notes: list[Message] = []
    for adapter in adapters:
        progress(f"merging adapter {adapter}")
        peft_model = attach_adapter(model, adapter, base_model)
        peft_model.eval()
        note = untie_adapted_embeddings(peft_model)
        if note:
            notes.append(note)
        adapter_prints, prints = fingerprints(peft_model, carry_forward=prints)
        if not adapter_prints:
            raise ModelError(
                f"The adapter {adapter} changes nothing: every LoRA update (B·A) is zero, so the export would be the "
                "base model unchanged. It was saved before any training step took effect; check the run's loss and "
                "that it finished, then export its final output_dir.")
        reference = probe_logits(peft_model, probe)
        model = peft_model.merge_and_unload()
        model.eval()
        checks.append(check_weights(model, adapter_prints, adapter))
        checks.append(check_logits(reference, probe_logits(model, probe), probe["attention_mask"], adapter,
                                   next(model.parameters()).dtype))
    return model, checks, prints, notes


def untie_adapted_embeddings(peft_model) -> Message | None:
    """Give the output head its own copy of a tied embedding when an adapter wraps either of them."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    base = peft_model.get_base_model()
    inputs, outputs = base.get_input_embeddings(), base.get_output_embeddings()
    if inputs is None or outputs is None:
        return None
    in_weight, out_weight = inputs.weight, outputs.weight
    if in_weight.data_ptr() != out_weight.data_ptr():
        return None
    wrapped = [m for m in (inputs, outputs) if isinstance(m, BaseTunerLayer) or hasattr(m, "modules_to_save")]
    if not wrapped:
        return None
    head = outputs.get_base_layer() if isinstance(outputs, BaseTunerLayer) else outputs
    head.weight = torch.nn.Parameter(out_weight.detach().clone(), requires_grad=False)
    base.config.tie_word_embeddings = False
    text_config = base.config.get_text_config() if hasattr(base.config, "get_text_config") else None
    if text_config is not None:
        text_config.tie_word_embeddings = False
    return Message("export.untied_embeddings", "the adapter trains a tied embedding, so the export unties the input "
                   "embedding and the output head (tie_word_embeddings: false); each keeps what training gave it.")


def fingerprints(peft_model, carry_forward: Sequence[Fingerprint] = ()) -> tuple[list[Fingerprint],
                                                                                 list[Fingerprint]]:
    """(this adapter's fingerprints, `carry_forward` with this adapter's update added at their entries followed by
    this adapter's fingerprints), taken before merging. A fingerprint is an adapted matrix's largest-update entries.

    The first list is what this adapter's own merge must change; the second is what the export must hold once this
    adapter is merged on top of the ones before it."""
    carried = list(carry_forward)
    positions: dict[str, list[int]] = {}
    for position, fingerprint in enumerate(carried):
        positions.setdefault(fingerprint.param, []).append(position)
    found = []
    for param, weight, delta in _updates(peft_model):
        flat_delta = delta.flatten().float()
        for position in positions.get(param, []):
            before = carried[position]
            added = flat_delta[before.index.to(flat_delta.device)].cpu()
            carried[position] = replace(before, delta=before.delta + added)
        index = flat_delta.abs().topk(min(TOP_K_ENTRIES, flat_delta.numel())).indices
        found.append(Fingerprint(param, index.cpu(), weight.detach().flatten()[index].cpu().clone(),
                                 flat_delta[index].cpu()))
    return found, carried + found


def _updates(peft_model):
    """(parameter name, base weight, B·A) for each LoRA-wrapped matrix of the active adapter with a non-zero update."""
    from peft.tuners.lora import LoraLayer

    for name, module in peft_model.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        for adapter_name in module.active_adapters:
            if adapter_name not in module.lora_A and adapter_name not in module.lora_embedding_A:
                continue
            weight = module.get_base_layer().weight
            delta = module.get_delta_weight(adapter_name).detach()
            if delta.shape != weight.shape or not bool(delta.abs().max() > 0):
                continue
            yield name.removeprefix("base_model.model.") + ".weight", weight, delta


def expected_values(fingerprint: Fingerprint, dtype: torch.dtype) -> torch.Tensor:
    return (fingerprint.base.float() + fingerprint.delta).to(dtype)


def entries_match(values: torch.Tensor, fingerprint: Fingerprint) -> bool:
    """True when `values` (merged or exported entries) carry the update: changed from the base where rounding
    lets them, and equal to base + update up to a few ulps of their dtype."""
    expected = expected_values(fingerprint, values.dtype).float()
    eps = torch.finfo(values.dtype).eps if values.dtype.is_floating_point else 0.0
    scale = torch.maximum(expected.abs(), fingerprint.delta.abs())
    close = bool(((values.float() - expected).abs() <= 4 * eps * scale + 1e-7).all())
    changed = bool((values != fingerprint.base.to(values.dtype)).any())
    representable = not torch.equal(expected_values(fingerprint, values.dtype), fingerprint.base.to(values.dtype))
    return close and (changed or not representable)


def check_weights(model, prints: list[Fingerprint], adapter: str) -> Check:
    params = dict(model.named_parameters())
    failed = [p.param for p in prints if p.param not in params
              or not entries_match(params[p.param].detach().flatten()[p.index].cpu(), p)]
    equal = Message("export.check.merged_equal", f"{adapter}: {len(prints) - len(failed)} of {len(prints)} adapted "
                    f"matrices equal base + B·A at their {TOP_K_ENTRIES} largest-update entries", {
                        "adapter": adapter, "equal": len(prints) - len(failed), "total": len(prints),
                        "entries": TOP_K_ENTRIES})
    names = ", ".join(failed[:5])
    detail = with_faults(equal, [Message("export.check.not_merged", f"not merged: {names}", {"names": names})]
                         if failed else [])
    name = "merged weights differ from the base where the adapter is non-zero"
    return Check(name=name, passed=not failed, detail=detail.text,
                 name_message=Message("export.check.merged_differ", name), detail_message=detail)


def probe_logits(model, probe: dict) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=probe["input_ids"], attention_mask=probe["attention_mask"]).logits.float().cpu()


def check_logits(reference: torch.Tensor, merged: torch.Tensor, attention_mask: torch.Tensor, adapter: str,
                 dtype: torch.dtype) -> Check:
    """The merged model answers like base + adapter: max |logit difference| over real (unpadded) tokens."""
    real = attention_mask.bool().cpu()
    diff = float((reference - merged).abs()[real].max())
    tolerance = LOGITS_REL_TOL.get(dtype, 5e-2) * max(1.0, float(reference.abs()[real].max()))
    detail = (f"{adapter}: max |logit difference| {diff:.3g} over {int(real.sum())} probe tokens "
              f"({str(dtype).removeprefix('torch.')}), tolerance {tolerance:.3g}")
    return Check(name="merged logits match base + adapter", passed=diff <= tolerance, measured=diff,
                 tolerance=tolerance, detail=detail,
                 name_message=Message("export.check.merged_logits", "merged logits match base + adapter"),
                 detail_message=Message("export.check.logit_difference", detail, {
                     "adapter": adapter, "diff": f"{diff:.3g}", "tokens": int(real.sum()),
                     "dtype": str(dtype).removeprefix("torch."), "tolerance": f"{tolerance:.3g}"}))
