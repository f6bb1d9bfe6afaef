"""Read GGUF files: check one before any work starts, and load it with transformers as a plain, savable model.

transformers reads llama, mistral, qwen2, qwen3 and gemma GGUFs by dequantizing every tensor into an ordinary
float model, but marks the result as quantized, so `save_pretrained` refuses it; `load_gguf_model` lifts that mark
once the weights are plain floats. Its Qwen3 reader also ignores `attention.key_length`, so a Qwen3 whose head
width is not the config class default (128) would load with the wrong shapes; the width is taken from the file.
"""

from __future__ import annotations

import math
import mmap
import os
import shutil
import struct
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import ModelError

GGUF_MAGIC = b"GGUF"
IMPORT_RECORD = "lfa_import.json"
"""What `models import` writes into the folder it made: the source file, its registry entry, the checks."""
# GGUF architectures whose files transformers turns into a model we can save and train.
IMPORTABLE_ARCHITECTURES: tuple[str, ...] = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3")
# Tokenizer metadata a GGUF needs so that transformers can rebuild the tokenizer.
TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.tokens")


@dataclass
class GgufInfo:
    """What a GGUF file says about itself (metadata only; no tensor is read)."""

    path: Path
    architecture: str
    name: str
    tensor_count: int
    size_bytes: int
    parameters: int
    """Values stored in the file's tensors (a tied output projection is stored once)."""
    tensor_types: dict[str, int] = field(default_factory=dict)
    """ggml type name (Q4_1, F32, ...) -> how many tensors are stored that way."""
    metadata: dict[str, object] = field(default_factory=dict)
    """Metadata values; an array of strings (vocabulary, merges) stands as its length."""
    tensor_names: tuple[str, ...] = ()

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) and value.strip() else None

    def describe(self) -> str:
        types = ", ".join(f"{count} {name}" for name, count in sorted(self.tensor_types.items()))
        return (f"{self.path.name}: {self.architecture}, {self.parameters / 1e6:.1f}M parameters in "
                f"{self.tensor_count} tensors ({types})")


# GGUF metadata value types (gguf.GGUFValueType): fixed-size ones by struct format; 8 is a string, 9 an array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class _Cursor:
    """Reads the header of a memory-mapped GGUF; running past the end raises struct.error."""

    def __init__(self, data) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self, keep: bool = True) -> str | None:
        length = self.take("<Q")
        if self.pos + length > len(self.data):
            raise struct.error("string runs past the end of the file")
        raw = self.data[self.pos:self.pos + length] if keep else None
        self.pos += length
        return raw.decode("utf-8") if raw is not None else None

    def value(self, kind: int):
        """A metadata value; arrays of strings (vocabularies) are skipped and stand as their length."""
        if kind in _SCALARS:
            return self.take(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY:
            raise ValueError(f"unknown metadata value type {kind}")
        item_kind, count = self.take("<I"), self.take("<Q")
        if item_kind == _STRING:
            for _ in range(count):
                self.string(keep=False)
            return count
        return [self.value(item_kind) for _ in range(count)]


def _read_header(data, path: Path) -> tuple[dict, list[tuple[str, tuple[int, ...], int, int]], int]:
    """(metadata, [(name, shape, ggml type, offset)], where tensor data starts)."""
    cursor = _Cursor(data)
    cursor.pos = 4
    version = cursor.take("<I")
    if version not in (2, 3):
        raise ModelError(f"{path} is GGUF version {version}; versions 2 and 3 are read. Convert it again with a "
                         "current llama.cpp.")
    tensor_count, kv_count = cursor.take("<Q"), cursor.take("<Q")
    metadata = {}
    for _ in range(kv_count):
        key = cursor.string()
        metadata[key] = cursor.value(cursor.take("<I"))
    tensors = []
    for _ in range(tensor_count):
        name = cursor.string()
        dims = [cursor.take("<Q") for _ in range(cursor.take("<I"))]
        tensors.append((name, tuple(reversed(dims)), cursor.take("<I"), cursor.take("<Q")))
    alignment = int(metadata.get("general.alignment", 32))
    return metadata, tensors, (cursor.pos + alignment - 1) // alignment * alignment


def _tensor_bytes(shape: tuple[int, ...], ggml_type: int) -> int:
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ggml_type)]
    return math.prod(shape) // block * size


