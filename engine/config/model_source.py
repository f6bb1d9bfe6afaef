"""The model fields the inference and export configs share, declared once."""

from __future__ import annotations

from dataclasses import dataclass

from engine.config.fields import internal, opt

INFER_DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16", "float16")
TRAINED_METHODS: tuple[str, ...] = ("lora", "qlora", "full", "freeze")


@dataclass
class ModelSource:
    """Which trained model to load: a base plus LoRA adapters, or a whole fine-tuned model folder."""

    model_name_or_path: str | None = opt(
        None, "The base model (LoRA/QLoRA) or the fine-tuned model folder (full/freeze).", section="model")
    adapter_name_or_path: str | None = opt(
        None, "LoRA adapter folder(s), comma-separated, applied in order. Never set for a full fine-tune.",
        section="model", multi="names")
    template: str | None = opt(
        None, "Chat template; must be the one used in training. Empty: the one recorded by training.",
        section="model")
    finetuning_type: str | None = opt(
        None, "How the model was trained (lora, qlora, full, freeze); read from the run when empty.",
        choices=TRAINED_METHODS, section="model",
        refused={"oft": "is LLaMA-Factory's OFT method, which lf-assistant does not support."})
    trust_remote_code: bool = opt(
        False, "Run Python code shipped inside the model folder. Only with your explicit consent.", section="model")
    infer_dtype: str = opt(
        "auto", "Weights dtype: auto is the checkpoint's dtype on a GPU and float32 on a CPU (export: keeps the "
        "base checkpoint's dtype).", choices=INFER_DTYPES, section="model")
    quantization_bit: int | None = opt(
        None, "Load the base in 4 or 8 bits (bitsandbytes, CUDA only). Export: must stay empty, adapters are merged "
        "into the full-precision base.", choices=(4, 8), section="model")
    # The template settings training used; the chat and the exported chat template must render alike.
    default_system: str | None = opt(None, "System prompt used when a conversation has none (use training's).",
                                     section="model")
    enable_thinking: bool | None = opt(
        True, "Reasoning templates: true adds an empty thought to answers, false puts it in the prompt, null keeps "
        "thoughts as they are (use training's).", section="model")
    preserve_thinking: bool = opt(
        False, "Reasoning templates: keep earlier answers' thoughts in the prompt (use training's).", section="model")
    tool_format: str | None = opt(None, "Tool-calling format instead of the template's (use training's).",
                                  section="model")
    allow_special_tokens_in_text: bool = opt(
        False, "Let control-token strings inside messages become control tokens (off: they stay plain text, so a "
        "message cannot forge a turn).", section="model")

    unused_keys: tuple[str, ...] = internal(())
    """LLaMA-Factory keys the config carried that change nothing here (named once)."""

    def adapters(self) -> list[str]:
        """The adapter folders, in the order they are applied."""
        if not self.adapter_name_or_path:
            return []
        return [part.strip() for part in str(self.adapter_name_or_path).split(",") if part.strip()]
