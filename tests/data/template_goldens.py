"""Helpers for the LLaMA-Factory golden renderings in tests/assets/templates/ (see its README)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "templates"
INDEX = json.loads((ASSETS / "lf_templates.json").read_text(encoding="utf-8"))
GOLDEN_NAMES = sorted(path.stem for path in (ASSETS / "lf_text").glob("*.json"))


@lru_cache(maxsize=None)
def golden(name: str) -> dict:
    return json.loads((ASSETS / "lf_text" / f"{name}.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def token_goldens() -> dict:
    return json.loads((ASSETS / "lf_tokens.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def token_goldens_truncated() -> dict:
    return json.loads((ASSETS / "lf_tokens_truncated.json").read_text(encoding="utf-8"))


class PieceTokenizer:
    """A stand-in tokenizer whose "ids" are the slot pieces themselves: {"bos"|"eos"|"token": text} for special
    slots, the text for a text slot. Golden pieces were recorded from LF's encoders with the same stand-in, so equal
    pieces mean equal ids for any real tokenizer (each piece is tokenized on its own)."""

    unk_token_id = None
    chat_template = None

    def __init__(self, bos: str | None = "<s>", eos: str | None = "</s>") -> None:
        self.bos_token, self.eos_token, self.pad_token = bos, eos, None

    @property
    def bos_token_id(self):
        return {"bos": self.bos_token} if self.bos_token else None

    @property
    def eos_token_id(self):
        return {"eos": self.eos_token} if self.eos_token else None

    def encode(self, text: str, add_special_tokens: bool = False) -> list:
        return [text]

    def __call__(self, texts: list[str], add_special_tokens: bool = False) -> dict:
        return {"input_ids": [[text] for text in texts]}

    def convert_tokens_to_ids(self, token: str):
        return {"token": token}


def piece_text(pieces: list) -> str:
    """Pieces as text: special slots as their token strings."""
    return "".join(piece if isinstance(piece, str) else next(iter(piece.values())) for piece in pieces)


def case_settings(case: dict) -> dict:
    """get_template keyword arguments for a golden case."""
    return {key: value for key, value in case["settings"].items() if not key.startswith("__")}


def case_tokenizer(case: dict, golden_data: dict) -> PieceTokenizer:
    """The stand-in tokenizer before LF fixed it (no BOS for the "__no_bos" cases); the template replaces EOS."""
    bos = None if case["settings"].get("__no_bos") else golden_data["bos_token"]
    return PieceTokenizer(bos, golden_data["eos_token"])


def same_ids(pieces) -> list:
    """Pieces with an EOS slot written as the token it is (LF's replaced EOS and our id of it are one id)."""
    if isinstance(pieces, list):
        return [same_ids(piece) for piece in pieces]
    if isinstance(pieces, tuple):
        return [same_ids(piece) for piece in pieces]
    return {"token": pieces["eos"]} if isinstance(pieces, dict) and "eos" in pieces else pieces
