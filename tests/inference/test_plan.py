"""Configs, the load plan and its guards, prompt files and the Modelfile template: no model weights load here."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.data.templates import TEMPLATES, get_template
from engine.errors import ConfigError, DataError
from engine.export import default_export_dir, load_export_config, make_export_config
from engine.export.modelfile import extract_parts, go_template
from engine.inference import load_infer_config, make_infer_config
from engine.inference.prompts import read_prompts
from engine.inference.source import plan_model


def fake_adapter(folder: Path, template: str | None = "qwen", method: str = "lora") -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "base", "peft_type": "LORA"}))
    if template is not None:
        (folder / "lfa_training.json").write_text(json.dumps(
            {"base_model": "base", "finetuning_type": method, "template": template, "stage": "sft"}))
    return folder


def fake_full_output(folder: Path, template: str = "qwen") -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "lfa_training.json").write_text(json.dumps(
        {"base_model": "the-base", "finetuning_type": "full", "template": template, "stage": "sft"}))
    return folder


def test_lf_example_configs_load(lf_reference):
    infer = load_infer_config(lf_reference / "examples/inference/qwen3_lora_sft.yaml")
    assert infer.adapters() == ["saves/qwen3-4b/lora/sft"] and infer.template == "qwen3_nothink"
    assert infer.trust_remote_code is True  # the user's explicit consent, written in their YAML
    full = load_infer_config(lf_reference / "examples/inference/qwen3_full_sft.yaml")
    assert full.adapters() == []
    export = load_export_config(lf_reference / "examples/merge_lora/qwen3_lora_sft.yaml", "export_size=0.5")
    assert (export.export_size, export.export_device, export.export_legacy_format) == (0.5, "cpu", False)
    assert load_export_config(lf_reference / "examples/merge_lora/qwen3_full_sft.yaml").adapters() == []


def test_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="Did you mean 'max_new_tokens'"):
        load_infer_config({"model_name_or_path": "m", "max_new_token": 5})
    with pytest.raises(ConfigError, match="remove adapter_name_or_path"):
        load_infer_config({"model_name_or_path": "m", "adapter_name_or_path": "a", "finetuning_type": "full"})
    with pytest.raises(ConfigError, match="full-precision base"):
        load_export_config({"model_name_or_path": "m", "export_dir": "x", "quantization_bit": 4})
    with pytest.raises(ConfigError, match="export_size must be > 0"):
        load_export_config({"model_name_or_path": "m", "export_dir": "x", "export_size": 0})
    with pytest.raises(ConfigError, match="export_dir is empty"):
        load_export_config({"model_name_or_path": "m"})


def test_made_configs_branch_by_method():
    lora = make_infer_config("saves/run", base_model="models/base", method="qlora", template="qwen")
    assert lora["model_name_or_path"] == "models/base" and lora["adapter_name_or_path"] == "saves/run"
    full = make_infer_config("saves/run", base_model="models/base", method="full", template="qwen")
    assert full["model_name_or_path"] == "saves/run" and "adapter_name_or_path" not in full
    assert load_infer_config(full).template == "qwen"  # what we write, we read back
    export = make_export_config("saves/run", base_model="Qwen/Qwen3-4B", method="lora", template="qwen",
                                export_dir="models/x", export_device="auto")
    assert export["adapter_name_or_path"] == "saves/run" and export["export_device"] == "auto"
    assert "adapter_name_or_path" not in make_export_config("saves/run", base_model="b", method="freeze",
                                                            template=None, export_dir="x")
    assert default_export_dir("Qwen/Qwen3-4B", "lora") == str(Path("models/Qwen3-4B-merged"))
    assert default_export_dir("models/lf-tiny-qwen3/", "full") == str(Path("models/lf-tiny-qwen3-sft"))


def test_template_guard(tmp_path):
    adapter = fake_adapter(tmp_path / "adapter")
    with pytest.raises(ConfigError) as refused:
        plan_model("base", [str(adapter)], "qwen3_nothink")
    message = str(refused.value)
    assert "'qwen'" in message and "'qwen3_nothink'" in message and "template=qwen" in message
    plan = plan_model("base", [str(adapter)], None)  # nothing configured: training's template
    assert plan.template_name == "qwen" and "lfa_training.json" in plan.template_origin
    assert plan_model("base", [str(adapter)], "qwen").template_name == "qwen"
    unknown = fake_adapter(tmp_path / "elsewhere", template=None)  # trained by another tool: used, but said so
    plan = plan_model("base", [str(unknown)], "llama3")
    assert plan.template_name == "llama3" and "could not be checked" in plan.notes[0]
    full = fake_full_output(tmp_path / "full", template="llama3")
    with pytest.raises(ConfigError, match="'llama3'.*'qwen'"):
        plan_model(str(full), [], "qwen")


def test_template_guard_covers_every_adapter(tmp_path):
    """Each adapter of a list answers in the one template chat and export use, so each one's is checked, whatever
    its place in the list (the guard once read only the last adapter's record)."""
    qw, qwen3 = fake_adapter(tmp_path / "qw", template="qwen"), fake_adapter(tmp_path / "base", template="qwen3")
    for adapters in ([qw, qwen3], [qwen3, qw]):
        for configured in ("qwen3", "qwen", None):
            with pytest.raises(ConfigError, match="Template mismatch: the adapters were trained with different") as no:
                plan_model("base", [str(a) for a in adapters], configured)
            assert f"{qw}: 'qwen'" in str(no.value) and f"{qwen3}: 'qwen3'" in str(no.value)
    also_qwen = fake_adapter(tmp_path / "also-qwen", template="qwen")
    with pytest.raises(ConfigError, match="was trained with template 'qwen'.*template: 'qwen3'.*template=qwen"):
        plan_model("base", [str(qw), str(also_qwen)], "qwen3")
    assert plan_model("base", [str(qw), str(also_qwen)], None).template_name == "qwen"
    unrecorded = fake_adapter(tmp_path / "elsewhere", template=None)  # the recorded adapter speaks for both
    plan = plan_model("base", [str(qw), str(unrecorded)], None)
    assert plan.template_name == "qwen" and str(qw) in plan.template_origin
    with pytest.raises(ConfigError, match="'qwen'.*'llama3'"):
        plan_model("base", [str(qw), str(unrecorded)], "llama3")


@pytest.mark.parametrize("record, said", [
    ({"template": ["qwen"]}, "the field 'template' must be text, not a list"),
    ({"template": {"a": 1}}, "the field 'template' must be text, not an object"),
    ({"template": 5}, "the field 'template' must be text, not a whole number"),
    ({"template": "qwen", "finetuning_type": ["full"]}, "the field 'finetuning_type' must be text, not a list"),
    ({"template": "qwen", "base_model": float("nan")}, "the field 'base_model' must be text, not a number"),
    ({"template": "qwen", "continued_adapter": {"x": []}}, "the field 'continued_adapter' must be text, not an obj"),
    ({"template": "qwen", "continued_adapter": "SELF"}, "the field 'continued_adapter' names this same folder"),
    (["qwen"], "must hold a JSON object, not a list"),
    ("[" * 100_000 + "]" * 100_000, "is not valid JSON (nested more than 64 levels deep)"),
    ('{"template": "qwen"', "is not valid JSON (Expecting ',' delimiter at line 1, column 20)"),
], ids=["list", "object", "number", "method", "nan", "continued", "continued-self", "top-list", "deep", "cut-short"])
def test_a_damaged_training_record_is_refused_naming_the_file_and_the_field(record, said, tmp_path):
    """lfa_training.json is read from disk: a wrong type there is a clear refusal, never a TypeError or a template
    guard that quietly stands down."""
    adapter = fake_adapter(tmp_path / "adapter")
    record = json.loads(json.dumps(record).replace('"SELF"', json.dumps(str(adapter)))) \
        if not isinstance(record, str) else record
    path = adapter / "lfa_training.json"
    path.write_text(record if isinstance(record, str) else json.dumps(record))
    for run in (lambda: plan_model("base", [str(adapter)], "qwen"), lambda: plan_model("base", [str(adapter)], None)):
        with pytest.raises(ConfigError) as refused:
            run()
        message = str(refused.value)
        assert message.startswith(str(path)) and said in message, message
        assert f"delete {path} to go on without it" in message, message


def test_a_damaged_export_record_is_refused_naming_the_file(tmp_path):
    exported = tmp_path / "exported"
    exported.mkdir()
    (exported / "config.json").write_text("{}")
    (exported / "lfa_export.json").write_text(json.dumps({"template": ["qwen"], "base_model": "b"}))
    with pytest.raises(ConfigError, match=r"lfa_export.json: the field 'template' must be text, not a list\. .*run "
                                          r"the export again"):
        plan_model(str(exported), [], "qwen")


def test_full_output_never_takes_an_adapter(tmp_path):
    full = fake_full_output(tmp_path / "full")
    adapter = fake_adapter(tmp_path / "adapter")
    with pytest.raises(ConfigError, match="full fine-tune.*Remove adapter_name_or_path"):
        plan_model(str(full), [str(adapter)], None)
    with pytest.raises(ConfigError, match="whole model.*Set model_name_or_path to this folder"):
        plan_model("base", [str(full)], None)
    with pytest.raises(ConfigError, match="is a LoRA adapter, not a model"):
        plan_model(str(adapter), [], None)
    plan = plan_model(str(full), [], None)
    assert (plan.method, plan.trained_base, plan.adapters) == ("full", "the-base", [])


def test_prompt_files(tmp_path):
    (tmp_path / "p.txt").write_text("Who are you?\n\n  What is tea?  \n", encoding="utf-8")
    assert [c[-1]["content"] for c in read_prompts(tmp_path / "p.txt")] == ["Who are you?", "What is tea?"]
    rows = [{"prompt": "a"}, {"instruction": "b", "input": "c"},
            {"messages": [{"role": "user", "content": "d"}, {"role": "assistant", "content": "ref"}]}, "e"]
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    conversations = read_prompts(tmp_path / "p.jsonl")
    assert [c[-1]["content"] for c in conversations] == ["a", "b\nc", "d", "e"]
    assert all(c[-1]["role"] == "user" for c in conversations)
    (tmp_path / "bad.jsonl").write_text('{"answer": 1}\n', encoding="utf-8")
    with pytest.raises(DataError, match="row 1"):
        read_prompts(tmp_path / "bad.jsonl")


def test_prompt_rows_in_training_shapes_keep_their_system_and_history(tmp_path):
    """A held-out row of the training data asks what training showed: alpaca's system and history, and sharegpt
    conversations (from/value), with the trailing answer as the reference."""
    from engine.inference.prompts import read_prompt_rows

    rows = [{"instruction": "Q", "output": "R", "system": "SYS", "history": [["a", "b"]]},
            {"conversations": [{"from": "system", "value": "S2"}, {"from": "human", "value": "hi"},
                               {"from": "gpt", "value": "hello"}]}]
    (tmp_path / "held.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    (first, ref1), (second, ref2) = read_prompt_rows(tmp_path / "held.jsonl")
    assert first == [{"role": "system", "content": "SYS"}, {"role": "user", "content": "a"},
                     {"role": "assistant", "content": "b"}, {"role": "user", "content": "Q"}] and ref1 == "R"
    assert second == [{"role": "system", "content": "S2"}, {"role": "user", "content": "hi"}] and ref2 == "hello"


def test_a_leading_system_message_is_encoded_as_the_system_prompt(demo_model_dir):
    from engine.inference.chat_model import ChatModel

    model = ChatModel(load_infer_config({"model_name_or_path": str(demo_model_dir), "template": "qwen",
                                         "default_system": "DEFAULT"}))
    try:  # the prompt file's own system prompt wins over the config's default_system
        asked = [{"role": "user", "content": "Q"}]
        assert model.encode([{"role": "system", "content": "SYS"}, *asked]) == model.encode(asked, "SYS")
        assert model.encode([{"role": "system", "content": "SYS"}, *asked]) != model.encode(asked)
    finally:
        model.close()


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_modelfile_pieces_reproduce_every_template(name):
    template = TEMPLATES[name].with_tokens("<s>", "</s>")  # as bound to a tokenizer with these BOS / EOS
    parts = extract_parts(template)
    assert parts is not None
    for messages in ([{"role": "user", "content": "Q"}],
                     [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},
                      {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2"},
                      {"role": "user", "content": "Q3"}]):
        for system in (None, "Be kind."):
            assert parts.render(messages, system) == template.render(messages, system, add_generation_prompt=True)
    text = go_template(parts, template.bos_token or None)
    opened = len(re.findall(r"\{\{ (?:if|range) ", text))
    assert opened == text.count("{{ end }}")  # every block closed
    assert text.endswith(parts.generation_prompt)


def test_tokenizer_chat_template_decomposes(demo_model_dir):
    from transformers import AutoTokenizer

    template = get_template(None, AutoTokenizer.from_pretrained(demo_model_dir))  # template: auto
    parts = extract_parts(template)
    assert parts is not None
    assert parts.default_system == "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def test_importing_inference_and_export_stays_light():
    code = ("import sys, engine.inference, engine.export, engine.inference.validate, engine.inference.source, "
            "assistant.cli.chat, assistant.cli.export; print('torch' in sys.modules, 'textual' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
