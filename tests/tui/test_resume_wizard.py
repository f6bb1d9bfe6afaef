"""Quitting mid-wizard loses nothing: --resume reopens the same stage with the same answers."""

import json

from pilot_helpers import SIZE, choose_datasets, make_app, on_screen, wait_until


async def test_quit_at_config_and_resume_there_with_the_same_answers(workspace):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        # stage 0: workflow SFT (the default), training only (up from the default, full flow), full fine-tuning (down
        # from LoRA)
        await pilot.press("tab", "up", "enter", "tab", "tab", "down", "enter", "ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "DataScreen"))
        await wait_until(pilot, lambda: app.screen.counts, what="row counts")
        choose_datasets(app, "alpaca_demo")
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "ModelScreen"))
        await wait_until(pilot, lambda: app.state.model_path, what="model resolved")
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "GpuScreen") and app.device_report is not None)
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "ConfigScreen"))
        # edit a value in place: `e` names any parameter, then its value
        await pilot.press("e", *"warmup_ratio", "enter")
        await wait_until(pilot, lambda: on_screen(app, "EditValue") and app.screen.key == "warmup_ratio")
        await pilot.press(*"0.2", "enter")  # the current value is selected: typing replaces it
        await wait_until(pilot, lambda: on_screen(app, "ConfigScreen") and app.state.edits)
        diff = {row.parameter: row for row in app.screen.built.diff}
        assert diff["warmup_ratio"].new == 0.2 and diff["warmup_ratio"].reason == "user-specified"
        await pilot.press("ctrl+q")
    run_id = app.state.run_id
    assert app.exit_hint and f"--resume {run_id}" in app.exit_hint
    from assistant.command import self_command

    assert f"{self_command()} --resume {run_id}" in app.exit_hint  # runnable without an activated venv
    saved = json.loads((workspace / "lf_runs" / run_id / "state.json").read_text())
    assert saved["stage"] == "config" and saved["method"] == "full" and saved["scope"] == "sft"

    again = make_app(workspace, resume=run_id)
    async with again.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: on_screen(again, "ConfigScreen"), what="reopened at config")
        assert again.state.datasets == ["alpaca_demo"] and again.state.edits == {"warmup_ratio": 0.2}
        assert again.screen.built.config["finetuning_type"] == "full"
        # Esc walks back with the answers preselected
        for screen in ("GpuScreen", "ModelScreen", "DataScreen", "FlowScreen"):
            await pilot.press("escape")
            await wait_until(pilot, lambda: on_screen(again, screen), what=screen)
        answers = again.screen.answers()
        assert answers == {"workflow": "sft", "scope": "sft", "execution": "run_here", "method": "full"}
        board = str(again.screen.query_one("#board").render())
        assert "[-] 5. Validate" in board and "[-] 6. Export" in board


async def test_resume_of_an_unknown_run_says_so(workspace):
    app = make_app(workspace, resume="no-such-run")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
    assert app.return_code == 2 and "No run 'no-such-run'" in app.exit_hint


async def test_resume_takes_the_whole_run_id(workspace):
    """Reopening may resume training: a prefix that names another run must not pick it (as resume-train)."""
    from engine.rundir import RunDir

    RunDir(workspace / "lf_runs" / "demo_lora_20260101_000000").path.mkdir(parents=True)
    (workspace / "lf_runs" / "demo_lora_20260101_000000" / "status.json").write_text('{"state": "stopped"}')
    app = make_app(workspace, resume="demo_lora_2026")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
    assert app.return_code == 2 and "demo_lora_20260101_000000 start(s) with it" in app.exit_hint


def test_quitting_says_when_training_goes_on_in_the_background(workspace):
    """Ctrl+Q leaves a launched run training: the words on exit say so, and how to follow or stop it."""
    from engine.rundir import RunDir
    from engine.runstatus import ProcessIdentity, RunState

    from assistant.i18n import t
    from assistant.wizard.state import new_state

    app = make_app(workspace)
    app.state = new_state().replace(run_id="r1", launched=True)
    run = RunDir(app.runs_dir / "r1")
    run.path.mkdir(parents=True)
    run.update_status(state=RunState.RUNNING, process=ProcessIdentity.current())
    assert app._training_goes_on()
    assert "lf-assistant stop r1" in t("app.training_goes_on", run_id="r1")
    run.update_status(state=RunState.COMPLETED)
    assert not app._training_goes_on()
