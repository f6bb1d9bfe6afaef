"""`lf-assistant chat` and `lf-assistant export` through the real CLI app."""

import json

from typer.testing import CliRunner

from assistant.cli.main import app
from engine.export import make_export_config
from engine.inference import make_infer_config

runner = CliRunner()


def write_yaml(path, data):
    path.write_text(json.dumps(data), encoding="utf-8")  # JSON is valid YAML
    return path


def test_interactive_chat_streams_and_keeps_history(lora_run, demo_model_dir, tmp_path):
    infer = write_yaml(tmp_path / "infer.yaml", make_infer_config(lora_run, base_model=str(demo_model_dir),
                                                                  method="lora", template="qwen"))
    session = "Who are you?\nAnd who made you?\n/clear\nHi\n/exit\n"
    result = runner.invoke(app, ["chat", str(infer), "max_new_tokens=8"], input=session)
    assert result.exit_code == 0, result.output
    assert result.output.count("assistant> ") == 3
    assert "(new conversation)" in result.output and "template qwen" in result.output


def test_chat_answers_a_prompt_file(lora_run, demo_model_dir, tmp_path):
    infer = write_yaml(tmp_path / "infer.yaml", make_infer_config(lora_run, base_model=str(demo_model_dir),
                                                                  method="lora", template="qwen"))
    (tmp_path / "prompts.txt").write_text("Who are you?\nHi\n", encoding="utf-8")
    out = tmp_path / "answers.jsonl"
    result = runner.invoke(app, ["chat", str(infer), "max_new_tokens=8", "--prompts", str(tmp_path / "prompts.txt"),
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["prompt"] for r in rows] == ["Who are you?", "Hi"] and all(r["base"] is None for r in rows)


def test_export_command_and_its_refusal(lora_run, demo_model_dir, tmp_path):
    config = make_export_config(lora_run, base_model=str(demo_model_dir), method="lora", template="qwen",
                                export_dir=tmp_path / "merged", export_device="cpu")
    path = write_yaml(tmp_path / "export.yaml", config)
    refused = runner.invoke(app, ["export", str(path), "template=llama3"])
    assert refused.exit_code == 2 and "Template mismatch" in refused.output
    done = runner.invoke(app, ["export", str(path)])
    assert done.exit_code == 0, done.output
    assert "exported to" in done.output and "merged logits match base + adapter" in done.output
    assert (tmp_path / "merged" / "lfa_export.json").is_file()


def test_chat_never_writes_over_an_input_or_a_foreign_file(lora_run, demo_model_dir, tmp_path):
    import hashlib

    infer = write_yaml(tmp_path / "infer.yaml", make_infer_config(lora_run, base_model=str(demo_model_dir),
                                                                  method="lora", template="qwen"))
    prompts = tmp_path / "validation.jsonl"  # a prompt file that carries the default output's name
    prompts.write_text('{"prompt": "Hi"}\n', encoding="utf-8")
    (tmp_path / "notes.jsonl").write_text('{"mine": 1}\n', encoding="utf-8")
    files = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir()}
    for out, said in ((prompts, "is an input"), (infer, "is an input"), (tmp_path / "notes.jsonl", "not an "
                      "lf-assistant validation output"), (tmp_path, "is a folder")):
        result = runner.invoke(app, ["chat", str(infer), "max_new_tokens=4", "--prompts", str(prompts),
                                     "--out", str(out)], env={"COLUMNS": "300"})
        assert result.exit_code == 2 and said in result.output, result.output
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files} == files
    result = runner.invoke(app, ["chat", str(infer), "max_new_tokens=4", "--prompts", str(prompts)])
    assert result.exit_code == 0, result.output
    assert prompts.read_text(encoding="utf-8") == '{"prompt": "Hi"}\n'
    answers = tmp_path / "validation-answers.jsonl"
    assert json.loads(answers.read_text(encoding="utf-8"))["prompt"] == "Hi"
    again = runner.invoke(app, ["chat", str(infer), "max_new_tokens=4", "--prompts", str(prompts)])
    assert again.exit_code == 0, again.output  # an earlier validation output of ours may be replaced
