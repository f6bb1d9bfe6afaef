"""Tiny offline demo models: real architectures, random weights, tokenizers trained on bundled text.

Everything here works without a network: the tokenizer is trained on the text in `engine/models/assets/`, the
weights are initialised from a fixed seed, and the result is saved with `save_pretrained` so that plain
`AutoModelForCausalLM.from_pretrained` / `AutoTokenizer.from_pretrained` load it. Building twice gives
byte-identical files, so tests and tutorials can rely on exact token ids.

A build is written into a temporary folder beside the target and renamed into place; the build marker
(`BUILD_MARKER`) is written last, so a folder without a matching marker is never mistaken for a finished model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from engine.errors import ModelError
from engine.filemodes import follow_umask
from engine.jsonio import read_record, write_text_atomic

ASSETS_DIR = Path(__file__).resolve().parent / "assets"
BUILD_MARKER = "lf_demo_build.json"
_MARKER_FIELDS = {"name": str, "spec_hash": str, "recipe_version": int, "files": dict}
# How many times each bundled file is fed to the BPE trainer. The Python docs are 5x larger than the everyday text;
# weighting the everyday text up makes ordinary chat cost ~1.8 instead of ~2.0 tokens per word (measured on
# alpaca_en_demo outputs), so "quick" and "tea" become single tokens.
CORPUS_WEIGHTS: dict[str, int] = {"chat_english.txt": 3, "common_words.txt": 6, "python_docs.txt": 1}
# Bump when the build recipe changes in a way the spec fields do not capture; it invalidates cached builds.
RECIPE_VERSION = 1

QWEN_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Meta's Llama 3 Instruct template without its `| trim`, so the rendered text matches LLaMA-Factory's `llama3`
# template byte for byte (LF does not trim message content).
LLAMA3_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class DemoSpec:
    """Everything that determines a demo model's files; its hash names a build."""

    name: str
    """Folder and display name, e.g. `lf-tiny-qwen3`."""
    architecture: Literal["Qwen3ForCausalLM", "LlamaForCausalLM"]
    """transformers model class written to config.json."""
    template: str
    """The engine's chat template name for this model (`qwen`, `llama3`)."""
    special_tokens: tuple[str, ...]
    """Special tokens, given ids 0..n-1 in this order."""
    eos_token: str
    """End-of-turn token: generation stops here."""
    pad_token: str
    """Padding token (never the end-of-turn token, so padded labels cannot hide a real end of turn)."""
    bos_token: str | None
    """Token prepended to every sequence, or None when the family has none (Qwen)."""
    chat_template: str
    """Jinja chat template saved with the tokenizer."""
    vocab_size: int = 4096
    """Tokenizer vocabulary size, special tokens included."""
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 2048
    """Longest sequence (tokens) the rotary embedding is configured for."""
    rope_theta: float = 1_000_000.0
    tie_word_embeddings: bool = True
    """Share the input embedding with the output head, as small Qwen / Llama 3.2 models do."""
    seed: int = 1234
    """torch seed for the random initialisation."""


DEMO_MODELS: dict[str, DemoSpec] = {
    "lf-tiny-qwen3": DemoSpec(
        name="lf-tiny-qwen3",
        architecture="Qwen3ForCausalLM",
        template="qwen",
        special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        chat_template=QWEN_CHAT_TEMPLATE,
    ),
    "lf-tiny-llama": DemoSpec(
        name="lf-tiny-llama",
        architecture="LlamaForCausalLM",
        template="llama3",
        special_tokens=(
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
        ),
        eos_token="<|eot_id|>",
        pad_token="<|end_of_text|>",
        bos_token="<|begin_of_text|>",
        chat_template=LLAMA3_CHAT_TEMPLATE,
        rope_theta=500_000.0,
    ),
}


def get_spec(name: str) -> DemoSpec:
    """The spec of a demo model; unknown names raise and list the valid ones."""
    if name not in DEMO_MODELS:
        raise ModelError(f"Unknown demo model {name!r}. Choose one of: {', '.join(DEMO_MODELS)}.")
    return DEMO_MODELS[name]


