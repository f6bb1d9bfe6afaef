"""Full fine-tuning: every weight trains; the output is a complete model folder."""

from __future__ import annotations

from pathlib import Path


def prepare(model, config):
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    return model


def save(model, out_dir: Path) -> None:
    model.save_pretrained(str(out_dir), safe_serialization=True)


def load_for_resume(model, checkpoint: Path) -> None:
    from safetensors.torch import load_file

    files = sorted(checkpoint.glob("model*.safetensors"))
    state = {}
    for file in files:
        state.update(load_file(str(file)))
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Tied weights (lm_head = embed_tokens) are saved once; anything else missing is a broken checkpoint.
    missing = [k for k in missing if "lm_head" not in k]
    if missing or unexpected:
        raise RuntimeError(f"checkpoint {checkpoint} does not match the model: missing {missing[:5]}, "
                           f"unexpected {unexpected[:5]}")
