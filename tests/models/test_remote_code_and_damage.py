"""`trust_remote_code: true` names the files it would run (found without running them); damaged safetensors files
are refused with their name."""

from __future__ import annotations

import json
import re
import logging
import os
import shutil
import struct

import pytest
from typer.testing import CliRunner

from assistant.cli.main import app
from engine.errors import ModelError
from engine.models import loading
from engine.models.remote_code import remote_code_files


@pytest.fixture()
def custom_folder(demo_model_dir, tmp_path):
    folder = tmp_path / "acme"
    shutil.copytree(demo_model_dir, folder)
    marker = tmp_path / "ran"
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="acme_lm", auto_map={"AutoConfig": "configuration_acme.AcmeConfig",
                                                  "AutoModelForCausalLM": "modeling_acme.AcmeLM",
                                                  "AutoModel": "../../etc/passwd.X"})
    (folder / "config.json").write_text(json.dumps(config))
    tokenizer = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer["auto_map"] = {"AutoTokenizer": ["other/repo--tokenization_other.OtherTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    (folder / "modeling_acme.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nfrom .configuration_acme import AcmeConfig\nfrom . import helpers\n"
        "import os\nimport acme_utils\n")
    (folder / "configuration_acme.py").write_text("from .helpers import thing\n")
    (folder / "helpers.py").write_text("thing = 1\n")
    (folder / "acme_utils.py").write_text("x = 1\n")
    (folder / "unrelated.py").write_text("y = 2\n")
    return folder, marker


def test_the_code_files_are_found_by_reading_not_running(custom_folder):
    folder, marker = custom_folder
    code = remote_code_files(folder)
    assert sorted(code.files) == ["acme_utils.py", "configuration_acme.py", "helpers.py", "modeling_acme.py"]
    assert code.elsewhere == ["other/repo--tokenization_other.OtherTokenizer"]
    assert code.missing == ["../../etc/passwd"]
    assert not marker.exists()


def test_consent_names_the_files_in_the_log_and_refusal_names_them_too(custom_folder, caplog):
    folder, marker = custom_folder
    with pytest.raises(ModelError, match="configuration_acme.py, modeling_acme.py, helpers.py, acme_utils.py"):
        loading.check_model_folder(folder)
    with caplog.at_level(logging.WARNING, logger="engine"):
        loading.check_model_folder(folder, trust_remote_code=True)
    assert "runs Python code from" in caplog.text and "configuration_acme.py, modeling_acme.py, helpers.py, " \
        "acme_utils.py" in caplog.text and "other/repo--" in caplog.text
    assert not marker.exists()


def test_train_check_asks_for_consent_before_anything_loads(custom_folder, tmp_path):
    folder, marker = custom_folder
    result = CliRunner().invoke(app, ["train", "examples/demo/tiny_lora_sft.yaml", f"model_name_or_path={folder}",
                                      f"output_dir={tmp_path / 'out'}", "--check"], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "needs your consent" in result.output and "configuration_acme.py, modeling_acme.py" in result.output
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_models_check_lists_the_code_files(custom_folder):
    folder, marker = custom_folder
    result = CliRunner().invoke(app, ["models", "check", str(folder)], env={"COLUMNS": "300"})
    assert "Traceback" not in result.output
    assert "custom code" in result.output and "configuration_acme.py, modeling_acme.py" in result.output
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["truncated", "header", "not-an-object"])
def test_a_damaged_safetensors_file_is_named(demo_model_dir, tmp_path, damage):
    folder = tmp_path / "damaged"
    shutil.copytree(demo_model_dir, folder)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    if damage == "truncated":
        weights.write_bytes(data[: len(data) // 2])
    elif damage == "header":
        weights.write_bytes(struct.pack("<Q", 10) + b"{not json!" + data[18:])
    else:
        weights.write_bytes(struct.pack("<Q", 2) + b"[]" + data[10:])
    with pytest.raises(ModelError, match="model.safetensors"):
        loading.load_model(folder)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(data[:100])
    from engine.inference.source import attach_adapter

    with pytest.raises(ModelError, match="adapter_model.safetensors"):
        attach_adapter(None, str(adapter), str(demo_model_dir))


def test_a_failure_inside_a_models_own_code_is_not_called_our_bug(tmp_path, capsys):
    import typer

    from assistant.cli.common import fail_on_engine_error

    module = tmp_path / "transformers_modules" / "acme" / "modeling_acme.py"
    module.parent.mkdir(parents=True)
    module.write_text("def forward():\n    raise ValueError('shape mismatch in AcmeAttention')\n")
    namespace: dict = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)

    @fail_on_engine_error
    def command():
        namespace["forward"]()

    @fail_on_engine_error
    def ours():
        raise ValueError("broken here")

    with pytest.raises(typer.Exit) as raised:
        command()
    said = " ".join(capsys.readouterr().err.split())
    assert raised.value.exit_code == 2 and "modeling_acme.py) raised ValueError: shape mismatch" in said
    assert "trust_remote_code is true" in said and "bug in lf-assistant" not in said
    with pytest.raises(typer.Exit) as raised:
        ours()
    assert raised.value.exit_code == 3 and "bug in lf-assistant" in capsys.readouterr().err


def _set_config(folder, **fields):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **fields}))