def demo_model_path(name: str = "lf-tiny-qwen3") -> Path:
    """Where `build_demo_model` puts a demo model by default: ./models/<name> (absolute)."""
    get_spec(name)
    return Path.cwd() / "models" / name


def is_demo_model(path_or_name: str | Path) -> bool:
    """True for a demo model name, or a folder holding a finished demo build."""
    if isinstance(path_or_name, str) and path_or_name in DEMO_MODELS:
        return True
    return marker_name(Path(path_or_name)) is not None


def is_built(name: str = "lf-tiny-qwen3", out_dir: str | Path | None = None) -> bool:
    """True when `out_dir` (default ./models/<name>) holds a finished build of the current spec."""
    target = Path(out_dir).expanduser().resolve() if out_dir is not None else demo_model_path(name)
    return _is_complete(target, spec_hash(get_spec(name)))


def corpus_files() -> list[Path]:
    """The bundled text files the tokenizer is trained on, in a fixed order."""
    files = sorted(ASSETS_DIR.glob("*.txt"))
    if not files:
        raise ModelError(f"No tokenizer text found in {ASSETS_DIR}; reinstall lf-assistant (package data missing).")
    return files


def spec_hash(spec: DemoSpec) -> str:
    """sha256 over the spec, the recipe version and the training text: equal hashes mean equal builds."""
    digest = hashlib.sha256()
    digest.update(json.dumps(dataclasses.asdict(spec), sort_keys=True).encode())
    digest.update(f"recipe={RECIPE_VERSION} weights={sorted(CORPUS_WEIGHTS.items())}".encode())
    for path in corpus_files():
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def build_demo_model(name: str = "lf-tiny-qwen3", out_dir: str | Path | None = None, *, force: bool = False) -> Path:
    """Build (or reuse) a demo model and return its folder.

    A folder that already holds a finished build of the same spec is returned at once unless `force`. A folder
    that holds anything else is never overwritten: ModelError asks for another path.
    """
    spec = get_spec(name)
    target = Path(out_dir).expanduser().resolve() if out_dir is not None else demo_model_path(name)
    expected = spec_hash(spec)
    if not force and _is_complete(target, expected):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(target):
        # Another process may have finished the same build while this one waited for the lock.
        if not force and _is_complete(target, expected):
            return target
        _refuse_foreign_folder(target)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=target.parent))
        try:
            _write_build(spec, staging, expected)
            _swap_into_place(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_build(spec: DemoSpec, folder: Path, expected_hash: str) -> None:
    """Tokenizer, model and generation config into `folder`; the marker last."""
    from transformers.utils import logging as hf_logging

    tokenizer = _train_tokenizer(spec)
    tokenizer.save_pretrained(folder)
    model = _init_model(spec, tokenizer)
    # The shard-writing bar would break the CLI's spinner; a 3 MB file is written in milliseconds anyway.
    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(folder)
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    marker = {"name": spec.name, "spec_hash": expected_hash, "recipe_version": RECIPE_VERSION, "files": files}
    _write_json_atomic(folder / BUILD_MARKER, marker)


def _corpus_lines() -> Iterator[str]:
    for path in corpus_files():
        paragraphs = path.read_text(encoding="utf-8").split("\n\n")
        for _ in range(CORPUS_WEIGHTS.get(path.name, 1)):
            yield from paragraphs


def _train_tokenizer(spec: DemoSpec):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=list(spec.special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    backend.train_from_iterator(_corpus_lines(), trainer)
    extra = [t for t in spec.special_tokens if t not in (spec.eos_token, spec.pad_token, spec.bos_token)]
    kwargs = {"bos_token": spec.bos_token, "add_bos_token": True} if spec.bos_token else {}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=spec.eos_token,
        pad_token=spec.pad_token,
        additional_special_tokens=extra,
        model_max_length=spec.max_position_embeddings,
        **kwargs,
    )
    tokenizer.chat_template = spec.chat_template
    return tokenizer


def _init_model(spec: DemoSpec, tokenizer):
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    config_cls, model_cls = {
        "Qwen3ForCausalLM": (Qwen3Config, Qwen3ForCausalLM),
        "LlamaForCausalLM": (LlamaConfig, LlamaForCausalLM),
    }[spec.architecture]
    ids = {"eos": tokenizer.convert_tokens_to_ids(spec.eos_token), "pad": tokenizer.pad_token_id}
    ids["bos"] = tokenizer.convert_tokens_to_ids(spec.bos_token) if spec.bos_token else None
    # The plain end-of-text token also stops generation, as in the released Instruct models.
    end_of_text = spec.pad_token
    config = config_cls(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        tie_word_embeddings=spec.tie_word_embeddings,
        bos_token_id=ids["bos"],
        eos_token_id=ids["eos"],
        pad_token_id=ids["pad"],
    )
    torch.manual_seed(spec.seed)
    model = model_cls(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=ids["bos"],
        eos_token_id=[ids["eos"], tokenizer.convert_tokens_to_ids(end_of_text)],
        pad_token_id=ids["pad"],
    )
    return model


def _marker_problem(folder: Path) -> str | None:
    """What is wrong with the folder's build marker (not JSON, not an object, a field of another type); None when
    it is intact or absent."""
    try:
        read_record(folder / BUILD_MARKER, _MARKER_FIELDS, fix="")
    except ValueError as exc:
        return str(exc).strip()
    return None


def _read_marker(folder: Path) -> dict | None:
    """The build marker, or None when there is none or it is damaged (then the folder is no build of ours)."""
    try:
        return read_record(folder / BUILD_MARKER, _MARKER_FIELDS, fix="")
    except ValueError:
        return None


def marker_name(folder: Path) -> str | None:
    """The demo model a folder holds a build of, by its marker; None when none (or the marker is damaged)."""
    name = (_read_marker(folder) or {}).get("name")
    return name if name in DEMO_MODELS else None


def _is_complete(folder: Path, expected_hash: str) -> bool:
    """A finished build of this exact spec: marker matches and every listed file has its recorded size."""
    marker = _read_marker(folder)
    if marker is None or marker.get("spec_hash") != expected_hash:
        return False
    files = marker.get("files") or {}
    return bool(files) and all(
        isinstance(size, int) and "/" not in name and name not in (".", "..")
        and (folder / name).is_file() and (folder / name).stat().st_size == size for name, size in files.items()
    )


def _refuse_foreign_folder(target: Path) -> None:
    """Only an empty folder or an earlier demo build may be replaced; anything else could be the user's work."""
    if not target.exists():
        return
    if not target.is_dir():
        raise ModelError(f"{target} exists and is not a folder. Pass another output path for the demo model.")
    if any(target.iterdir()) and _read_marker(target) is None:
        damage = _marker_problem(target)
        why = f" (its build marker is damaged: {damage})" if damage else ""
        raise ModelError(
            f"{target} already holds files that are not a demo model build{why}; it was left untouched. "
            "Pass another output path (--out) or remove that folder yourself."
        )


def _swap_into_place(staging: Path, target: Path) -> None:
    """Rename the finished build onto `target`; an old build is moved aside first and deleted after."""
    follow_umask(staging)  # mkdtemp made it 0700: a model folder is as readable as any folder the user makes
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{os.getpid()}"
        os.replace(target, old)
    os.replace(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def _build_lock(target: Path) -> Iterator[None]:
    """Serialise builds of one folder across processes (parallel test sessions, two terminals)."""
    try:
        import fcntl
    except ImportError:  # Windows: builds are still atomic, only concurrent builders are not serialised.
        yield
        return
    lock_path = target.parent / f".{target.name}.lock"
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write_json_atomic(path: Path, payload: dict) -> None:
    write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")
