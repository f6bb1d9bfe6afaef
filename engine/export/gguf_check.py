"""Load a written GGUF back with transformers and compare it with the model it was written from.

Three checks, each recorded with what was measured:
1. the tokenizer rebuilt from the file's metadata encodes the probe prompts to the same ids and has the same
   special tokens;
2. logits on the probe prompts: max |difference| over real (unpadded) tokens, relative to the largest reference
   logit (the scale the merge check uses), within the quantization's tolerance;
3. greedy answers: the same tokens, or a first difference where the reference's top two logits were closer than
   twice the measured logit difference (a near-tie that any rounding may flip; no quantization can promise
   more). A difference anywhere else means the file is wrong.
"""

from __future__ import annotations

from pathlib import Path

import torch

from engine.checks import with_faults
from engine.export.merge import Check
from engine.messages import Message

# Max |logit difference| / max(1, max |reference logit|), per GGUF storage type. Measured on the demo models
# and SmolLM2-135M-Instruct: f32 < 1e-6 (the same numbers, reordered), f16 ~2e-3, q8_0 ~0.02-0.04 (8-bit blocks
# of 32 with one scale each). The tolerances leave about 4x head room over that; a wrong layout (unpermuted Q/K,
# a missing tensor, a wrong norm epsilon) moves logits by the logits' own size, far beyond any of them.
LOGITS_TOLERANCE: dict[str, float] = {"f32": 1e-4, "f16": 1e-2, "q8_0": 0.15}
GREEDY_TOKENS = 16
PROBE_TEXTS = ("Hello! Who are you?", "Explain in one sentence what a Python list is.", "Name three colours.")


def _batch(prompts: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return {"input_ids": ids, "attention_mask": mask}


def _logits(model, batch: dict) -> torch.Tensor:
    with torch.inference_mode():
        return model(**batch).logits.float()


def check_tokenizer(gguf_tokenizer, tokenizer, texts: list[str]) -> Check:
    """The tokenizer transformers rebuilds from the GGUF encodes like the exported one."""
    differing = [t for t in texts if gguf_tokenizer(t)["input_ids"] != tokenizer(t)["input_ids"]]
    specials = ("bos_token_id", "eos_token_id", "pad_token_id")
    wrong = [s for s in specials if getattr(tokenizer, s) is not None
             and getattr(gguf_tokenizer, s) != getattr(tokenizer, s)]
    same = Message("export.check.same_ids", f"{len(texts) - len(differing)} of {len(texts)} probe texts encode to "
                   "the same ids", {"same": len(texts) - len(differing), "texts": len(texts)})
    faults = [Message("export.check.differs_on", f"differ: {differing[0]!r}", {"text": repr(differing[0])})] \
        if differing else []
    ids = [Message("export.check.special_id", f"{s} {getattr(gguf_tokenizer, s)} (expected {getattr(tokenizer, s)})",
                   {"name": s, "got": getattr(gguf_tokenizer, s), "expected": getattr(tokenizer, s)}) for s in wrong]
    if ids:
        said = ", ".join(i.text for i in ids)
        faults.append(Message("export.check.special_ids_differ", f"special ids differ: {said}", {"ids": ids}))
    detail = with_faults(same, faults)
    return Check(name="GGUF tokenizer encodes like the model's", passed=not differing and not wrong,
                 detail=detail.text,
                 name_message=Message("export.check.gguf_tokenizer", "GGUF tokenizer encodes like the model's"),
                 detail_message=detail)


def check_logits(reference: torch.Tensor, loaded: torch.Tensor, mask: torch.Tensor, quantization: str) -> Check:
    real = mask.bool()
    diff = float((reference - loaded).abs()[real].max())
    scale = max(1.0, float(reference.abs()[real].max()))
    tolerance = LOGITS_TOLERANCE[quantization] * scale
    name = f"GGUF ({quantization}) logits match the exported model"
    detail = (f"max |logit difference| {diff:.3g} over {int(real.sum())} probe tokens, largest logit {scale:.3g}, "
              f"tolerance {LOGITS_TOLERANCE[quantization]:g} x {scale:.3g}")
    return Check(name=name, passed=diff <= tolerance, measured=diff, tolerance=tolerance, detail=detail,
                 name_message=Message("export.check.gguf_logits", name, {"quantization": quantization}),
                 detail_message=Message("export.check.gguf_logit_difference", detail, {
                     "diff": f"{diff:.3g}", "tokens": int(real.sum()), "scale": f"{scale:.3g}",
                     "share": f"{LOGITS_TOLERANCE[quantization]:g}"}))


def _greedy(model, prompt: list[int], stop_ids: list[int], steps: int) -> list[int]:
    inputs = torch.tensor([prompt])
    with torch.inference_mode():
        out = model.generate(input_ids=inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=steps,
                             do_sample=False, eos_token_id=stop_ids, pad_token_id=stop_ids[0])
    return out[0, len(prompt):].tolist()


def _margin_at(model, prompt: list[int], answer: list[int], step: int) -> float:
    """The reference's top-1 minus top-2 logit where its answer and the GGUF's first part ways."""
    inputs = torch.tensor([prompt + answer[:step]])
    with torch.inference_mode():
        top = model(input_ids=inputs).logits[0, -1].float().topk(2).values
    return float(top[0] - top[1])


def check_greedy(reference_model, loaded_model, prompts: list[list[int]], stop_ids: list[int], max_diff: float,
                 decode) -> Check:
    equal, near_ties, wrong = 0, [], []
    for prompt in prompts:
        expected = _greedy(reference_model, prompt, stop_ids, GREEDY_TOKENS)
        got = _greedy(loaded_model, prompt, stop_ids, GREEDY_TOKENS)
        if got == expected:
            equal += 1
            continue
        step = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b), min(len(expected), len(got)))
        margin = _margin_at(reference_model, prompt, expected, step)
        (near_ties if margin <= 2 * max_diff else wrong).append((decode(expected), decode(got), step, margin))
    detail = f"{equal} of {len(prompts)} greedy answers ({GREEDY_TOKENS} tokens) identical"
    fields = {"equal": equal, "total": len(prompts), "tokens": GREEDY_TOKENS}
    code = "export.check.greedy_identical"
    if near_ties:
        detail += (f"; {len(near_ties)} part ways at a near-tie (top-2 margin {near_ties[0][3]:.3g} at token "
                   f"{near_ties[0][2]}, under 2 x the logit difference)")
        fields.update(ties=len(near_ties), margin=f"{near_ties[0][3]:.3g}", at=near_ties[0][2])
        code = "export.check.greedy_near_ties"
    faults = []
    if wrong:
        expected, got, step, margin = wrong[0]
        faults.append(Message("export.check.greedy_differs", f"differ at token {step} (margin {margin:.3g}): "
                              f"expected {expected!r}, got {got!r}", {"at": step, "margin": f"{margin:.3g}",
                                                                    "expected": repr(expected), "got": repr(got)}))
    said = with_faults(Message(code, detail, fields), faults)
    name = "GGUF greedy answers match the exported model"
    return Check(name=name, passed=not wrong, detail=said.text,
                 name_message=Message("export.check.gguf_greedy", name), detail_message=said)


