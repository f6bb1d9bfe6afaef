"""Shared fixtures: every test runs offline, with caches in a temporary folder, on tiny models built in code."""

import os
import tempfile
from pathlib import Path

import pytest

_SANDBOX = Path(tempfile.mkdtemp(prefix="lfa-tests-"))
# Set before anything imports huggingface_hub / matplotlib / torch, so nothing touches the user's home or the network.
for _key, _sub in {
    "HF_HOME": "hf",
    "HF_HUB_CACHE": "hf/hub",
    "HF_DATASETS_CACHE": "hf/datasets",
    "MODELSCOPE_CACHE": "modelscope",
    "MPLCONFIGDIR": "mpl",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
}.items():
    os.environ[_key] = str(_SANDBOX / _sub)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"
LF_REFERENCE = SHARED / "reference" / "llamafactory"


@pytest.fixture(scope="session")
def demo_model_dir() -> Path:
    """The tiny Qwen3-architecture demo model, built once per test session."""
    from engine.models.demo import build_demo_model

    return build_demo_model("lf-tiny-qwen3", _SANDBOX / "models" / "lf-tiny-qwen3")


@pytest.fixture(scope="session")
def demo_llama_dir() -> Path:
    """The tiny Llama-architecture demo model, built once per test session."""
    from engine.models.demo import build_demo_model

    return build_demo_model("lf-tiny-llama", _SANDBOX / "models" / "lf-tiny-llama")


@pytest.fixture()
def lf_reference() -> Path:
    """LLaMA-Factory's real data and example configs, when ../shared is present; skipped otherwise."""
    if not LF_REFERENCE.is_dir():
        pytest.skip("../shared/reference/llamafactory is not present (fresh clone)")
    return LF_REFERENCE


@pytest.fixture(autouse=True)
def _english_after_each_test():
    """The interface language is process-wide (a zh app sets it for the whole process): every test starts in, and
    leaves behind, English, whichever tests ran before it in the same process."""
    import sys

    i18n = sys.modules.get("assistant.i18n")  # the engine's own tests never import the front ends
    if i18n is not None:
        i18n.set_language("en")
    yield
    i18n = sys.modules.get("assistant.i18n")
    if i18n is not None:
        i18n.set_language("en")


@pytest.fixture(autouse=True)
def _own_download_records(request, monkeypatch):
    """Each test its own record of downloaded models (engine.models.recorded): a model one test downloaded must
    not be found by the next, nor the user's own downloads by any."""
    monkeypatch.setenv("LFA_CACHE_DIR", str(_SANDBOX / "lfa-cache" / request.node.nodeid.replace("/", "_")[:200]))
