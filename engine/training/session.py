"""What a recipe works with while it declares its task: the config, the tokenizer and template, the device, and
the model loaders every stage shares (the policy with its method applied, a frozen reference copy)."""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from engine.config import TrainConfig
from engine.config.method_check import per_sample_packing
from engine.errors import ConfigError, DataError, EngineError
from engine.methods import Method, count_parameters, get_method
from engine.rundir import RunDir
from engine.training.checkpoint import content_digest
from engine.training.host_memory import keep_freed_blocks
from engine.training.loop import RunLogger, split_validation
from engine.training.setup import Precision, choose_precision, resolve_model_path, resolve_template, seed_everything


@dataclass
class Session:
    config: TrainConfig
    run: RunDir
    strategy: Any
    logger: RunLogger
    precision: Precision
    model_path: str
    tokenizer: Any
    template: Any
    method: Method
    kernel_plan: Any = None
    rows_digest: str | None = None
    """The train rows and the settings that encode them (``train_and_eval``); None when samples were read back."""

    @classmethod
    def open(cls, config: TrainConfig, run: RunDir, strategy, logger: RunLogger) -> Session:
        """Seed, device and precision, tokenizer and chat template: the same for every stage."""
        from engine.models.loading import load_tokenizer

        seed_everything(config.seed)
        model_path = resolve_model_path(config)
        precision = choose_precision(config)
        if precision.note:
            logger.note(precision.note)
        if precision.device.type == "cpu":
            kept = keep_freed_blocks()
            if kept:
                logger.info(kept)
        tokenizer = load_tokenizer(model_path, trust_remote_code=config.trust_remote_code,
                                   revision=config.model_revision, cache_dir=config.cache_dir)
        template = resolve_template(config, model_path, tokenizer)
        logger.info(f"stage {config.stage} | model {model_path} | template {template.name} | method {config.method} "
                    f"| device {precision.device} | precision {precision.autocast_dtype or torch.float32}")
        return cls(config, run, strategy, logger, precision, model_path, tokenizer, template,
                   get_method(config.method))

    @property
    def device(self) -> torch.device:
        return self.precision.device

    def dataset_dir(self) -> Path:
        from engine.config.paths import dataset_dir_of

        return dataset_dir_of(self.config)

    def data_options(self) -> dict:
        """How the named datasets are read and mixed (engine.data.loader.data_options)."""
        from engine.data.loader import data_options

        return data_options(self.config)

    def train_and_eval(self, load: Callable[[str], list], encode: Callable[[list], list], *, empty: str,
                       unit: str = "samples", describe: Callable[[list], str | None] | None = None,
                       held_out: Callable[[list], None] | None = None) -> tuple[list, list]:
        """Every recipe's data step, in LLaMA-Factory's order: ``load(config.dataset)`` reads the rows, val_size holds
        some out (``holdout_indices``: the very rows LLaMA-Factory holds out), then ``encode`` turns the train rows
        and the held-out rows (or ``load(eval_dataset)``) into samples; logged, and read from / saved to
        tokenized_path (see ``tokenized``). DataError(``empty``) when no train sample trains anything; ``describe``
        may check the train samples and return words for the log line; ``held_out`` gets the held-out rows."""
        config = self.config

        def build() -> tuple[list, list]:
            from engine.data.encode import trains_anything

            rows = load(config.dataset)
            train_rows, eval_rows = split_validation(rows, config.val_size, config.seed)
            self.rows_digest = content_digest(train_rows, self.encoding_settings())
            train = encode(train_rows)
            if not trains_anything(train):  # rows that train nothing are kept, but not a run of only those
                raise DataError(empty)
            detail = describe(train) if describe else None
            if held_out is not None and eval_rows:
                held_out(eval_rows)
            evaluation = encode(eval_rows) if eval_rows else []
            if config.eval_dataset:
                evaluation = encode(load(config.eval_dataset))
            held = f" ({len(eval_rows)} held out)" if eval_rows else ""
            self.logger.info(f"data: {len(rows)} rows{held} -> {len(train)} train / {len(evaluation)} eval {unit}"
                             f"{f' ({detail})' if detail else ''}")
            return train, evaluation

        return self.tokenized(build)

    NOT_ENCODING = ("dataset_dir", "tokenized_path", "eval_dataset", "batching_strategy")
    """Settings of the dataset section that do not shape the train samples: where data lies (a moved folder is the
    same data), the eval data, and how samples are batched (the batches digest covers that)."""

    def encoding_settings(self) -> dict:
        """What turns the train rows into samples besides the rows: the dataset section's settings (paths aside),
        the template and the tokenizer's size. A resume compares them with the rows (engine.training.checkpoint)."""
        config = self.config
        settings = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
                    if f.metadata.get("section") == "dataset" and f.name not in self.NOT_ENCODING}
        return dict(settings, stage=config.stage, template=self.template.name, vocabulary=len(self.tokenizer))

    def tokenized(self, build) -> tuple[list[dict], list[dict]]:
        """The (train, eval) samples ``build()`` encodes, or those saved in tokenized_path. A tokenized_path without
        saved data is filled with them, and the run ends there (TokenizedDataSaved), as LLaMA-Factory's
        preprocessing run does; the next run with the same config trains on them."""
        path, logger = self.config.tokenized_path, self.logger
        if not path:
            return build()
        from engine.data.tokenized import TokenizedDataSaved, has_tokenized, load_tokenized, save_tokenized

        if has_tokenized(path):
            train, evaluation = load_tokenized(path, self.config.stage, len(self.tokenizer))
            logger.info(f"data: {len(train)} train / {len(evaluation)} eval samples read from tokenized_path {path}; "
                        "the dataset keys are not read (as in LLaMA-Factory)")
            return train, evaluation
        train, evaluation = build()
        if self.strategy.is_main:
            c = self.config
            save_tokenized(path, train, evaluation, {"stage": c.stage, "template": self.template.name,
                                                     "cutoff_len": c.cutoff_len, "dataset": c.dataset,
                                                     "eval_dataset": c.eval_dataset, "model": self.model_path})
        raise TokenizedDataSaved(f"Tokenized data saved at {path} ({len(train)} train / {len(evaluation)} eval "
                                 "samples); this run stops here, as LLaMA-Factory's preprocessing does. Launch the "
                                 f"training with tokenized_path: {path} (this config trains on it now).")

    def fetch_hub_datasets(self, names: str) -> None:
        """Download the named hub datasets the cache lacks (the main process; the others wait), as LLaMA-Factory
        downloads them when it loads them."""
        from engine.data.loader import split_names
        from engine.data.registry import get_dataset_spec

        specs = [get_dataset_spec(name, self.dataset_dir()) for name in split_names(names)]
        remote = [spec for spec in specs if not spec.is_local and not spec.script_url]
        if not remote:
            return
        failure = None
        if self.strategy.is_main:
            from engine.models.dataset_download import ensure_downloaded

            try:
                for spec in remote:
                    ensure_downloaded(spec, self.config.cache_dir, log=self.logger.info)
            except EngineError as exc:
                failure = exc
        if self.strategy.any_rank(failure is not None):
            raise failure or DataError("A hub dataset download failed on the main process; see its log.")

    def load_examples(self, names: str, **kwargs) -> list[dict]:
        from engine.data import load_examples

        self.fetch_hub_datasets(names)
        return load_examples(names, self.dataset_dir(), **self.data_options(), **kwargs)

    def load_texts(self, names: str) -> list[str]:
        from engine.data import load_texts

        self.fetch_hub_datasets(names)
        return load_texts(names, self.dataset_dir(), **self.data_options())

    def preference_pairs(self, examples: list[dict]) -> list[dict]:
        """Encoded pairs, one per row as in LLaMA-Factory; pairs that train nothing and identical pairs are
        reported."""
        from engine.data import encode_preference
        from engine.data.encode import untrained_note
        from engine.training.preference import LF_DIVIDES_BY_ZERO, divides_by_answer_length

        config, logger = self.config, self.logger
        encoded = encode_preference(examples, self.tokenizer, self.template, config.cutoff_len)
        note = untrained_note(encoded, config.cutoff_len, "pair")
        if note:
            if config.stage == "dpo" and divides_by_answer_length(config.pref_loss, config.pref_ftx):
                loss = "pref_ftx SFT term" if config.pref_loss not in ("ipo", "orpo", "simpo") else config.pref_loss
                note += LF_DIVIDES_BY_ZERO.format(what=loss)
            logger.note(note)
        if encoded.truncated:
            logger.info(f"{encoded.truncated} pair(s) cut to cutoff_len {config.cutoff_len}")
        # Identical answers give a zero gradient and a reward margin stuck at 0: say so rather than train on them.
        untrained = set(encoded.untrained)
        same = [pair for pair, example in zip(encoded, examples) if example.get("source", "?") not in untrained
                and pair["chosen_input_ids"] == pair["rejected_input_ids"]]
        if same:
            logger.note(f"{len(same)} pair(s) have the same chosen and rejected answer (after cutoff_len) and "
                        "teach nothing; fix those rows or raise cutoff_len.")
        return list(encoded)

    def load_pairs(self, names: str) -> list[dict]:
        return self.load_examples(names, ranking=True)

    def record_held_out(self, examples: list[dict]) -> None:
        """Write the conversations val_size held out into the run folder as heldout.jsonl: {messages, system, source}
        per row, the reference answer last (validation asks the tuned model these)."""
        from engine.jsonio import write_text_atomic

        if not self.logger.enabled:
            return
        rows = [{"messages": e["messages"], "system": e.get("system"), "source": e.get("source")} for e in examples]
        write_text_atomic(self.run.held_out_path, "".join(json.dumps(row, ensure_ascii=False) + "\n"
                                                                   for row in rows))

    def load_base(self, *, require_logits: bool = False, head: str = "causal_lm") -> torch.nn.Module:
        """The base model on the device, with the configured kernels patched in (no method applied yet).
        ``head="score"`` loads it with a fresh one-output score head instead of the LM head (a reward model)."""
        from engine.data.packing import keeps_samples_apart
        from engine.models.loading import load_model
        from engine.models.options import LoadOptions, resize_embeddings

        config, notes = self.config, []
        model = load_model(self.model_path, dtype=self.precision.load_dtype,
                           device=str(self.device), trust_remote_code=config.trust_remote_code,
                           quantization_bit=config.quantization_bit, head=head,
                           options=LoadOptions.from_config(config), notes=notes)
        if config.resize_vocab:
            notes.append(resize_embeddings(model, self.tokenizer))
        packed = per_sample_packing(config)
        if packed and not keeps_samples_apart(model):
            raise ConfigError(
                f"{packed} needs the model to keep attention within each sample of a packed row, which "
                f"transformers' own model classes do; this model runs its own code ({type(model).__module__}), "
                "which may attend across samples. Use batching_strategy: padded (and no neat_packing).")
        for note in notes:
            self.logger.info(note)
        if config.kernel_config not in (None, "none"):
            from engine.kernels.patch import apply_kernels

            plan = apply_kernels(model, config.kernel_config, device=self.device.type, require_logits=require_logits)
            self.kernel_plan = plan
            self.logger.info(f"kernels: {', '.join(plan.applied) or 'none'}" + "".join(f"; {n}" for n in plan.notes))
        return model

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """Apply the fine-tuning method, gradient checkpointing and training mode; log what trains."""
        if self.config.finetuning_type == "freeze":
            from engine.methods.freeze import config_layer_count, layer_note

            layers = config_layer_count(model.config)  # none: the method's prepare refuses the model by name
            note = layer_note(layers, self.config.freeze_trainable_layers) if layers else None
            if note:
                self.logger.note(note)
        model = self.method.prepare(model, self.config).to(self.device)
        if self.precision.autocast_dtype is not None and not self._zero3():
            upcast = keep_trainable_in_float32(model)
            if upcast:
                self.logger.info(f"{upcast} trainable tensors kept in float32; the frozen ones compute in "
                                 f"{self.precision.autocast_dtype} (LLaMA-Factory's upcast, unless pure_bf16)")
        if self.config.gradient_checkpointing:
            model.gradient_checkpointing_enable()
            if hasattr(model, "enable_input_require_grads"):
                model.enable_input_require_grads()
        model.train()
        trainable, total = count_parameters(model)
        if trainable == 0:
            raise ConfigError("Nothing would train: the method left no parameter trainable. Check lora_target, "
                              "freeze_trainable_layers / freeze_trainable_modules.")
        self.logger.info(f"trainable parameters: {trainable:,} of {total:,} ({100 * trainable / total:.2f}%)")
        return model

    def _zero3(self) -> bool:
        """DeepSpeed ZeRO-3 on an unquantized base keeps fp32 master weights itself (LF leaves it so too)."""
        return (getattr(self.strategy, "name", None) == "deepspeed" and getattr(self.strategy, "zero_stage", 0) == 3
                and self.config.quantization_bit is None)

    def load_policy(self, *, require_logits: bool = False) -> torch.nn.Module:
        return self.prepare(self.load_base(require_logits=require_logits))

    @property
    def fused_linear_ce(self):
        """The kernel plan when it fuses the LM head with the loss (SFT and pre-training use it), else False."""
        plan = self.kernel_plan
        return plan if plan is not None and plan.fused_linear_ce else False


def keep_trainable_in_float32(model: torch.nn.Module) -> int:
    """Cast every trainable parameter held in half precision to float32 (the base loads in the checkpoint's
    bf16/fp16 under mixed precision): AdamW updates in bf16 round most small steps away. LLaMA-Factory does the
    same for full, freeze and adapter tuning unless pure_bf16. Returns how many tensors were cast."""
    cast = 0
    for parameter in model.parameters():
        if parameter.requires_grad and parameter.dtype in (torch.bfloat16, torch.float16):
            parameter.data = parameter.data.float()
            cast += 1
    return cast


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy that never trains: eval mode, no gradients (a reference model for full and freeze tuning)."""
    reference = copy.deepcopy(model)
    reference.eval()
    reference.requires_grad_(False)
    return reference


def disable_dropout(model: torch.nn.Module) -> None:
    """Dropout off, as the peers do for preference training: policy and reference must score alike at step 0."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
