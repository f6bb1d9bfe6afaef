"""The training config: one flat dataclass whose keys match LLaMA-Factory's YAML.

Each field declares its help text, default, choices and numeric range once (``opt``, in ``metadata``); the loader,
the validator, the CLI and the TUI's config table all read them from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config.fields import internal, opt
from engine.config.choices import OPTIMIZERS, REFUSED_OPTIMIZERS, REFUSED_SCHEDULES, SCHEDULES
from engine.data.mixing import MIX_STRATEGIES

BIG = 10**9  # a generous cap on step and row counts: far beyond any real run, far below what breaks arithmetic


@dataclass
class TrainConfig:
    """Everything a training run needs. YAML is only its serialization; unknown keys are errors."""

    # --- model
    model_name_or_path: str | None = opt(
        None, "Base model: a local folder or a hub id. Empty means the built-in demo model (lf-tiny-qwen3).",
        section="model")
    adapter_name_or_path: str | None = opt(
        None, "Existing LoRA adapter folder(s), comma-separated: all but the last are merged into the base, the last "
        "trains on (create_new_adapter: all merged, a new one trains).", section="model", multi="names")
    trust_remote_code: bool = opt(
        False, "Run Python code shipped inside the model folder. Only with your explicit consent.", section="model")
    template: str | None = opt(
        None, "Chat template name (qwen3, llama3, ...). Empty: resolved from the model.", section="model")
    quantization_bit: int | None = opt(
        None, "Load the base in 4 or 8 bits (QLoRA, bitsandbytes, CUDA only).", choices=(4, 8), section="model")
    quantization_method: str = opt(
        "bnb", "Quantization backend.", choices=("bnb",), section="model",
        choices_note="lf-assistant quantizes on the fly with bitsandbytes (quantization_bit: 4 or 8); LLaMA-Factory's "
        "pre-quantized methods (gptq, awq, aqlm, quanto, eetq, hqq, mxfp4, fp8) are not supported.")
    quantization_type: str = opt(
        "nf4", "QLoRA: the 4-bit data type (nf4 or fp4), as bitsandbytes names it.", choices=("nf4", "fp4"),
        section="model")
    double_quantization: bool = opt(
        True, "QLoRA: also quantize the quantization constants (bitsandbytes' double quantization).",
        section="model")
    rope_scaling: str | None = opt(
        None, "Stretch RoPE for a cutoff_len beyond the model's context: linear, dynamic, yarn or llama3, factor "
        "ceil(cutoff_len / context), as LLaMA-Factory applies it. Nothing changes when cutoff_len fits.",
        choices=("linear", "dynamic", "yarn", "llama3"), section="model")
    resize_vocab: bool = opt(
        False, "Grow the embeddings to the tokenizer's size when it is larger (new rows: the mean plus noise); "
        "LoRA then also trains the embeddings unless additional_target names other modules.", section="model")
    flash_attn: str = opt(
        "auto", "Attention kernel: auto (lf-assistant picks), sdpa, disabled (eager), fa2 / fa3 (FlashAttention, "
        "CUDA with the flash-attn package; elsewhere the run falls back to auto and says so, as LLaMA-Factory "
        "does).", choices=("auto", "sdpa", "disabled", "eager", "fa2", "fa3", "flash_attention_2",
                           "flash_attention_3"), section="model")
    model_revision: str = opt(
        "main", "Hub revision (branch, tag or commit) of a hub-id model_name_or_path; ignored for local folders.",
        section="model")
    cache_dir: str | None = opt(
        None, "Where hub downloads (models and datasets) are kept. Empty: the Hugging Face / ModelScope caches.",
        section="model")
    kernel_config: Any = opt(
        None, "Fused kernels: auto | none | comma list (rms_norm,swiglu,rope,cross_entropy,fused_linear_ce,"
        "gated_delta_rule).", section="model")

    # --- method
    stage: str = opt(
        "sft", "Training stage: sft (supervised), pt (pre-training on raw text), rm (reward model), dpo, kto.",
        choices=("sft", "pt", "rm", "dpo", "kto"), section="method",
        refused={"ppo": "is LLaMA-Factory's PPO (RLHF with a reward model), which lf-assistant does not support; "
                 "use stage: dpo or kto."})
    do_train: bool = opt(True, "Train (kept for compatibility; must be true).", section="method")
    finetuning_type: str = opt(
        "lora", "What is trained: lora (adapters), full (every weight), freeze (the last N layers). "
        "QLoRA is lora + quantization_bit.", choices=("lora", "full", "freeze", "qlora"), section="method",
        refused={"oft": "is LLaMA-Factory's OFT method, which lf-assistant does not support; use finetuning_type: "
                 "lora."})
    lora_rank: int = opt(8, "LoRA rank r (adapter width).", section="method", ge=1, le=65536)
    lora_alpha: int | None = opt(None, "LoRA scaling alpha. Empty: 2 x lora_rank.", section="method", gt=0, le=10**6)
    lora_dropout: float = opt(0.0, "Dropout on the LoRA input.", section="method", ge=0, lt=1)
    lora_target: str = opt(
        "all", "Modules that get adapters: all (every linear layer but the head) or comma-separated names.",
        section="method", multi="names", alone=("all",))
    freeze_trainable_layers: int = opt(
        2, "Freeze: number of last decoder layers to train (negative: the first N).", section="method",
        ge=-100_000, le=100_000)
    freeze_trainable_modules: str = opt(
        "all", "Freeze: which modules inside the trained layers (all, or comma-separated names).", section="method",
        multi="names", alone=("all",))
    freeze_extra_modules: str | None = opt(
        None, "Freeze: modules outside the decoder layers that train too (embed_tokens, norm, lm_head, ...); as in "
        "LLaMA-Factory, every parameter whose name contains one of them.", section="method", multi="names")
    use_rslora: bool = opt(False, "LoRA: rank-stabilized scaling, alpha / sqrt(rank) instead of alpha / rank.",
                           section="method")
    use_dora: bool = opt(False, "LoRA: DoRA, a trained magnitude vector per adapted layer (weight-decomposed "
                         "LoRA; slower).", section="method")
    pissa_init: bool = opt(
        False, "LoRA: PiSSA, adapters initialised from each weight's principal singular vectors. The result is "
        "converted to a plain LoRA of the original base (rank doubled) so chat and export load it exactly.",
        section="method")
    pissa_iter: int = opt(16, "PiSSA: fast-SVD iterations (-1: exact SVD).", section="method", ge=-1, le=10_000)
    pissa_convert: bool = opt(False, "PiSSA: also keep the converted adapter in pissa_converted/ (LLaMA-Factory's "
                              "folder).", section="method")
    additional_target: str | None = opt(
        None, "LoRA: modules trained in full beside the adapters and saved with them (e.g. embed_tokens,lm_head).",
        section="method", multi="names")
    create_new_adapter: bool = opt(
        False, "LoRA with adapter_name_or_path: merge the given adapter(s) into the base and start a new adapter "
        "(otherwise every one but the last is merged and the last trains on).", section="method")
    pref_beta: float = opt(0.1, "DPO/KTO: the beta (inverse temperature) of the preference loss; ORPO: the weight of "
                           "its odds-ratio term.", section="method", gt=0, le=1000)
    pref_loss: str = opt(
        "sigmoid", "DPO loss variant.", choices=("sigmoid", "hinge", "ipo", "orpo", "simpo"), section="method",
        refused={"kto_pair": "is not supported: TRL, which LLaMA-Factory hands it to, removed kto_pair from its DPO "
                 "trainer. Use stage: kto for unpaired good/bad answers, or pref_loss: sigmoid."})
    pref_ftx: float = opt(0.0, "DPO: weight of an extra SFT loss on the chosen answer.", section="method",
                          ge=0, le=1000)
    simpo_gamma: float = opt(0.5, "SimPO: target reward margin.", section="method", ge=0, le=1000)
    dpo_label_smoothing: float = opt(0.0, "DPO: robust-DPO label smoothing (0 to 0.5).", section="method",
                                     ge=0, le=0.5)
    kto_chosen_weight: float = opt(1.0, "KTO: weight of the loss on desirable answers (kto_tag true).",
                                   section="method", gt=0, le=1000)
    kto_rejected_weight: float = opt(1.0, "KTO: weight of the loss on undesirable answers (kto_tag false).",
                                     section="method", gt=0, le=1000)

    # --- dataset
    dataset: str | None = opt(
        None, "Comma-separated dataset names registered in dataset_info.json.", section="dataset", multi="names")
    dataset_dir: str = opt(
        "data", "Folder holding dataset_info.json (relative: to the config's folder, then the working dir).",
        section="dataset")
    eval_dataset: str | None = opt(None, "Datasets used only for evaluation (comma-separated names).",
                                   section="dataset", multi="names")
    cutoff_len: int = opt(2048, "Maximum tokens per sample; longer samples are cut.", section="dataset",
                          ge=2, le=1 << 20)
    max_samples: int | None = opt(None, "Use at most this many rows from each dataset.", section="dataset",
                                  ge=1, le=BIG)
    mix_strategy: str = opt(
        "concat", "How several datasets are mixed: concat (in order), interleave_under (alternate until the first "
        "runs out), interleave_over (until the last runs out; shorter ones repeat), interleave_once (every row "
        "once); as datasets.interleave_datasets does with the seed.", choices=MIX_STRATEGIES, section="dataset")
    interleave_probs: str | None = opt(
        None, "Interleaving: the probability of drawing from each dataset (comma-separated, one per dataset, sum "
        "1). Empty: the datasets alternate.", section="dataset", multi="numbers")
    preprocessing_batch_size: int = opt(
        1000, "Rows LLaMA-Factory's preprocessing handles together: SFT packing packs them, pre-training packing "
        "cuts their text into blocks (dropping the leftover) and KTO pairs each answer with the previous one "
        "within them (engine.data.chunks).", section="dataset", ge=1, le=BIG)
    preprocessing_num_workers: int | None = opt(
        None, "LLaMA-Factory's preprocessing processes: the rows are first cut into this many contiguous shards, "
        "whose boundaries the batches above follow (the work itself runs in one process here).", section="dataset",
        ge=1, le=4096)
    tokenized_path: str | None = opt(
        None, "A folder for the tokenized data: written on the first run, which then stops (as LLaMA-Factory's "
        "preprocessing); read instead of the datasets by the runs after it.", section="dataset")
    train_on_prompt: bool = opt(False, "Also train on the prompt tokens.", section="dataset")
    mask_history: bool = opt(False, "Train only the last assistant turn of multi-turn samples.", section="dataset")
    default_system: str | None = opt(
        None, "System prompt for rows without one, replacing the template's default (empty text: none). Empty: the "
        "template's.", section="dataset")
    enable_thinking: bool | None = opt(
        True, "Reasoning templates (qwen3, deepseekr1, ...): true trains an empty thought with answers that have "
        "none; false drops every thought and puts the empty one in the prompt; null keeps thoughts, empty one in "
        "the prompt.", section="dataset")
    preserve_thinking: bool = opt(
        False, "Reasoning templates: keep earlier turns' thoughts in DPO prompts and with mask_history (dropped by "
        "default, as the model sees them at inference).", section="dataset")
    tool_format: str | None = opt(
        None, "Tool-calling format instead of the template's: default, qwen, qwen3_5, llama3, mistral, glm4, "
        "glm4_moe, gemma4, lfm2, ling, minimax1, minimax2, seed_oss.", section="dataset")
    allow_special_tokens_in_text: bool = opt(
        False, "Let control-token strings written inside message text (e.g. <|im_end|>) become control tokens, as "
        "LLaMA-Factory does. Off: they are encoded as the plain text they spell, so data cannot forge turns.",
        section="dataset")
    val_size: float = opt(0.0, "Share (0-1) or count (>=1) of rows held out for an eval loss.", section="dataset",
                          ge=0, le=BIG)
    packing: bool | None = opt(
        None, "LLaMA-Factory's packing: SFT samples packed into rows of up to cutoff_len tokens, attention across "
        "a row's samples, per_device_train_batch_size rows per micro-batch (so fewer steps per epoch); pre-training "
        "text cut into cutoff_len rows. Empty: on for stage pt, off otherwise, as in LLaMA-Factory.",
        section="dataset")
    neat_packing: bool = opt(False, "LLaMA-Factory's packing without attention across samples (SFT).",
                             section="dataset")
    batching_strategy: str = opt(
        "padded", "lf-assistant's batching: padded; bucketed (similar lengths together); packed (each micro-batch "
        "as one padding-free row, the same steps as padded, attention within each sample); dynamic (micro-batches "
        "filled to a token budget). Not to combine with LLaMA-Factory's packing.",
        choices=("padded", "bucketed", "packed", "dynamic"), section="dataset")

    # --- output
    output_dir: str | None = opt(
        None, "Where the adapter/model and checkpoints go. Empty: saves/<model>/<method>/<run_id>.", section="output")
    overwrite_output_dir: bool = opt(False, "Allow writing into a non-empty output_dir.", section="output")
    logging_steps: int = opt(10, "Log loss every N optimizer steps.", section="output", ge=1, le=BIG)
    save_steps: int = opt(500, "Save a checkpoint every N optimizer steps.", section="output", ge=1, le=BIG)
    save_total_limit: int | None = opt(None, "Keep at most N checkpoints (oldest removed).", section="output",
                                       ge=1, le=BIG)
    save_only_model: bool = opt(False, "Checkpoints without optimizer state (cannot be resumed).", section="output")
    save_strategy: str = opt("steps", "steps: checkpoint every save_steps; epoch: at the end of every epoch; no: "
                             "only the final model.", choices=("steps", "epoch", "no"), section="output",
                             choices_note="Checkpoints of the best eval are not supported: use save_steps.")
    plot_loss: bool = opt(True, "Write training_loss.png at the end.", section="output")
    report_to: str = opt(
        "none", "Experiment trackers, comma-separated: none, tensorboard, wandb (offline unless "
        "WANDB_MODE=online), swanlab, mlflow, all (every installed one).",
        choices=("none", "tensorboard", "wandb", "swanlab", "mlflow", "all"), section="output", multi="names",
        alone=("none", "all"), choices_note="Other trackers are not supported.")

    # --- train
    per_device_train_batch_size: int = opt(1, "Samples per micro-batch on each device.", ge=1, le=65536)
    per_device_eval_batch_size: int = opt(1, "Samples per eval micro-batch.", ge=1, le=65536)
    gradient_accumulation_steps: int = opt(1, "Micro-batches per optimizer step.", ge=1, le=65536)
    learning_rate: float = opt(5e-5, "Peak learning rate.", gt=0, le=10)
    num_train_epochs: float = opt(3.0, "Passes over the data (ignored when max_steps > 0).", ge=0, le=10**6)
    max_steps: int = opt(-1, "Stop after this many optimizer steps (-1: use num_train_epochs).", ge=-1, le=BIG)
    lr_scheduler_type: str = opt(
        "cosine", "Learning-rate schedule (Transformers' names; warmup from 0, then the schedule).",
        choices=SCHEDULES, refused=REFUSED_SCHEDULES)
    lr_scheduler_kwargs: Any = opt(
        None, "The schedule's own arguments, as in Transformers: num_cycles, min_lr / min_lr_rate, lr_end, power, "
        "timescale, num_stable_steps, num_decay_steps, warmup_type, decay_type, min_lr_ratio.")
    warmup_ratio: float = opt(0.0, "Share of steps spent warming up.", ge=0, lt=1)
    warmup_steps: int = opt(0, "Warmup steps (overrides warmup_ratio when > 0).", ge=0, le=BIG)
    optim: str = opt(
        "adamw_torch_fused", "Optimizer, as Transformers names it: adamw_torch, adamw_torch_fused (same update, "
        "one fused kernel), adafactor, sgd, adagrad, rmsprop; on a CUDA GPU also bitsandbytes' adamw_8bit, "
        "paged_adamw_8bit, lion_8bit, ...", choices=OPTIMIZERS, refused=REFUSED_OPTIMIZERS)
    optim_args: str | None = opt(
        None, "Extra optimizer arguments as key=value pairs (sgd: momentum, nesterov; rmsprop: alpha, centered; "
        "...), as Transformers reads them.")
    loraplus_lr_ratio: float | None = opt(
        None, "LoRA+: LoRA's B matrices (and 1-D parameters) train at learning_rate x this ratio (LLaMA-Factory's "
        "LoRA+; 16 is usual). Empty: off.", section="method", gt=0, le=1e6)
    loraplus_lr_embedding: float = opt(
        1e-6, "LoRA+: learning rate of embedding adapters' B matrices.", section="method", gt=0, le=10)
    weight_decay: float = opt(0.0, "AdamW weight decay.", ge=0, le=10)
    adam_beta1: float = opt(0.9, "AdamW beta1.", ge=0, lt=1)
    adam_beta2: float = opt(0.999, "AdamW beta2.", ge=0, lt=1)
    adam_epsilon: float = opt(1e-8, "AdamW epsilon.", gt=0, le=1)
    max_grad_norm: float = opt(1.0, "Clip the global gradient norm (0: no clipping).", ge=0, le=1e6)
    bf16: bool = opt(False, "bfloat16 autocast on GPU (on a CPU without bf16 units training stays fp32).")
    fp16: bool = opt(False, "float16 autocast with loss scaling on GPU.")
    gradient_checkpointing: bool = opt(
        False, "Recompute activations in backward to save memory (slower). LLaMA-Factory's "
        "disable_gradient_checkpointing is read as its opposite.")
    seed: int = opt(42, "Random seed (data order, init of adapters, dropout).", ge=0, lt=2**32)
    resume_from_checkpoint: str | None = opt(
        None, "auto: continue from the newest complete checkpoint in output_dir; or a checkpoint folder.")
    eval_steps: int | None = opt(None, "Compute the eval loss every N steps (default: logging_steps x 10).",
                                 ge=1, le=BIG)
    eval_strategy: str = opt("steps", "When to evaluate when eval data exists: steps (every eval_steps), epoch, no.",
                             choices=("steps", "epoch", "no"))
    deepspeed: str | None = opt(None, "DeepSpeed JSON config (multi-GPU, needs the deepspeed extra).")
    cp_size: int = opt(1, "Ulysses sequence-parallel size (context parallel; also read as ulysses_size).",
                       ge=1, le=1024)
    nproc_per_node: int | None = opt(
        None, "Processes per node (several devices, or N CPU processes for testing). Empty: from the GPU choice.",
        ge=1, le=1024)
    fsdp: str | None = opt(
        None, "Shard with FSDP2: full_shard | shard_grad_op (LLaMA-Factory / HF spellings accepted, as a string "
        "or a list such as [full_shard, auto_wrap]).", multi="names")

    # Set by the loader, not YAML keys.
    config_dir: str | None = internal()
    """The folder of the file the config came from (relative paths are resolved against it)."""
    unused_keys: tuple[str, ...] = internal(())
    """LLaMA-Factory keys the config carried that change nothing here (named once in the log)."""
    given_keys: tuple[str, ...] = internal(())
    """The keys the YAML and overrides set (so omitted keys can be compared with LLaMA-Factory's defaults)."""

    @property
    def lora_alpha_value(self) -> int:
        return self.lora_alpha if self.lora_alpha is not None else 2 * self.lora_rank

    @property
    def packing_enabled(self) -> bool:
        """packing as LLaMA-Factory resolves it: the value given, else on for pre-training; neat_packing implies it."""
        if self.neat_packing:
            return True
        return self.packing if self.packing is not None else self.stage == "pt"

    @property
    def method(self) -> str:
        """lora | qlora | full | freeze — qlora when LoRA runs on a quantized base."""
        if self.finetuning_type == "lora" and self.quantization_bit:
            return "qlora"
        return self.finetuning_type

    def base_dir(self) -> Path:
        return Path(self.config_dir) if self.config_dir else Path.cwd()


def _negate(value: Any) -> Any:
    return (not value) if isinstance(value, bool) else value


# Other names for our keys, as other tools spell them: alias -> (key, how the value converts).
KEY_ALIASES: dict[str, tuple[str, Any]] = {
    "ulysses_size": ("cp_size", None),
    "sequence_parallel_size": ("cp_size", None),
    "context_parallel_size": ("cp_size", None),
    "evaluation_strategy": ("eval_strategy", None),  # the Transformers 4.x spelling
    "disable_gradient_checkpointing": ("gradient_checkpointing", _negate),  # LLaMA-Factory's switch, inverted
}
