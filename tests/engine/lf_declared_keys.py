"""The keys LLaMA-Factory's argument parser declares, read from its source with ``ast`` (nothing is imported).

``python -m tests.engine.lf_declared_keys /work/lf-ref`` rewrites ``tests/engine/data/lf_keys.txt``, the frozen
list the key-table test uses when no LLaMA-Factory checkout is present.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

FROZEN = Path(__file__).parent / "data" / "lf_keys.txt"
HPARAMS = "src/llamafactory/hparams"


def dataclass_keys(source: Path, classes: set[str] | None = None) -> set[str]:
    """The init fields of the dataclasses in one source file (all classes, or those named)."""
    keys = set()
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.ClassDef) or (classes is not None and node.name not in classes):
            continue
        for statement in node.body:
            if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
                continue
            name = statement.target.id
            call = statement.value if isinstance(statement.value, ast.Call) else None
            no_init = call is not None and any(
                kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False
                for kw in call.keywords)
            if not name.startswith("_") and not no_init and not name.isupper():
                keys.add(name)
    return keys


def hparams_keys(lf_root: Path) -> set[str]:
    """Every init field of every dataclass in LLaMA-Factory's hparams package."""
    return set().union(*(dataclass_keys(source) for source in sorted((lf_root / HPARAMS).glob("*.py"))))


def training_arguments_keys() -> set[str]:
    """The fields of the installed Transformers' Seq2SeqTrainingArguments (LLaMA-Factory's TrainingArguments base),
    read from its source: importing transformers' trainer takes ~20 s on a small CPU."""
    folder = Path(importlib.util.find_spec("transformers").origin).parent
    return (dataclass_keys(folder / "training_args.py", {"TrainingArguments"})
            | dataclass_keys(folder / "training_args_seq2seq.py", {"Seq2SeqTrainingArguments"}))


def frozen_keys() -> set[str]:
    lines = FROZEN.read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


if __name__ == "__main__":
    root = Path(sys.argv[1])
    keys = sorted(hparams_keys(root) | training_arguments_keys())
    header = (f"# Keys LLaMA-Factory's parser accepts: its hparams dataclasses ({HPARAMS}) and Transformers'\n"
              "# Seq2SeqTrainingArguments. Regenerate: python -m tests.engine.lf_declared_keys PATH_TO_LLAMAFACTORY\n")
    FROZEN.write_text(header + "\n".join(keys) + "\n", encoding="utf-8")
    print(f"{len(keys)} keys written to {FROZEN}")
