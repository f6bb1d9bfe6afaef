"""Supervised fine-tuning: answers are trained, prompts are context.

    python -m engine.recipes.sft lf_runs/<run_id>/sft.yaml [--run-dir DIR]

Each conversation is encoded with the chat template; prompt tokens are masked (label -100) unless
``train_on_prompt``, and the loss is the mean over the step's trained tokens. Everything around the loss (steps,
checkpoints, strategies, logging) is the shell's: engine.training.shell.
"""

from __future__ import annotations

import sys

from engine.errors import ConfigError
from engine.training.loss import causal_lm_loss_sum, trained_tokens
from engine.training.session import Session
from engine.training.task import LossOut, Task


NOTHING_TRAINED = "No sample has a trained token after encoding: check cutoff_len and the data's answers."


def sft_cutoff(config) -> int:
    """The length rows are encoded to: cutoff_len, less one with packing (LLaMA-Factory's packing encodes to
    cutoff_len - 1 and fills rows up to that; engine.training.batching)."""
    return config.cutoff_len - 1 if config.packing_enabled else config.cutoff_len


def encode_sft_rows(rows: list[dict], tokenizer, template, config):
    """The rows as SFT samples, as training encodes them (engine.data.encode_supervised with the config's length,
    train_on_prompt and mask_history)."""
    from engine.data import encode_supervised

    return encode_supervised(rows, tokenizer, template, sft_cutoff(config), train_on_prompt=config.train_on_prompt,
                             mask_history=config.mask_history)


def trains_nothing(rows: list[dict], tokenizer, template, config, chunk: int = 256) -> bool:
    """Whether no row keeps a trained token once encoded (every answer cut off by cutoff_len, or empty), encoding a
    chunk of rows at a time: the first chunk that trains something ends it, so a usual dataset costs one chunk."""
    from engine.data.encode import trains_anything

    return not any(trains_anything(encode_sft_rows(rows[start:start + chunk], tokenizer, template, config))
                   for start in range(0, len(rows), chunk))


def setup(session: Session) -> Task:
    from engine.data import SFTCollator
    from engine.data.chunks import preprocessing_chunks
    from engine.data.encode import encode_in_chunks, untrained_note

    config = session.config

    # 1. Data: conversations encoded with the template, a share held out for the eval loss (and recorded in the
    #    run folder, so validation can ask the model those prompts and show the answers it never trained on).
    cutoff_len = sft_cutoff(config)

    def encode(examples: list[dict]) -> list[dict]:
        def encode_rows(rows: list[dict]):
            return encode_sft_rows(rows, session.tokenizer, session.template, config)

        if not config.packing_enabled:
            samples = encode_rows(examples)
        else:  # LLaMA-Factory packs each preprocessing batch of rows on its own
            samples = encode_in_chunks(encode_rows, examples, preprocessing_chunks(
                len(examples), config.preprocessing_batch_size, config.preprocessing_num_workers))
        note = untrained_note(samples, cutoff_len)
        if note:
            session.logger.note(note)
        if samples.truncated:
            limit = f"{cutoff_len} tokens" + (f" (cutoff_len {config.cutoff_len} less one, as packing has it)"
                                              if cutoff_len != config.cutoff_len else "")
            session.logger.note(f"{samples.truncated} of {len(samples)} row(s) are longer than {limit} and were cut, "
                                "their answers with them: raise cutoff_len, or shorten those rows "
                                "(`lf-assistant data preview` shows the longest).")
        return samples

    held_out = None if config.eval_dataset else session.record_held_out
    train_samples, eval_samples = session.train_and_eval(
        session.load_examples, encode, held_out=held_out,
        empty=NOTHING_TRAINED)

    # 2. The model with the method applied.
    model = session.load_policy()
    fused = session.fused_linear_ce
    if fused and session.strategy.world_size > 1:
        raise ConfigError(f"The fused linear cross-entropy kernel calls the model's layers directly, past the "
                          f"{session.strategy.name} wrapper, so gradients would not be synchronised across processes. "
                          "Drop fused_linear_ce from kernel_config for multi-process runs.")

    # 3. The loss: summed token cross-entropy on the answers; units are trained tokens.
    def loss(train_model, batch: dict, _context) -> LossOut:
        loss_sum, _ = causal_lm_loss_sum(train_model, batch, fused_linear_ce=fused)
        return LossOut(loss_sum)

    return Task(model=model, train_samples=train_samples, eval_samples=eval_samples,
                collate=SFTCollator(pad_token_id=session.tokenizer.pad_token_id), loss=loss, units=trained_tokens)


if __name__ == "__main__":
    from engine.recipes.entry import main

    sys.exit(main("sft"))
