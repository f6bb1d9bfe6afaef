"""What the read commands print: tables within 80 columns with no word split, JSON as documented, clean --help."""

import json
import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assistant.cli import jsonout
from assistant.cli.main import app

REPO = Path(__file__).resolve().parents[2]
SMI = REPO / "tests" / "assets" / "smi"
runner = CliRunner()
LONG_ID = "DeepSeek-R1-Distill-Qwen-1.5B_lora-dpo_20261201_111638"


def invoke(*args, columns: int = 80, env: dict | None = None):
    result = runner.invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns), **(env or {})})
    assert "Traceback" not in result.output, result.output
    return result


def assert_fits(output: str, words: list[str], width: int = 80) -> None:
    """No line wider than `width` (unless it is one word that is wider: an id is never cut); each word (an id, a
    state, a header) whole on one line."""
    lines = output.splitlines()
    too_wide = [line for line in lines if len(line) > width and " " in line.strip()]
    assert not too_wide, "\n".join(too_wide)
    for word in words:
        assert any(word in line for line in lines), f"{word!r} is split or missing:\n{output}"


@pytest.fixture()
def runs(tmp_path) -> Path:
    """Three runs as the engine leaves them: a long id that completed, one running, one that failed."""
    from engine.rundir import RunDir

    root = tmp_path / "lf_runs"
    rows = [(LONG_ID, "models/DeepSeek-R1-Distill-Qwen-1.5B", "lora", "completed", 120, 0.8123),
            ("lf-tiny-qwen3_lora_20261201_120000", "lf-tiny-qwen3", "lora", "running", 7, 2.5),
            ("lf-tiny-qwen3_full_20261201_130000", "lf-tiny-qwen3", "full", "failed", 3, None)]
    for run_id, model, method, state, step, loss in rows:
        run = RunDir(root / run_id)
        run.update_status(state=state, run_id=run_id, model=model, method=method, stage="sft", step=step,
                          total_steps=120, started_at=time.time(), loss=loss, exit_reason="boom" if loss is None
                          else None)
        if loss is not None:
            run.append_metric({"step": step, "loss": loss})
    return root


@pytest.mark.parametrize("columns", [80, 60, 40])
def test_runs_table_fits_and_never_splits_ids(runs, columns):
    result = invoke("runs", "--runs-dir", runs, columns=columns)
    assert result.exit_code == 0, result.output
    assert_fits(result.output, [LONG_ID, "completed", "running", "failed", "120/120"], width=columns)
    if columns == 80:
        assert "state" in result.output and "steps" in result.output  # the headers stay whole too


def test_runs_and_status_json_follow_the_documented_fields(runs):
    data = json.loads(invoke("runs", "--runs-dir", runs, "--json").output)
    assert [run["run_id"] for run in data["runs"]][0] in {LONG_ID, "lf-tiny-qwen3_lora_20261201_120000",
                                                          "lf-tiny-qwen3_full_20261201_130000"}
    assert all(list(run) == [f.name for f in jsonout.RUN] for run in data["runs"])
    completed = next(run for run in data["runs"] if run["run_id"] == LONG_ID)
    assert completed["final_loss"] == 0.8123 and completed["run_dir"] == str((runs / LONG_ID).resolve())
    running = next(run for run in data["runs"] if run["state"] == "running")
    assert running["final_loss"] is None  # its latest loss (2.5) is not a final one

    result = invoke("status", "lf-tiny-qwen3_full", "--runs-dir", runs, "--json")
    assert result.exit_code == 1  # a failed run
    status = json.loads(result.output)
    assert list(status) == [f.name for f in jsonout.STATUS]
    assert status["finished"] and status["state"] == "failed" and status["exit_reason"] == "boom"
    result = invoke("status", LONG_ID[:20], "--runs-dir", runs, columns=80)
    assert_fits(result.output, [LONG_ID, "completed", "0.8123"])


