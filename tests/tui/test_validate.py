"""The validation stage: once infer.yaml is confirmed the test prompts are shown to check and edit, and the models
answer only on the user's go, the prompts as the user left them."""

import json
import shutil
from datetime import datetime

from pilot_helpers import SIZE, make_app, messages, on_screen, wait_until

from assistant.wizard.state import new_state, save_state
from engine.config import dump_yaml
from engine.rundir import RunDir
from engine.training.setup import write_training_info


def _trained_run(workspace, demo_model_dir) -> str:
    """A finished full fine-tuning run at the validation stage; its result is a copy of the demo model (a whole
    model, as full fine-tuning writes), so validation loads real weights without training first."""
    model, tuned = workspace / "models" / "lf-tiny-qwen3", workspace / "saves" / "lf-tiny-qwen3" / "full" / "sft"
    shutil.copytree(demo_model_dir, tuned)
    state = new_state(now=datetime(2026, 1, 2, 3, 4, 5)).replace(
        workflow="sft", scope="full", execution="run_here", method="full", data_source="builtin",
        dataset_dir=str(workspace / "data"), datasets=["alpaca_demo"], model="lf-tiny-qwen3", model_path=str(model),
        family="demo", template="qwen", device={"platform": "cpu", "indices": []}, stage="validate",
        done=["flow", "data", "model", "gpu", "config", "train", "loss"], launched=True, output_dir=str(tuned))
    save_state(state, workspace / "lf_runs")
    run = RunDir(workspace / "lf_runs" / state.run_id)
    dump_yaml({"stage": "sft", "model_name_or_path": str(model), "template": "qwen", "finetuning_type": "full",
               "dataset": "alpaca_demo", "dataset_dir": str(workspace / "data"), "output_dir": str(tuned)},
              run.path / "sft.yaml")
    run.update_status(state="completed", stage="sft", step=4, total_steps=4, output_dir=str(tuned))
    write_training_info(tuned, base_model=str(model), method="full", template_name="qwen", stage="sft",
                        run_id=state.run_id)
    return state.run_id


async def test_the_prompts_are_answered_only_on_the_users_go_as_edited(workspace, demo_model_dir):
    run_id = _trained_run(workspace, demo_model_dir)
    run = workspace / "lf_runs" / run_id
    app = make_app(workspace, resume=run_id)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: on_screen(app, "ConfirmTable"), what="the infer.yaml table")
        await pilot.press("enter")
        await wait_until(pilot, lambda: on_screen(app, "ValidateScreen") and (run / "infer.yaml").is_file())
        await pilot.pause(1.0)  # time enough for an answer to start, were it to start unasked
        assert not (run / "prompts.jsonl").exists() and not (run / "validate.log").exists()  # nothing asked yet
        assert not app.screen.query_one("#progress").display and not app.screen.running
        prompts, answer = app.screen.query_one("#prompts"), app.screen.query_one("#run")
        assert prompts.text.splitlines() == app.screen.stage.settings["default_prompts"] and prompts.region.height
        await wait_until(pilot, lambda: app.focused is answer, timeout=5, what="the answer button focused")
        assert str(answer.label) == "Answer these prompts" and answer.region.height
        assert "Shift+Tab to edit" in messages(app)
        await pilot.press("shift+tab")  # into the prompts: the user's own replace the suggested ones
        assert app.focused is prompts
        prompts.text = ""
        await pilot.press(*"Who made you?")
        await pilot.press("ctrl+n")  # the go (Enter on the button does the same)
        await wait_until(pilot, lambda: app.state.validated, timeout=180, what="the answers")
        answers = [json.loads(line) for line in (run / "validation.jsonl").read_text().splitlines()]
        assert [row["prompt"] for row in answers] == ["Who made you?"] and app.state.prompts == ["Who made you?"]
        assert str(answer.label) == "Run again"
        # Button.focus() takes effect on the next message the app handles, not at once
        await wait_until(pilot, lambda: app.focused is app.screen.query_one("#continue"), what="Continue focused")