def verify_gguf(path: Path, model, tokenizer, prompts: list[list[int]], texts: list[str], *, quantization: str,
                stop_ids: list[int]) -> list[Check]:
    """Load `path` with transformers and run the three checks against `model` (float32, on the CPU)."""
    from engine.models.gguf_file import load_gguf_model, load_gguf_tokenizer

    loaded = load_gguf_model(path)
    loaded.eval()
    checks = [check_tokenizer(load_gguf_tokenizer(path), tokenizer, texts)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    batch = _batch(prompts, pad)
    logits = check_logits(_logits(model, batch), _logits(loaded, batch), batch["attention_mask"], quantization)
    checks.append(logits)
    checks.append(check_greedy(model, loaded, prompts, stop_ids, logits.measured or 0.0,
                               lambda ids: tokenizer.decode(ids, skip_special_tokens=True)))
    del loaded
    return checks


def export_gguf(folder: Path, model, tokenizer, template, *, quantization: str, name: str,
                progress=lambda _text: None) -> tuple[str, list[Check]]:
    """Write `<folder>/<name>-<quantization>.gguf` from the exported model and check it against the model;
    returns (file name, checks). The model is moved to the CPU in float32: the comparison runs there."""
    from engine.export.gguf import gguf_file_name, write_gguf

    model.to("cpu", torch.float32)
    model.eval()
    file_name = gguf_file_name(name, quantization)
    write_gguf(model, tokenizer, folder / file_name, quantization=quantization, name=name,
               chat_template=template.jinja,
               on_tensor=lambda done, total, _tensor: progress(f"writing {file_name}: tensor {done} of {total}")
               if done == total or done % max(1, total // 10) == 0 else None)
    progress(f"loading {file_name} back with transformers and comparing")
    texts = list(PROBE_TEXTS)
    prompts = [template.encode_prompt(tokenizer, [{"role": "user", "content": text}]) for text in texts]
    checks = verify_gguf(folder / file_name, model, tokenizer, prompts, texts, quantization=quantization,
                         stop_ids=template.stop_token_ids(tokenizer))
    return file_name, checks