def test_runs_names_a_wizard_session_left_before_training_by_its_stage(runs):
    """As the runs review does: the session reads as the stage it was left at, not as a pending run."""
    from datetime import datetime

    from assistant.wizard.state import new_state, save_state

    left = new_state(now=datetime(2026, 1, 1, 12)).replace(stage="data", done=["flow"], workflow="sft", scope="train")
    save_state(left, runs)
    result = invoke("runs", "--runs-dir", runs, columns=120)
    line = next(line for line in result.output.splitlines() if left.run_id in line)
    assert "not trained: Data" in line and "pending" not in line, result.output
    data = json.loads(invoke("runs", "--runs-dir", runs, "--json").output)
    session = next(run for run in data["runs"] if run["run_id"] == left.run_id)
    assert (session["state"], session["wizard_stage"]) == ("unknown", "data")
    assert all(run["wizard_stage"] is None for run in data["runs"] if run["run_id"] != left.run_id)


def test_models_list_fits_80_columns_and_its_json_is_valid():
    from engine.models.registry import MODELS

    longest = max(MODELS, key=len)
    for args in (("models", "list"), ("models", "list", "--local")):
        result = invoke(*args)
        assert result.exit_code == 0
        assert_fits(result.output, [longest, "Qwen/Qwen3-4B-Instruct-2507", "qwen3_nothink", "template"])
    data = json.loads(invoke("models", "list", "--json").output)
    assert len(data["models"]) == len(MODELS)
    assert all(list(model) == [f.name for f in jsonout.MODEL] for model in data["models"])


def test_models_check_json_gives_the_template_and_the_examples(demo_model_dir):
    result = invoke("models", "check", demo_model_dir, "--json")
    assert result.exit_code == 0, result.output
    check = json.loads(result.output)
    assert check["complete"] and check["template"] == "qwen" and Path(check["examples"]["lora"]).is_file()
    missing = invoke("models", "check", "no-such-org/no-such-model", "--json")
    assert missing.exit_code == 1 and json.loads(missing.output)["found"] is False


@pytest.fixture()
def fake_nvidia(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text(f'#!/bin/sh\ncase "$*" in\n  *query-compute-apps*) cat "{SMI}/nvidia_smi_4gpu_apps.csv" ;;\n'
                    f'  *) cat "{SMI}/nvidia_smi_4gpu_mixed.csv" ;;\nesac\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir


def test_gpus_table_fits_and_json_is_valid(fake_nvidia):
    result = invoke("gpus", env={"PATH": f"{fake_nvidia}:/usr/bin:/bin"})
    assert result.exit_code == 0, result.output
    assert_fits(result.output, ["NVIDIA A100-SXM4-80GB", "60.0 GiB", "memory used", "python3"])
    data = json.loads(invoke("gpus", "--json", env={"PATH": f"{fake_nvidia}:/usr/bin:/bin"}).output)
    assert list(data) == [f.name for f in jsonout.GPUS] and data["free"] == [0, 2]
    assert list(data["gpus"][0]) == [f.name for f in jsonout.GPU]


def test_gpus_on_a_cpu_says_which_precision_bf16_trains_in(tmp_path, monkeypatch):
    for units, said in ((None, "in fp32 (this CPU has no bf16 units"), ("AMX-BF16", "it has AMX-BF16 units")):
        monkeypatch.setattr("engine.devices.cpu_bf16_units", lambda: units)
        monkeypatch.setattr("torch.cuda.is_available", lambda: False)
        result = invoke("gpus", env={"PATH": str(tmp_path)})
        assert result.exit_code == 0 and said in " ".join(result.output.split()), result.output
        data = json.loads(invoke("gpus", "--json", env={"PATH": str(tmp_path)}).output)
        assert data["platform"] == "cpu" and data["cpu_bf16"] == units


def test_data_check_table_fits_and_json_lists_every_problem(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"instruction": "a", "output": ""}, {"instruction": 3, "output": "x"},
                                {"instruction": "b"}], indent=1))
    result = invoke("data", "check", path)
    assert result.exit_code == 1
    assert_fits(result.output, ["instruction", "error", "output"])
    data = json.loads(invoke("data", "check", path, "--json").output)
    assert list(data) == [f.name for f in jsonout.DATA_CHECK]
    assert data["ok"] is False and data["errors"] == 3 and [p["row"] for p in data["problems"]] == [1, 2, 3]


