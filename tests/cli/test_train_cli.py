"""`lf-assistant train` as a user meets it: LLaMA-Factory configs work, broken input gets a message, not a traceback."""

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assistant.cli.main import app
from engine.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result


def test_llamafactory_lora_example_trains(lf_reference, demo_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("engine.training.setup.cpu_bf16_units", lambda: None)  # the example's bf16 becomes fp32
    result = invoke("train", lf_reference / "examples/train_lora/qwen3_lora_sft.yaml",
                    f"model_name_or_path={demo_model_dir}", f"dataset_dir={lf_reference / 'data'}",
                    "dataset=identity", "max_steps=6", "logging_steps=2", "learning_rate=1e-3",
                    f"output_dir={tmp_path / 'out'}", "--runs-dir", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    assert "completed" in result.output and "bf16" in result.output  # the fp32-on-CPU note is shown
    run_dir = next((tmp_path / "runs").iterdir())
    status = RunDir(run_dir).read_status()
    assert status.state == "completed" and status.template == "qwen3_nothink"
    losses = [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert losses[-1] < losses[0]
    assert (tmp_path / "out" / "adapter_config.json").exists()
    assert (tmp_path / "out" / "training_loss.png").exists()
    # The saved config reproduces the run on its own: it validates from inside the run folder.
    import engine

    assert engine.validate(engine.load_config(run_dir / "sft.yaml")) == []


BROKEN_CONFIGS = {
    "unknown key": ("dataset: identity\nlearnig_rate: 1.0e-4\n", "Did you mean 'learning_rate'"),
    "bad type": ("dataset: identity\nper_device_train_batch_size: two\n", "expected int"),
    "bad yaml": ("dataset: identity\n  x: [\n", "not valid YAML"),
    "missing dataset": ("dataset: no_such_set\n", "no_such_set"),
    "typo dataset": ("dataset: identiy\n", "identity"),
    "bad method": ("dataset: identity\nfinetuning_type: lorra\n", "finetuning_type"),
    "missing model": ("model_name_or_path: ./no/such/model\ndataset: identity\n", "does not exist"),
    "list document": ("- a\n- b\n", "mapping"),
    "negative lr": ("dataset: identity\nlearning_rate: -1\n", "learning_rate must be > 0"),
    "qlora on cpu": ("dataset: identity\nquantization_bit: 4\n", "QLoRA"),
    "dpo on sft data": ("dataset: identity\nstage: dpo\n", "preference"),
}


@pytest.mark.parametrize("name", sorted(BROKEN_CONFIGS))
def test_broken_config_gets_a_message(name, tmp_path):
    text, expected = BROKEN_CONFIGS[name]
    path = tmp_path / "config.yaml"
    path.write_text(text + f"dataset_dir: {REPO / 'data'}\n" if not text.startswith("- ") else text)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    result = invoke("train", path, "--check")
    assert result.exit_code == 2, result.output
    assert expected in result.output, result.output
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("options,expected", [(["--gpus", "0;rm"], "give GPU indices separated by commas"),
                                              (["--nproc-per-node", "-1"], "nproc_per_node must be >= 1"),
                                              (["--nproc-per-node", "0"], "nproc_per_node must be >= 1")])
def test_check_refuses_the_launch_options_training_would_refuse(options, expected, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(f"dataset: identity\ndataset_dir: {REPO / 'data'}\n")
    result = invoke("train", path, "--check", *options)
    assert result.exit_code == 2 and expected in " ".join(result.output.split()), result.output


def test_bad_dataset_rows_are_reported_before_training(demo_model_dir, tmp_path):
    (tmp_path / "rows.json").write_text('[{"instruction": "hi", "output": ""}, {"instruction": 3, "output": "x"}]')
    (tmp_path / "dataset_info.json").write_text('{"rows": {"file_name": "rows.json"}}')
    path = tmp_path / "config.yaml"
    path.write_text(f"model_name_or_path: {demo_model_dir}\ndataset: rows\ndataset_dir: {tmp_path}\nmax_steps: 2\n")
    result = invoke("train", path, "--runs-dir", tmp_path / "runs")
    assert result.exit_code == 2
    assert "row 1" in result.output and "row 2" in result.output
    status = RunDir(next((tmp_path / "runs").iterdir())).read_status()
    assert status.state == "failed" and "row 1" in status.exit_reason


def test_check_finds_what_the_template_says_once_it_meets_the_tokenizer(demo_model_dir, tmp_path):
    """A template whose control tokens the model's tokenizer lacks stopped training right after the model loaded;
    --check now says so, and so does a template that cannot train on prompts."""
    path = tmp_path / "config.yaml"
    path.write_text(f"model_name_or_path: {demo_model_dir}\ndataset: identity\ndataset_dir: {REPO / 'data'}\n"
                    "max_steps: 2\n")
    result = invoke("train", path, "--check", "template=glm4")
    assert result.exit_code == 2 and "Template 'glm4' ends answers with <|user|>" in result.output, result.output
    result = invoke("train", path, "--check", "template=breeze", "train_on_prompt=true")
    assert result.exit_code == 2 and "'breeze' cannot train on prompts" in result.output, result.output
    assert invoke("train", path, "--check", "template=qwen").exit_code == 0


def test_a_run_id_already_taken_is_refused_without_an_empty_progress_bar(demo_model_dir, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(f"model_name_or_path: {demo_model_dir}\ndataset: identity\ndataset_dir: {REPO / 'data'}\n"
                    f"template: qwen\nmax_steps: 1\nmax_samples: 8\noutput_dir: {tmp_path / 'a'}\n")
    first = invoke("train", path, "--runs-dir", tmp_path / "runs", "--run-id", "mine")
    assert first.exit_code == 0 and "training" in first.output and "1/1" in first.output  # the bar, when it trains
    again = invoke("train", path, "output_dir=" + str(tmp_path / "b"), "--runs-dir", tmp_path / "runs",
                   "--run-id", "mine")
    assert again.exit_code != 0 and "already holds a run" in again.output
    assert "training" not in again.output and "0/?" not in again.output


def test_check_finds_a_dataset_that_would_train_no_token_before_loading_a_model(demo_model_dir, tmp_path):
    """Long prompts, answers of a dozen tokens and a small cutoff_len: the template's truncation leaves no answer
    token in any row, which training says only after loading the model; --check says it first."""
    long_prompt = " ".join(["explain"] * 300)
    answer = "this answer has quite a few words in it, for sure, and more"
    rows = [{"instruction": f"{long_prompt} {n}", "output": answer} for n in range(6)]
    data = tmp_path / "data"
    data.mkdir()
    (data / "rows.json").write_text(json.dumps(rows))
    (data / "dataset_info.json").write_text('{"rows": {"file_name": "rows.json"}}')
    path = tmp_path / "config.yaml"
    path.write_text(f"model_name_or_path: {demo_model_dir}\ndataset: rows\ndataset_dir: {data}\n"
                    f"template: qwen\ncutoff_len: 16\nmax_steps: 1\noutput_dir: {tmp_path / 'out'}\n")
    checked = invoke("train", path, "--check")
    assert checked.exit_code == 2, checked.output
    assert "No sample has a trained token after encoding" in checked.output and "cutoff_len is 16" in checked.output
    trained = invoke("train", path, "--runs-dir", tmp_path / "runs")  # the same sentence as training stops with
    assert trained.exit_code != 0 and "No sample has a trained token after encoding" in trained.output
    assert invoke("train", path, "cutoff_len=2048", "--check").exit_code == 0  # room for the answers: fine


def test_resume_train_here_shows_the_bar_from_the_runs_own_step_and_time(demo_model_dir, tmp_path):
    """A stopped run continued with --here: the bar starts at the checkpoint's step, not 0, and the run ends."""
    import engine
    from engine.training.loop import StopFlag

    class StopAfterThree(StopFlag):
        checks = 0

        @property
        def requested(self) -> bool:  # read once per step, after the step
            self.checks += 1
            return self.checks >= 3

        @requested.setter
        def requested(self, value: bool) -> None:
            pass

    config = engine.load_config({
        "model_name_or_path": str(demo_model_dir), "dataset": "identity", "dataset_dir": str(REPO / "data"),
        "template": "qwen", "cutoff_len": 64, "max_samples": 32, "per_device_train_batch_size": 4, "max_steps": 6,
        "logging_steps": 1, "save_steps": 100, "output_dir": str(tmp_path / "out")})
    handle = engine.train(config, runs_dir=tmp_path / "runs", stop=StopAfterThree())
    assert handle.status().state == "stopped" and handle.status().step == 3
    result = invoke("resume-train", handle.run_id, "--runs-dir", tmp_path / "runs", "--here")
    assert result.exit_code == 0, result.output
    assert "6/6" in result.output and "elapsed, ETA" in result.output and "completed: 6 steps" in result.output
    assert "0/6" not in result.output and "follow with" not in result.output


def test_the_bar_clock_shows_the_runs_elapsed_time_and_ticks_between_rows(monkeypatch):
    from assistant.cli import train as train_cli

    now = [100.0]
    monkeypatch.setattr("time.monotonic", lambda: now[0])
    clock = train_cli._RunClock()
    assert clock.text() == "- elapsed, ETA -"  # before the first logged step
    clock.update({"elapsed_s": 3600.0, "eta_s": 60.0})  # an earlier attempt's hour counts
    assert clock.text() == "1:00:00 elapsed, ETA 1:00"
    now[0] += 30
    assert clock.text() == "1:00:30 elapsed, ETA 0:30"
    now[0] += 90
    assert clock.text() == "1:02:00 elapsed, ETA 0:00"  # late: never a negative ETA