def _with_header(folder, header: bytes, length: int | None = None):
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    body = data[8 + struct.unpack("<Q", data[:8])[0]:]
    weights.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header + body)


def _first_tensor_offsets(folder, offsets):
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    header = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])
    name = next(key for key in header if key != "__metadata__")
    header[name]["data_offsets"] = offsets
    _with_header(folder, json.dumps(header).encode())


def _huge_header(folder):
    _with_header(folder, b"{}", length=150_000_000)
    os.truncate(folder / "model.safetensors", 200_000_000)  # sparse: the length field fits the file


DAMAGE = {
    "config-text": (lambda f: (f / "config.json").write_text("not json"), "config.json is not valid JSON"),
    "config-list": (lambda f: (f / "config.json").write_text("[1, 2]"), "must hold a JSON object, not a list"),
    "config-deep": (lambda f: (f / "config.json").write_text("[" * 100000 + "]" * 100000),
                    "nested more than 64 levels deep"),
    "config-layers": (lambda f: _set_config(f, num_hidden_layers="x"),
                      "the field 'num_hidden_layers' must be a whole number, not text"),
    "config-text-config": (lambda f: _set_config(f, text_config={"hidden_size": [1]}),
                           "the field 'text_config.hidden_size' must be a whole number, not a list"),
    "index-list": (lambda f: (f / "model.safetensors.index.json").write_text('{"weight_map": ["model.safetensors"]}'),
                   "the field 'weight_map' must be an object, not a list"),
    "index-escape": (lambda f: (f / "model.safetensors.index.json").write_text(
        '{"weight_map": {"a": "../../../../etc/passwd"}}'), "'../../../../etc/passwd', which is not a file in the"),
    "index-number": (lambda f: (f / "model.safetensors.index.json").write_text('{"weight_map": {"a": 5}}'),
                     "names the weight file '5', which is not a file"),
    "header-huge": (lambda f: _huge_header(f), "its length field says 150.0 MB, more than the 100.0 MB safetensors allows"),
    "header-deep": (lambda f: _with_header(f, b"[" * 50000 + b"]" * 50000), "nested more than 64 levels deep"),
    "header-offsets": (lambda f: _first_tensor_offsets(f, [10, 2]), "has no valid data_offsets"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_config_index_or_header_is_named_by_every_check(demo_model_dir, tmp_path, damage):
    from engine.models.cache import check_model_dir

    folder = tmp_path / "damaged"
    shutil.copytree(demo_model_dir, folder)
    (folder / "lf_demo_build.json").unlink()
    damage_folder, words = DAMAGE[damage]
    damage_folder(folder)
    assert any(words in problem for problem in check_model_dir(folder).problems), check_model_dir(folder).problems
    result = CliRunner().invoke(app, ["models", "check", str(folder)], env={"COLUMNS": "300"})
    assert "Traceback" not in result.output and "unexpected" not in result.output and words in result.output
    assert "\\n" not in result.output  # the problems are listed line by line
    checked = CliRunner().invoke(app, ["train", "examples/demo/tiny_lora_sft.yaml", f"model_name_or_path={folder}",
                                       f"output_dir={tmp_path / 'out'}", "--check"], env={"COLUMNS": "300"})
    assert checked.exit_code == 2 and words in checked.output, checked.output
    with pytest.raises(ModelError, match=re.escape(words)):
        loading.load_model(folder)


def test_the_wizard_model_stage_names_a_damaged_config(demo_model_dir, tmp_path):
    from assistant.wizard.skill import load_skill
    from assistant.wizard.stages import model as model_stage
    from assistant.wizard.state import new_state

    folder = tmp_path / "damaged"
    shutil.copytree(demo_model_dir, folder)
    (folder / "lf_demo_build.json").unlink()
    (folder / "config.json").write_text("[" * 100000 + "]" * 100000)
    outcome = model_stage.resolve(new_state(), load_skill("sft"), str(folder), template="qwen")
    assert outcome.state.model_path is None
    assert any("nested more than 64 levels deep" in note for note in outcome.notes), outcome.notes