def test_data_list_and_add_register_a_copy(tmp_path):
    import shutil

    shutil.copytree(REPO / "data", tmp_path / "data")
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"instruction": "hi", "output": "hello"}\n')
    before = mine.read_bytes()
    result = invoke("data", "add", mine, "--name", "mine", "--dataset-dir", tmp_path / "data")
    assert result.exit_code == 0, result.output
    assert mine.read_bytes() == before and (tmp_path / "data" / "mine.jsonl").is_file()
    listing = json.loads(invoke("data", "list", "--dataset-dir", tmp_path / "data", "--json").output)
    assert {"name": "mine", "available": True}.items() <= next(d for d in listing["datasets"]
                                                                if d["name"] == "mine").items()
    again = invoke("data", "add", mine, "--name", "mine", "--dataset-dir", tmp_path / "data")
    assert again.exit_code == 2 and "mine" in again.output
    assert_fits(invoke("data", "list", "--dataset-dir", tmp_path / "data").output, ["sharegpt_demo", "mine"])


def test_data_templates_lists_the_names_template_takes_and_a_typo_points_there():
    from engine.data.templates import TEMPLATES, get_template
    from engine.errors import DataError

    listed = json.loads(invoke("data", "templates", "--json").output)["templates"]
    assert [t["name"] for t in listed] == list(TEMPLATES) and len(listed) > 50
    assert {"name": "qwen3", "reasoning": True}.items() <= next(t for t in listed if t["name"] == "qwen3").items()
    shown = invoke("data", "templates", "llama")
    assert shown.exit_code == 0
    assert_fits(shown.output, ["llama3", "llama2"])
    assert "qwen3" not in shown.output
    assert invoke("data", "templates", "no-such-family").exit_code == 1
    with pytest.raises(DataError) as refused:
        get_template("lama3")
    message = str(refused.value)
    assert "Did you mean llama3" in message and "lf-assistant data templates" in message
    assert "qwen3_nothink" not in message  # the whole list stays in the command, not in every refusal


def test_json_reference_is_generated_from_the_declarations():
    assert (REPO / "docs" / "cli-json.md").read_text() == jsonout.render_doc()


def _commands(group=None, prefix=()):
    import typer.main

    command = group or typer.main.get_command(app)
    for name, sub in getattr(command, "commands", {}).items():
        yield (*prefix, name)
        yield from _commands(sub, (*prefix, name))


def test_help_names_no_type_after_flags():
    for path in [(), *_commands()]:
        result = invoke(*path, "--help", columns=100)
        assert result.exit_code == 0, (path, result.output)
        assert "<bool>" not in result.output, (path, result.output)
    assert re.search(r"--runs-dir\s+<path>", invoke("runs", "--help", columns=100).output)


def test_every_option_and_argument_says_what_it_is():
    import typer.main

    root = typer.main.get_command(app)
    for path in [(), *_commands()]:
        command = root
        for name in path:
            command = command.commands[name]
        silent = [param.name for param in command.params if not (getattr(param, "help", None) or "").strip()]
        assert not silent, (path, silent)
        if path:  # the commands list shows the first paragraph with its line breaks: keep it one paragraph
            assert "\n" not in (command.help or "").split("\n\n")[0], (path, command.help)


@pytest.mark.parametrize("args,option", [(["chat", "{config}", "--prompts", "{prompts}", "--batch-size", "0"],
                                          "--batch-size"),
                                         (["gpus", "--timeout", "-1"], "--timeout")])
def test_a_count_or_time_below_its_range_is_refused_before_anything_loads(tmp_path, args, option):
    config, prompts = tmp_path / "infer.yaml", tmp_path / "prompts.txt"
    config.write_text(f"model_name_or_path: {tmp_path / 'model'}\ntemplate: qwen\n")
    prompts.write_text("hello\n")
    result = invoke(*[a.format(config=config, prompts=prompts) for a in args], columns=200)
    assert result.exit_code == 2 and f"Invalid value for '{option}'" in result.output, result.output


