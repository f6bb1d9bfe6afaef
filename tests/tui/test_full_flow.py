"""The whole flow on the demo model and demo data, answered as a user would, then checked on disk."""

import json

import pytest
import yaml
from pilot_helpers import SIZE, make_app, on_screen, wait_until
from engine.rundir import RunDir


async def _answer_until_training(pilot, app):
    await pilot.press("ctrl+n")  # stage 0 defaults: full flow, run here, LoRA
    await wait_until(pilot, lambda: on_screen(app, "DataScreen") and app.screen.counts, what="data listed")
    datasets = app.screen.query_one("#datasets")
    assert list(datasets.selected) == ["identity"]  # preselected: it has {{name}} and {{author}}
    datasets.focus()
    await pilot.press("space", "space")  # Space toggles it off and on again
    assert list(datasets.selected) == ["identity"]
    await pilot.press("ctrl+n")
    await wait_until(pilot, lambda: on_screen(app, "AskValues"), what="placeholder values asked")
    assert app.screen.query_one("#value-1").value == "Nova"  # suggested; the user types their own
    app.screen.query_one("#value-0").value = ""
    app.screen.query_one("#value-1").value = ""
    await pilot.press(*"Lab", "enter", *"Ada", "enter")
    await wait_until(pilot, lambda: on_screen(app, "ModelScreen") and app.state.model_path, what="model")
    await pilot.press("ctrl+n")
    await wait_until(pilot, lambda: on_screen(app, "GpuScreen") and app.device_report is not None)
    await pilot.press("ctrl+n")
    await wait_until(pilot, lambda: on_screen(app, "ConfigScreen"), what="config")
    # Enter on a row of the parameter table edits it in place
    table = app.screen.query_one("#params")
    table.focus()
    table.move_cursor(row=list(app.screen.built.config).index("lora_rank") if app.screen.show_all else
                      app.screen.stage.settings["key_params"].index("lora_rank"))
    await pilot.press("enter")
    await wait_until(pilot, lambda: on_screen(app, "EditValue"), what="edit dialog")
    await pilot.press(*"4", "enter")
    await wait_until(pilot, lambda: on_screen(app, "ConfigScreen") and app.state.edits == {"lora_rank": 4})
    await pilot.press("ctrl+n")
    await wait_until(pilot, lambda: on_screen(app, "ConfirmTable"), timeout=180, what="sft.yaml table")
    rows = dict(app.screen.rows)
    await pilot.press("y")
    return rows


@pytest.mark.slow  # ~3 min on 2 cores; tests/tui/test_one_key.py walks the same flow in the default suite
async def test_full_flow_trains_validates_and_exports(workspace):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        train_rows = await _answer_until_training(pilot, app)
        await wait_until(pilot, lambda: on_screen(app, "TrainScreen") and app.screen.status.state
                         in ("completed", "failed", "stopped"), timeout=240, what="training to end")
        assert app.screen.status.state == "completed", app.screen.status
        assert "completed" in str(app.screen.query_one("#run-state").render())
        keys = str(app.screen.query_one("#keyhelp").render())  # an ended run offers no stop, a completed no resume
        assert "^N continue" in keys and "stop" not in keys and "resume" not in keys
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "LossScreen"))
        assert "training_loss.png" in str(app.screen.query_one("#loss-info").render())
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "ConfirmTable"), what="infer.yaml table")
        infer_rows = dict(app.screen.rows)
        await pilot.press("y")  # confirming shows the suggested prompts; Enter on the focused button answers them
        await wait_until(pilot, lambda: on_screen(app, "ValidateScreen") and app.screen.query_one("#prompts-box")
                         .display, what="the prompts")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.state.validated, timeout=240, what="validation")
        intro = " ".join(str(app.screen.query_one("#intro").render()).split())
        assert "infer.yaml is written" in intro and "Once infer.yaml is confirmed" not in intro  # not stale
        assert "and 4 of the 6 held-out rows of your data" in intro  # the config held 6 out; 4 are asked
        app.screen.query_one("#prompts").text = "Who are you?\nWhat is your name?"
        app.screen.query_one("#run").press()  # and again on the user's own

        def prompts_answered():
            answers = workspace / "lf_runs" / app.state.run_id / "validation.jsonl"
            return answers.is_file() and '"What is your name?"' in answers.read_text()

        await wait_until(pilot, prompts_answered, timeout=240, what="validation again")
        await wait_until(pilot, lambda: not app.screen.query_one("#run").disabled, what="the run to be shown")
        assert "lf-assistant chat lf_runs/" in str(app.screen.query_one("#chat-again").render())
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "ExportScreen"))
        await pilot.press("enter")
        await wait_until(pilot, lambda: on_screen(app, "ConfirmTable"), what="export.yaml table")
        export_rows = dict(app.screen.rows)
        await pilot.press("y")  # confirming runs the export
        await wait_until(pilot, lambda: app.state.exported, timeout=240, what="export")
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "SummaryScreen"))
        summary = str(app.screen.query_one("#summary").render())
    run = workspace / "lf_runs" / app.state.run_id
    assert app.state.run_id.startswith("lf-tiny-qwen3_lora_")
    config = yaml.safe_load((run / "sft.yaml").read_text())
    assert config == train_rows and config["lora_rank"] == 4 and config["dataset"] == "identity_custom"
    assert {"parameter": "lora_rank", "default": 8, "new": 4, "reason": "user-specified"} in app.state.diff
    assert yaml.safe_load((run / "infer.yaml").read_text()) == infer_rows
    assert yaml.safe_load((run / "export.yaml").read_text()) == export_rows
    assert config["template"] == infer_rows["template"] == export_rows["template"]
    status = RunDir(run).read_status()
    assert status.state == "completed" and status.step == status.total_steps == 84
    assert json.loads((run / "device.json").read_text())["platform"] == "cpu"
    losses = [m["loss"] for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in m]
    assert losses[-1] < losses[0]
    output = workspace / "saves" / "lf-tiny-qwen3" / "lora"
    adapter = next(output.iterdir())
    assert (adapter / "adapter_config.json").is_file() and (adapter / "training_loss.png").is_file()
    from safetensors.numpy import load_file

    weights = load_file(str(adapter / "adapter_model.safetensors"))
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and any(abs(v).max() > 0 for v in lora_b)  # B starts at zero: non-zero means it trained
    answers = [json.loads(line) for line in (run / "validation.jsonl").read_text().splitlines()]
    assert [a["prompt"] for a in answers][:2] == ["Who are you?", "What is your name?"]
    assert len(answers) == 6 and all("Ada" in a["reference"] for a in answers[2:])  # 4 held-out rows
    assert all("base" in a and "tuned" in a for a in answers)
    exported = workspace / "models" / "lf-tiny-qwen3-merged"
    assert str(exported) in summary or "models/lf-tiny-qwen3-merged" in summary
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(exported)
    tokenizer = AutoTokenizer.from_pretrained(exported)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=3, do_sample=False)
    assert out.shape[-1] == ids["input_ids"].shape[-1] + 3
