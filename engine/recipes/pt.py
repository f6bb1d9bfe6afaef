"""Continued pre-training on raw text: every token is trained.

    python -m engine.recipes.pt lf_runs/<run_id>/pt.yaml [--run-dir DIR]

Each text (a dataset's ``text`` / ``prompt`` column; .txt files give one text per line) ends with the EOS token.
As in LLaMA-Factory, packing is on unless ``packing: false``: the texts are concatenated and cut into rows of
exactly ``cutoff_len`` tokens (the short remainder is dropped), so attention spans document boundaries the way
pre-training does. With ``packing: false`` each text is one row, cut at ``cutoff_len``.
"""

from __future__ import annotations

import sys

from engine.data.chunks import preprocessing_chunks
from engine.data.pretrain import chunked_text_rows, pretrain_block, pretrain_eos
from engine.errors import DataError
from engine.training.loss import causal_lm_loss_sum, trained_tokens
from engine.training.session import Session
from engine.training.task import LossOut, Task


def setup(session: Session) -> Task:
    from engine.data import SFTCollator

    config = session.config

    # 1. Data: raw text, tokenized and cut into rows; labels are the inputs themselves.
    calls: list[int] = []  # the first call encodes the train texts: those must give a row
    block = pretrain_block(config)

    def encode(texts: list[str]) -> list[dict]:
        chunks = preprocessing_chunks(len(texts), config.preprocessing_batch_size, config.preprocessing_num_workers)
        rows = chunked_text_rows(texts, session.tokenizer, block, packing=config.packing_enabled,
                                 eos=eos_text(session), control_tokens_in_text=config.allow_special_tokens_in_text,
                                 chunks=chunks)
        if not rows and not calls:
            total = sum(len(session.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts[:1000])
            raise DataError(f"The text gives no full row of {block} tokens (cutoff_len {config.cutoff_len}; about {total} "
                            f"tokens in all, packed per {config.preprocessing_batch_size} texts as LLaMA-Factory "
                            "does, each batch's leftover dropped): lower cutoff_len, add text, raise "
                            "preprocessing_batch_size, or set packing: false.")
        calls.append(len(rows))
        return [{"input_ids": ids, "labels": list(ids)} for ids in rows]

    train_samples, eval_samples = session.train_and_eval(session.load_texts, encode,
                                                         unit=f"rows of up to {block} tokens",
                                                         empty="The text gives no row to train on.")

    # 2. The model; 3. the loss: summed next-token cross-entropy, units are trained tokens.
    model = session.load_policy()
    fused = session.fused_linear_ce if session.strategy.world_size == 1 else False

    def loss(train_model, batch: dict, _context) -> LossOut:
        return LossOut(causal_lm_loss_sum(train_model, batch, fused_linear_ce=fused)[0])

    return Task(model=model, train_samples=train_samples, eval_samples=eval_samples,
                collate=SFTCollator(pad_token_id=session.tokenizer.pad_token_id), loss=loss, units=trained_tokens)


def eos_text(session: Session) -> str:
    return pretrain_eos(session.template, session.tokenizer)


if __name__ == "__main__":
    from engine.recipes.entry import main

    sys.exit(main("pt"))