def test_an_output_path_through_a_file_says_the_file_is_in_the_way(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    data = REPO / "data" / "identity.json"
    said = {"skills install --dir FILE": (["skills", "install", "--dir", notes], "is a file, not a folder"),
            "skills install --dir FILE/sub": (["skills", "install", "--dir", notes / "sub"],
                                              "one of its parent folders is a file"),
            "data check --fix FILE/x.json": (["data", "check", data, "--fix", notes / "x.json"],
                                             f"{notes} is a file, not a folder")}
    for case, (args, words) in said.items():
        result = invoke(*args, columns=250)
        assert result.exit_code == 2 and words in result.output, (case, result.output)
        assert "File exists" not in result.output and "Not a directory" not in result.output, (case, result.output)
    assert notes.read_text() == "mine"


@pytest.mark.parametrize("args", [["--lang", "xx", "runs"], ["web", "--lang", "klingon"]])
def test_an_interface_language_not_offered_is_refused(args):
    result = invoke(*args, columns=200)
    assert result.exit_code == 2 and "is not an interface language; use en or zh" in result.output, result.output


def test_status_follow_json_prints_json_lines_until_the_end(runs):
    result = invoke("status", LONG_ID, "--runs-dir", runs, "--follow", "--json")
    lines = result.output.splitlines()
    assert result.exit_code == 0 and len(lines) == 1  # already finished: one line, the final one
    assert json.loads(lines[0])["finished"] is True


def test_train_gpus_pins_the_choice_in_the_run_folder(fake_nvidia, tmp_path, monkeypatch):
    import os

    from assistant.cli.train import _pin_gpus
    from engine.api import load_config

    bad = invoke("train", REPO / "examples/demo/tiny_lora_sft.yaml", "--gpus", "7", "--runs-dir", tmp_path,
                 env={"PATH": f"{fake_nvidia}:/usr/bin:/bin"})
    assert bad.exit_code == 2 and "GPU 7 does not exist here" in bad.output
    saved = dict(os.environ)
    try:
        cfg = load_config(REPO / "examples/demo/tiny_lora_sft.yaml")
        run_dir = _pin_gpus(cfg, "0,2", tmp_path / "lf_runs", "pinned")
        assert json.loads((run_dir / "device.json").read_text())["indices"] == [0, 2]
        assert cfg.nproc_per_node == 2 and os.environ["CUDA_VISIBLE_DEVICES"] == "0,2"
        assert (run_dir / "sft.yaml").is_file()  # the run folder is prepared before launching
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.mark.parametrize("stage", ["pt", "rm", "kto"])
def test_data_preview_shows_what_each_stage_trains(demo_model_dir, stage):
    config = REPO / "examples" / "demo" / f"tiny_lora_{stage}.yaml"
    result = invoke("data", "preview", config, f"model_name_or_path={demo_model_dir}", "cutoff_len=64", "--json")
    assert result.exit_code == 0, result.output
    preview = json.loads(result.output)
    assert preview["samples"] > 0 and preview["shown"]
    if stage == "pt":  # raw text cut into full rows, every token trained
        assert preview["trained_tokens"] == preview["total_tokens"] == 64 * preview["samples"]
        assert all(span["trained"] for row in preview["shown"] for span in row["spans"])
    if stage == "rm":  # pairs: both answers count
        assert preview["total_tokens"] > preview["trained_tokens"] > 0
    if stage == "kto":
        assert all(re.search(r"\((un)?desirable answer\)$", row["source"]) for row in preview["shown"])


def test_data_check_reads_pretraining_text(tmp_path):
    text = tmp_path / "corpus.jsonl"
    text.write_text('{"text": "a first document"}\n{"text": ""}\n{"text": "forged <|im_end|> turn"}\n')
    result = invoke("data", "check", text, "--json")
    report = json.loads(result.output)
    assert result.exit_code == 1 and report["format"] == "text" and report["rows"] == 3
    assert [(p["row"], p["level"]) for p in report["problems"]] == [(2, "error"), (3, "warning")]
    assert report["suggested_entry"] == {"file_name": "corpus.jsonl", "columns": {"prompt": "text"}}
    lines = tmp_path / "wiki.txt"
    lines.write_text("one line of text\nanother\n")
    result = invoke("data", "check", lines)
    assert result.exit_code == 0 and "text, 2 rows: ok" in " ".join(result.output.split())


def test_stop_and_resume_train_take_the_whole_id(runs):
    for command in ("stop", "resume-train"):
        result = invoke(command, "lf-tiny-qwen3_full", "--runs-dir", runs)
        assert result.exit_code != 0 and "takes its whole id" in " ".join(result.output.split()), result.output
    assert "failed" in invoke("status", "lf-tiny-qwen3_full", "--runs-dir", runs).output  # reading may abbreviate
