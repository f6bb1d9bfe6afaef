"""Training killed mid-run is resumed through --resume from its newest complete checkpoint, to completion; a run
still going when the TUI closes is reattached, not relaunched."""

import json
import os
import signal

from pilot_helpers import SIZE, choose_datasets, make_app, messages, on_screen, wait_until

from engine.rundir import RunDir, find_complete_checkpoints


async def _edit(pilot, app, key: str, value: str) -> None:
    await pilot.press("e", *key, "enter")
    await wait_until(pilot, lambda: on_screen(app, "EditValue") and app.screen.key == key, what=f"edit {key}")
    await pilot.press(*value, "enter")
    await wait_until(pilot, lambda: on_screen(app, "ConfigScreen") and key in app.state.edits, what=f"{key} set")


async def _launch_long_run(pilot, app) -> None:
    await pilot.press("tab", "up", "enter", "ctrl+n")  # past the workflow (SFT) to the scope: training only
    await wait_until(pilot, lambda: on_screen(app, "DataScreen") and app.screen.counts)
    choose_datasets(app, "alpaca_demo")
    await pilot.press("ctrl+n")
    await wait_until(pilot, lambda: on_screen(app, "ModelScreen") and app.state.model_path)
    await pilot.press("ctrl+n")
    await wait_until(pilot, lambda: on_screen(app, "GpuScreen") and app.device_report is not None)
    await pilot.press("ctrl+n")
    await wait_until(pilot, lambda: on_screen(app, "ConfigScreen"))
    await _edit(pilot, app, "num_train_epochs", "8")  # hundreds of steps: long enough to be killed half-way
    await _edit(pilot, app, "save_steps", "5")
    await pilot.press("ctrl+n")
    await wait_until(pilot, lambda: on_screen(app, "ConfirmTable"))
    await pilot.press("y")
    await wait_until(pilot, lambda: app.state.launched, what="launch")


async def test_killed_training_resumes_from_a_checkpoint_then_reattaches(workspace):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await _launch_long_run(pilot, app)
        run = RunDir(workspace / "lf_runs" / app.state.run_id)
        output_dir = app.state.output_dir
        await wait_until(pilot, lambda: find_complete_checkpoints(output_dir), timeout=180, what="a checkpoint")
        status = run.read_status()
        assert status.state == "running" and status.step < status.total_steps
        planned = status.total_steps
        os.killpg(status.pid, signal.SIGKILL)  # the run's own session: the training process and its children
        await wait_until(pilot, lambda: app.screen.status.state == "failed", timeout=30, what="failure seen")
        assert "resume" in messages(app)
        keys = str(app.screen.query_one("#keyhelp").render())
        assert "r resume" in keys and "stop" not in keys and "continue" not in keys
        await pilot.press("ctrl+q")
    killed_at = max(int(p.name.split("-")[1]) for p in find_complete_checkpoints(output_dir))

    again = make_app(workspace, resume=app.state.run_id)
    async with again.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: on_screen(again, "TrainScreen") and again.screen.status.state ==
                         "failed", what="reopened on the failed run")
        assert "newest complete checkpoint" in messages(again)
        await pilot.press("r")
        await wait_until(pilot, lambda: again.screen.status.state == "running", timeout=60, what="resumed")
        await pilot.press("ctrl+q")  # the run goes on without the TUI
    assert run.read_status().state in ("running", "completed")

    third = make_app(workspace, resume=app.state.run_id)
    async with third.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: on_screen(third, "TrainScreen"))
        assert third.resume_action in ("reattach", "after_training")
        if third.resume_action == "reattach":
            await wait_until(pilot, lambda: third.screen.status.state == "completed", timeout=300,
                             what="completion")
    status = run.read_status()
    assert status.state == "completed" and status.step == status.total_steps == planned
    events = run.read_events()
    kinds = [e["event"] for e in events]
    assert "resume_requested" in kinds and kinds.count("launched") == 2
    resumed = next(e for e in events if e["event"] == "resumed")
    assert resumed["step"] == killed_at  # continued from the newest complete checkpoint, not from step 0
    assert json.loads((run.path / "state.json").read_text())["launched"] is True


async def test_stop_asks_first_then_saves_and_can_resume(workspace):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await _launch_long_run(pilot, app)
        await wait_until(pilot, lambda: (app.screen.status.step or 0) >= 2, timeout=180, what="steps")
        await pilot.press("s")
        await wait_until(pilot, lambda: on_screen(app, "ConfirmDialog"), what="stop confirmation")
        assert "y yes" in str(app.screen.query_one("KeyHelp").render())  # the keys are shown (No has the focus)
        await pilot.press("n")  # changed their mind: nothing happens, and the screen says so
        await wait_until(pilot, lambda: on_screen(app, "TrainScreen"))
        assert app.screen.status.state == "running" and "Not stopped" in messages(app)
        assert "s stop" in str(app.screen.query_one("#keyhelp").render())
        await pilot.press("s")
        await wait_until(pilot, lambda: on_screen(app, "ConfirmDialog"))
        await pilot.press("y")
        await wait_until(pilot, lambda: on_screen(app, "TrainScreen") and app.screen.status.state == "stopped",
                         timeout=120, what="stopped")
        assert "resume" in messages(app)
        await pilot.press("ctrl+n")  # a stopped run is not "done"
        await wait_until(pilot, lambda: "once it has completed" in messages(app), timeout=10, what="the refusal")
        assert on_screen(app, "TrainScreen")
    run = RunDir(workspace / "lf_runs" / app.state.run_id)
    assert run.read_status().state == "stopped"
    assert find_complete_checkpoints(app.state.output_dir)  # stopping saved a checkpoint to resume from
