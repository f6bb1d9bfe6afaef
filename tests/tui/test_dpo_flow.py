"""Preference training through the TUI: DPO picked at stage 0, pairs only at the data stage, the DPO config, a
LoRA run on the demo model that ends completed with its reward metrics; SFT-only data is refused."""

import json

import yaml
from pilot_helpers import SIZE, choose_datasets, make_app, messages, on_screen, wait_until
from textual.widgets import RadioButton, Static


def _text(app, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


async def _choose_dpo(pilot, app, *, sft_only: bool) -> None:
    await pilot.press("down", "enter")  # workflow: SFT -> DPO; the screen is redrawn from skills/dpo
    await wait_until(pilot, lambda: app.skill.name == "dpo" and app.screen.query("#workflow--dpo"), what="dpo skill")
    await pilot.pause(0.2)
    chosen = app.screen.query_one("#workflow--dpo", RadioButton)
    assert chosen.value and "●" in str(chosen.render())  # marked by a symbol, not colour alone
    assert "●" not in str(app.screen.query_one("#workflow--sft", RadioButton).render())
    assert "(recommended)" in str(app.screen.query_one("#method--lora", RadioButton).label)
    if sft_only:
        await pilot.press("tab", "up", "enter")  # scope: training only (no validation / export)
    await pilot.press("ctrl+n")
    await wait_until(pilot, lambda: on_screen(app, "DataScreen") and app.screen.folder is not None, what="data")
    assert app.state.workflow == "dpo"
    assert _text(app, "#stage-title").startswith("Stage 1 · Preference data")


async def test_dpo_walk_on_the_demo_model_completes_with_reward_metrics(workspace):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await _choose_dpo(pilot, app, sft_only=True)
        await wait_until(pilot, lambda: app.screen.counts, what="row counts")
        assert [row.name for row in app.screen.listing] == ["dpo_demo", "rm_demo"]
        assert "alpaca_demo" in _text(app, "#hidden-note") and "hidden" in _text(app, "#hidden-note")
        assert list(app.screen.query_one("#datasets").selected) == ["dpo_demo"]  # the recommended pairs
        app.screen.query_one("#datasets").focus()
        await wait_until(pilot, lambda: "✗ rejected" in _text(app, "#preview"), what="pair preview")
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "ModelScreen") and app.state.model_path, what="model")
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "GpuScreen") and app.device_report is not None)
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "ConfigScreen") and app.screen.built is not None)
        screen = app.screen
        assert screen.built.config["stage"] == "dpo" and screen.built.total_steps == 10
        assert "qwen3_lora_dpo.yaml" in _text(app, "#example")
        assert "Diff vs. example" in _text(app, "#view-tabs")
        await pilot.press("d")  # the diff, one key away
        await pilot.pause(0.1)
        assert screen.view == "diff-view" and screen.query_one("#diff").region.height > 5
        rate = {row.parameter: row for row in screen.built.diff}["learning_rate"]
        assert (rate.default, rate.new) == (5e-6, 3e-3) and "lr ~1e-3" in rate.reason
        await pilot.press("d")
        assert screen.view == "params"
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "ConfirmTable"), what="dpo.yaml table")
        dialog = app.screen
        table = dialog.query_one("#confirm-table")
        await wait_until(pilot, lambda: table.row_count > 0, what="the table filled")
        assert "dpo.yaml" in dialog.title_text and table.row_count < len(dialog.rows)
        assert "a shows all" in _text(app, "#folded")
        await pilot.press("a")
        assert table.row_count == len(dialog.rows)
        written = dict(dialog.rows)
        await pilot.press("y")
        await wait_until(pilot, lambda: on_screen(app, "TrainScreen") and app.screen.status.state
                         in ("completed", "failed", "stopped"), timeout=120, what="training to end")
        assert app.screen.status.state == "completed", app.screen.status
        assert "reward acc" in _text(app, "#rewards") and "margin" in _text(app, "#rewards")
        assert "accuracies" in _text(app, "#chart") and "margins (right axis)" in _text(app, "#chart")
        log = app.screen.query_one("#log")
        visible = log.scrollable_content_region.width  # left of the scrollbar: no character hides under it
        assert log.lines and max(len(line) for line in log.lines) <= visible, (visible, log.lines)
        await pilot.press("l")  # the log takes the chart's space
        assert not app.screen.query_one("#chart").display and app.screen.query_one("#log").has_class("full")
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "LossScreen"))
        assert "Reward accuracies" in _text(app, "#loss-info")
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "SummaryScreen"))
        assert "reward accuracies +" in _text(app, "#summary") and "reward margins" in _text(app, "#summary")
    assert "_lora-dpo_" in app.state.run_id
    again = make_app(workspace, resume=app.state.run_id)  # --resume continues under the run's own workflow
    async with again.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: on_screen(again, "SummaryScreen"), what="reopened at the summary")
        assert again.skill.name == "dpo"
    run = workspace / "lf_runs" / app.state.run_id
    config = yaml.safe_load((run / "dpo.yaml").read_text())
    assert config == written and config["stage"] == "dpo" and config["pref_loss"] == "sigmoid"
    assert config["dataset"] == "dpo_demo" and config["learning_rate"] == 3e-3 and not (run / "sft.yaml").exists()
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    logged = [m for m in metrics if "loss" in m and "rewards/accuracies" in m]
    assert len(logged) == 5 and all("rewards/margins" in m and "logps/chosen" in m for m in logged)
    assert logged[-1]["loss"] < logged[0]["loss"]
    assert logged[-1]["rewards/margins"] > logged[0]["rewards/margins"]
    from safetensors.numpy import load_file

    weights = load_file(str(next((workspace / "saves" / "lf-tiny-qwen3" / "lora").glob("dpo_*"))
                            / "adapter_model.safetensors"))
    assert any(abs(v).max() > 0 for k, v in weights.items() if "lora_B" in k)  # B starts at zero


async def test_sft_only_data_is_refused_for_dpo(workspace):
    sft_file = workspace / "answers.json"
    sft_file.write_text(json.dumps([{"instruction": f"q{i}", "output": f"a{i}"} for i in range(3)]), encoding="utf-8")
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await _choose_dpo(pilot, app, sft_only=False)
        await wait_until(pilot, lambda: app.screen.counts, what="row counts")
        choose_datasets(app)
        await pilot.press("ctrl+n")  # nothing selected
        await wait_until(pilot, lambda: "Select at least one dataset" in messages(app), what="refusal")
        app.screen.query_one("#q-data_source").choose("custom")
        app.screen.query_one("#custom-path").focus()
        await pilot.press(*str(sft_file), "enter")
        await wait_until(pilot, lambda: "Not preference data" in _text(app, "#check-result"), what="check")
        result = _text(app, "#check-result")
        assert all(f"row {n}" in result for n in (1, 2, 3)) and "chosen" in result
        assert not app.screen.query_one("#onboard-row").display  # nothing to add: it is not pairs
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: "Select at least one dataset" in messages(app), timeout=10, what="refusal")
        assert on_screen(app, "DataScreen") and app.state.datasets == []
    info = json.loads((workspace / "data" / "dataset_info.json").read_text())
    assert "answers" not in info and sft_file.is_file()