def read_gguf_info(path: str | Path) -> GgufInfo:
    """Check that `path` is a complete GGUF file and return its header; ModelError says what is wrong."""
    import gguf

    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelError(f"{path} is not a file. Give the path of a .gguf model file.")
    with path.open("rb") as handle:
        if handle.read(4) != GGUF_MAGIC:
            raise ModelError(f"{path} is not a GGUF file (it does not start with the GGUF signature). Give a .gguf "
                             "file as written by llama.cpp's converter or downloaded from a GGUF model page.")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            try:
                metadata, tensors, data_start = _read_header(data, path)
                ends = [data_start + offset + _tensor_bytes(shape, kind) for _, shape, kind, offset in tensors]
                types = Counter(gguf.GGMLQuantizationType(kind).name for _, _, kind, _ in tensors)
            except (struct.error, ValueError, UnicodeDecodeError, KeyError) as exc:
                raise ModelError(f"{path} is truncated or corrupt ({exc.__class__.__name__}: {str(exc)[:120]}). "
                                 "Download or copy it again and compare its size with the source.") from None
            size = len(data)
    if max(ends, default=0) > size:
        raise ModelError(f"{path} is truncated: its tensors need {max(ends):,} bytes but the file has {size:,}. "
                         "Download or copy it again.")
    architecture = str(metadata.get("general.architecture", ""))
    parameters = sum(math.prod(shape) for _, shape, _, _ in tensors)
    return GgufInfo(path, architecture, str(metadata.get("general.name", path.stem)), len(tensors), size,
                    parameters, dict(types), metadata, tuple(name for name, _, _, _ in tensors))


def check_importable(info: GgufInfo) -> None:
    """ModelError unless transformers can turn this GGUF into a model folder."""
    if info.architecture not in IMPORTABLE_ARCHITECTURES:
        raise ModelError(f"{info.path.name} is a {info.architecture or 'unnamed'} model; GGUF import handles "
                         f"{', '.join(IMPORTABLE_ARCHITECTURES)}. Use the original safetensors release instead.")
    missing = [key for key in TOKENIZER_KEYS if key not in info.metadata]
    if missing:
        raise ModelError(f"{info.path.name} carries no tokenizer ({', '.join(missing)} missing), so no tokenizer "
                         "can be rebuilt from it. Use a GGUF with an embedded tokenizer.")


@contextmanager
def _tensor_progress(on_tensor: Callable[[int, int], None] | None) -> Iterator[None]:
    """Report each tensor transformers dequantizes: it walks them in a tqdm loop, which is swapped for one that
    calls `on_tensor(done, total)`. Without that loop (another transformers version) only the steps are reported."""
    from transformers import modeling_gguf_pytorch_utils as legacy

    original = getattr(legacy, "tqdm", None)
    if on_tensor is None or original is None:
        yield
        return

    def counting(items, *args, **kwargs):
        items = list(items)
        for index, item in enumerate(items):
            yield item
            on_tensor(index + 1, len(items))

    legacy.tqdm = counting
    try:
        yield
    finally:
        legacy.tqdm = original


@contextmanager
def _one_parse() -> Iterator[None]:
    """transformers parses the whole file (vocabulary included, in Python) once for the config and once more for
    the weights; a read-only reader can serve both, which halves the loading time of a small model."""
    import gguf

    original = gguf.GGUFReader
    readers: dict[str, object] = {}

    def shared(path, mode="r"):
        key = f"{os.path.realpath(path)}:{mode}"
        if mode != "r":
            return original(path, mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = shared
    try:
        yield
    finally:
        gguf.GGUFReader = original


@contextmanager
def _alone(path: Path) -> Iterator[Path]:
    """The file seen from a folder holding nothing else. transformers reads tokenizer and config files found
    beside a GGUF in preference to the GGUF's own metadata, so a check next to an exported folder would compare
    that folder with itself."""
    folder = Path(tempfile.mkdtemp(prefix="gguf-load-"))
    link = folder / path.name
    try:
        try:
            os.symlink(path, link)
        except OSError:  # no symlinks (Windows without the privilege): a hard link, on the same disk
            os.link(path, link)
        yield link
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def gguf_config(path: Path):
    """The transformers config transformers builds from the file, with the head width the file states."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    info = read_gguf_info(path)
    key_length = info.metadata.get(f"{info.architecture}.attention.key_length")
    if key_length and hasattr(config, "head_dim") and config.head_dim != key_length:
        config.head_dim = int(key_length)
    return config


def load_gguf_model(path: str | Path, *, on_tensor: Callable[[int, int], None] | None = None):
    """The GGUF's model in float32, dequantized, as an ordinary model that `save_pretrained` writes."""
    import torch
    from transformers import AutoModelForCausalLM

    path = Path(path).expanduser().resolve()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local file: never ask the hub for anything
    with _alone(path) as alone, _one_parse(), _tensor_progress(on_tensor):
        config = gguf_config(alone)
        model = AutoModelForCausalLM.from_pretrained(str(alone.parent), gguf_file=alone.name, config=config,
                                                     dtype=torch.float32)
    # The legacy GGUF path leaves plain float tensors; only the quantizer mark stops save_pretrained.
    model.hf_quantizer = None
    model.is_quantized = False
    for holder in (model.config, getattr(model, "generation_config", None)):
        if holder is not None and hasattr(holder, "quantization_config"):
            delattr(holder, "quantization_config")
    model.config.name_or_path = ""
    return model


def load_gguf_tokenizer(path: str | Path):
    """The tokenizer rebuilt from the file's metadata. The backend class is named directly: AutoTokenizer would
    first parse the whole file once more (tens of seconds) only to choose a class that saves the same files."""
    from transformers import TokenizersBackend

    path = Path(path).expanduser().resolve()
    with _alone(path) as alone:
        return TokenizersBackend.from_pretrained(str(alone.parent), gguf_file=alone.name)
