"""The data pipeline: dataset registry, file formats, validation, chat templates, tokenization and batching.

Importing this package is cheap (no torch, no transformers): the TUI and the validator use it before any model loads.
"""

from engine.data.check import CheckReport, Problem, check_file, convert_file, fill_placeholders, find_placeholders
from engine.data.collator import PreferenceCollator, SFTCollator
from engine.data.encode import (
    IGNORE_INDEX,
    EncodedSamples,
    count_trained_tokens,
    describe_sample,
    encode_preference,
    encode_supervised,
)
from engine.data.loader import convert_record, load_examples, load_texts, read_records
from engine.data.preview import DataPreview, preview_data
from engine.data.registry import (
    DatasetSpec,
    dataset_file_path,
    find_dataset_dir,
    get_dataset_spec,
    load_dataset_info,
    register_dataset,
)
from engine.data.templates import TEMPLATES, Template, get_template

__all__ = [
    "IGNORE_INDEX", "TEMPLATES", "CheckReport", "DataPreview", "DatasetSpec", "EncodedSamples", "PreferenceCollator", "Problem",
    "SFTCollator", "Template", "check_file", "convert_file", "convert_record", "count_trained_tokens",
    "dataset_file_path", "describe_sample", "encode_preference", "encode_supervised", "fill_placeholders",
    "find_dataset_dir", "find_placeholders", "get_dataset_spec", "get_template", "load_dataset_info",
    "load_examples", "load_texts", "preview_data", "read_records", "register_dataset",
]
