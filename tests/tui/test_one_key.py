"""The one-key path: from the first screen to the summary with Enter and Ctrl+N alone, at 80x24, on the demo model.

Every stage still shows what it will do and asks; the recommended answers are preselected, so pressing on goes
through data, model, device, a measured pre-flight, training, validation (with held-out rows) and export."""

import json

import yaml
from pilot_helpers import SIZE, make_app, on_screen, wait_until

from engine.rundir import RunDir

KEYS = ("enter", "ctrl+n")


async def _press(pilot, key: str) -> None:
    assert key in KEYS  # nothing but the two keys the issue allows
    await pilot.press(key)


async def _on(pilot, app, screen: str, timeout: float = 120, what: str = "") -> None:
    await wait_until(pilot, lambda: on_screen(app, screen), timeout=timeout, what=what or screen)


async def test_enter_and_ctrl_n_alone_run_the_whole_flow(workspace):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await _on(pilot, app, "FlowScreen")
        assert not (workspace / "lf_runs").exists()  # nothing is written before the first answer
        await _press(pilot, "enter")  # on the chosen workflow: Enter goes on
        await wait_until(pilot, lambda: on_screen(app, "DataScreen") and app.screen.counts, what="data listed")
        assert list(app.screen.query_one("#datasets").selected) == ["identity"]  # the recommended data
        assert app.screen.query_one("#q-data_source").region.y < 5  # the question is in view, not scrolled off
        await _press(pilot, "enter")
        await _on(pilot, app, "AskValues", what="placeholder values asked")
        await _press(pilot, "enter")  # one Enter sets the suggested name and author
        await wait_until(pilot, lambda: on_screen(app, "ModelScreen") and app.screen.resolved, what="model")
        assert app.state.datasets == ["identity_custom"]
        await _press(pilot, "enter")
        await _on(pilot, app, "GpuScreen")
        await _press(pilot, "ctrl+n")  # goes on once the devices are detected
        await wait_until(pilot, lambda: on_screen(app, "ConfigScreen") and app.screen.built, what="config")
        await _press(pilot, "enter")  # continues once the pre-flight has measured
        await _on(pilot, app, "ConfirmTable", timeout=180, what="the pre-flight, then the sft.yaml table")
        measured = app.state.measured["result"]
        assert measured["fits"] and measured["step_s"] > 0 and measured["total_steps"] > 0
        await _press(pilot, "enter")
        await wait_until(pilot, lambda: on_screen(app, "TrainScreen") and app.screen.status.is_terminal,
                         timeout=300, what="training to end")
        assert app.screen.status.state == "completed", app.screen.status
        assert "F2 runs" in str(app.screen.query_one("#keyhelp").render())  # the review is a key away here too
        window = "each training point: the mean of 2 steps"  # the skill logs every 2 steps: the curve says so
        assert window in str(app.screen.query_one("#chart").render())
        await _press(pilot, "enter")
        await _on(pilot, app, "LossScreen")
        assert window in str(app.screen.query_one("#chart").render())
        await _press(pilot, "enter")
        await _on(pilot, app, "ConfirmTable", what="the infer.yaml table")
        await _press(pilot, "enter")  # confirming infer.yaml shows the prompts, to check first
        await wait_until(pilot, lambda: on_screen(app, "ValidateScreen") and app.screen.query_one("#prompts-box")
                         .display, what="the prompts")
        await _press(pilot, "enter")  # on "Answer these prompts": the validation starts
        await wait_until(pilot, lambda: app.state.validated, timeout=240, what="validation")
        await _press(pilot, "enter")
        await _on(pilot, app, "ExportScreen")
        await _press(pilot, "enter")
        await _on(pilot, app, "ConfirmTable", what="the export.yaml table")
        await _press(pilot, "enter")  # confirming export.yaml runs the export
        await wait_until(pilot, lambda: app.state.exported, timeout=240, what="export")
        await _press(pilot, "enter")
        await _on(pilot, app, "SummaryScreen")
        summary = str(app.screen.query_one("#summary").render())
    run = workspace / "lf_runs" / app.state.run_id
    config = yaml.safe_load((run / "sft.yaml").read_text())
    assert config["dataset"] == "identity_custom" and config["val_size"] == 6
    status = RunDir(run).read_status()
    assert status.state == "completed" and status.step == status.total_steps == measured["total_steps"]
    infer = yaml.safe_load((run / "infer.yaml").read_text())
    assert 32 <= infer["max_new_tokens"] <= 256 and infer["do_sample"] is False
    answers = [json.loads(line) for line in (run / "validation.jsonl").read_text().splitlines()]
    held = [row for row in answers if row.get("reference")]
    assert len(held) == 4 and all("Nova" in row["reference"] for row in held)  # the user's own rows
    assert any(row["tuned"] != row["base"] for row in answers)
    assert "What changed" in summary and "models/lf-tiny-qwen3-merged" in summary
    assert (workspace / "models" / "lf-tiny-qwen3-merged" / "config.json").is_file()
