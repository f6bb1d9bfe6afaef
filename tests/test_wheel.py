"""A wheel built with `python -m build` works from any folder: it carries its own skills, demo data, examples and
docs, and trains the demo headless in a fresh virtual environment outside the checkout."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run(command, cwd, env=None, timeout=600):
    done = subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel (built from its sdist, as `python -m build` does) in a fresh venv; the heavy dependencies come
    from this environment's site-packages through a plain path line, so nothing is downloaded and the checkout's
    own editable hook is not loaded."""
    root = tmp_path_factory.mktemp("wheel")
    pytest.importorskip("build", reason="pip install -e '.[dev]' brings `build`")
    run([sys.executable, "-m", "build", "--outdir", root / "dist", REPO], cwd=root)
    wheel = next((root / "dist").glob("lf_assistant-*.whl"))
    venv = root / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=root)
    python = venv / "bin" / "python"
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root).strip())
    (site / "lfa_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed", wheel], cwd=root)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return venv, elsewhere, env


def test_the_wheel_carries_its_own_files(installed):
    venv, elsewhere, env = installed
    code = ("import engine, assistant; from engine.resources import resource_dir; "
            "print(engine.__file__); print(resource_dir('skills')); print(resource_dir('data'))")
    engine_file, skills, data = run([venv / "bin" / "python", "-c", code], cwd=elsewhere, env=env).split()
    assert str(venv) in engine_file and str(REPO) not in engine_file
    assert (Path(skills) / "sft" / "skill.yaml").is_file() and (Path(data) / "dataset_info.json").is_file()
    assert "lf_assistant_resources" in skills


def test_the_wheel_trains_the_demo_headless_from_another_folder(installed):
    venv, elsewhere, env = installed
    lf = venv / "bin" / "lf-assistant"
    assert "train" in run([lf, "--help"], cwd=elsewhere, env=env)
    run([lf, "demo-model"], cwd=elsewhere, env=env)
    assert (elsewhere / "models" / "lf-tiny-qwen3" / "config.json").is_file()
    out = run([lf, "train", "examples/demo/tiny_lora_sft.yaml", "max_steps=3", "logging_steps=1", "save_steps=100",
               "output_dir=out", "--runs-dir", "runs"], cwd=elsewhere, env=env)
    assert "shipped with lf-assistant" in out and "completed" in out
    assert (elsewhere / "out" / "adapter_model.safetensors").is_file()
