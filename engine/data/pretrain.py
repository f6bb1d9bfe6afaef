"""Pre-training rows from raw text, as the pt recipe trains them and `data preview` shows them. No torch here."""

from __future__ import annotations

from itertools import chain


def pretrain_eos(template, tokenizer) -> str:
    """What ends each text, as LLaMA-Factory's pre-training processor writes it: Llama 3's <|end_of_text|> for the
    llama3 template, else the EOS the template leaves the tokenizer with (fix_special_tokens runs first: with
    replace_eos the first stop word, so qwen on a base model whose EOS is <|endoftext|> ends texts with
    <|im_end|>). A template EOS the tokenizer does not know falls back to the tokenizer's own."""
    vocabulary = tokenizer.get_vocab()
    if template.name == "llama3" and "<|end_of_text|>" in vocabulary:
        return "<|end_of_text|>"
    eos = getattr(template, "eos_token", None)
    return eos if eos and eos in vocabulary else (tokenizer.eos_token or "")


def pretrain_block(config) -> int:
    """The length of a packed pre-training row: cutoff_len, less one when packing is set in the config.
    LLaMA-Factory takes one off cutoff_len in DataArguments.__post_init__ only when packing is true there; the
    pre-training default (packing on) is set after that, so an unset packing keeps cutoff_len whole."""
    return config.cutoff_len - 1 if (config.packing or config.neat_packing) else config.cutoff_len


def chunked_text_rows(texts: list[str], tokenizer, cutoff_len: int, *, packing: bool, eos: str,
                      control_tokens_in_text: bool = False, chunks: list[range] | None = None) -> list[list[int]]:
    """text_rows per preprocessing batch (engine.data.chunks): packing cuts each batch's text into blocks and drops
    its leftover, as LLaMA-Factory's pre-training processor does batch by batch."""
    return [row for chunk in (chunks if chunks is not None else [range(len(texts))])
            for row in text_rows(texts[chunk.start:chunk.stop], tokenizer, cutoff_len, packing=packing, eos=eos,
                                 control_tokens_in_text=control_tokens_in_text)]


def text_rows(texts: list[str], tokenizer, cutoff_len: int, *, packing: bool, eos: str,
              control_tokens_in_text: bool = False) -> list[list[int]]:
    """Token rows: concatenated and cut into full ``cutoff_len`` blocks (packing), or one row per text.

    A control-token string inside a text (``<|endoftext|>``, ``<|im_start|>``) is encoded as the plain text it
    spells unless ``control_tokens_in_text`` (allow_special_tokens_in_text): only the EOS added here ends a text."""
    add_bos = bool(getattr(tokenizer, "add_bos_token", False)) and tokenizer.bos_token_id is not None
    options = {"add_special_tokens": False, "split_special_tokens": not control_tokens_in_text}
    end = tokenizer(eos, add_special_tokens=False)["input_ids"] if eos else []
    encoded = [tokenizer(text, **options)["input_ids"] + end for text in texts]
    if not packing:
        prefix = [tokenizer.bos_token_id] if add_bos else []
        return [(prefix + ids)[:cutoff_len] for ids in encoded if ids]
    stream = list(chain.from_iterable(encoded))
    rows = [stream[i:i + cutoff_len] for i in range(0, len(stream) - cutoff_len + 1, cutoff_len)]
    if add_bos:
        for row in rows:
            row[0] = tokenizer.bos_token_id
    return rows
