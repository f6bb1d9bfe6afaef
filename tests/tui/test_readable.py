"""What a new user reads at 80x24 is whole, or readable with the whole a key away, and says what is true:

- the run id on the board (typed back for --resume), whole over lines;
- paths in the config stage's parameter table, on one line with their file name; the edit dialog holds them whole;
- the runs named in the compare view's legend;
- a row count (val_size) as the user writes it;
- an export's bar, short of full until the export has ended;
- the training log: a tqdm bar as its words, no fragment of it folded onto a line of its own;
- on a CPU with bf16 units, the device stage names them and what bf16: true does there.
"""

from pilot_helpers import (FIXED_TIME, SIZE, answer_preflight_at_once, make_app, messages, on_screen, wait_until,
                           walk_to, walk_to_config)


def board_lines(app) -> list[str]:
    from assistant.tui.widgets.board import ProgressBoard

    return str(app.screen.query_one(ProgressBoard).render()).splitlines()


async def test_the_board_shows_the_whole_run_id_within_its_width(workspace, monkeypatch):
    answer_preflight_at_once(monkeypatch)
    app = make_app(workspace, now=FIXED_TIME)
    async with app.run_test(size=SIZE) as pilot:
        await walk_to(pilot, app, "GpuScreen")  # the model is chosen: the id names it
        run_id = app.state.run_id
        assert len(run_id) > 21 and run_id.startswith("lf-tiny-qwen3_")
        board = app.screen.query_one("#board")
        lines = board_lines(app)
        assert all(len(line) <= board.content_size.width for line in lines), lines
        start = lines.index("Run") + 1
        shown = lines[start:start + 3]
        assert run_id in ["".join(shown[:count]) for count in (1, 2, 3)], shown  # whole, over lines


async def test_config_paths_take_one_line_keeping_the_file_name_and_edit_shows_them_whole(workspace, monkeypatch):
    from pathlib import Path

    from textual.widgets import Input

    answer_preflight_at_once(monkeypatch)
    app = make_app(workspace, now=FIXED_TIME)
    async with app.run_test(size=SIZE) as pilot:
        await walk_to_config(pilot, app)
        await pilot.press("a")  # every key: output_dir's folder name is wider than the value column
        await pilot.pause(0.2)
        table, config = app.screen.query_one("#params"), app.screen.built.config
        value_width = list(table.columns.values())[-1].width
        for key in ("model_name_or_path", "output_dir"):
            index = table.get_row_index(key)
            shown = str(table.get_row_at(index)[1])
            assert table.rows[table.coordinate_to_cell_key((index, 0)).row_key].height == 1, (key, shown)
            assert len(shown) <= value_width and "…" in shown, shown
            name = Path(config[key]).name
            assert shown.endswith(name if len(name) < value_width else name[-(value_width - 1):]), shown
        table.focus()
        table.move_cursor(row=table.get_row_index("output_dir"))
        await pilot.press("enter")
        await wait_until(pilot, lambda: on_screen(app, "EditValue"), what="the edit dialog")
        assert app.screen.query_one("#edit-value", Input).value == config["output_dir"]  # the whole path


def _run(workspace, run_id: str, losses: list[float]) -> None:
    from engine.rundir import RunDir

    run = RunDir(workspace / "lf_runs" / run_id)
    run.path.mkdir(parents=True)
    run.update_status(state="completed", stage="sft", model="Qwen/Qwen3-4B-Instruct-2507", method="lora",
                      step=len(losses), total_steps=len(losses))
    for step, loss in enumerate(losses, start=1):
        run.append_metric({"step": step, "loss": loss})


async def test_the_compare_legend_names_both_runs_whole_within_80_columns(workspace):
    ids = ["qwen3-4b-instruct-2507_lora_20260101_100000", "qwen3-4b-instruct-2507_lora_20260101_110000"]
    _run(workspace, ids[0], [3.0, 2.5, 2.0, 1.5])
    _run(workspace, ids[1], [3.1, 2.9, 2.8, 2.7])
    app = make_app(workspace, review=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: on_screen(app, "RunsScreen"), what="the runs")
        await pilot.press("space", "down", "space", "c")
        await wait_until(pilot, lambda: on_screen(app, "CompareScreen"), what="the comparison")
        await pilot.pause(0.2)
        chart = app.screen.query_one("#chart")
        lines = str(chart.render()).splitlines()
        assert all(len(line) <= chart.content_size.width for line in lines), lines[:3]
        assert len(lines) <= chart.content_size.height  # the step axis under the plot is still there
        legend = " ".join(lines[:2])
        assert all(f"A {run_id}" in legend or f"B {run_id}" in legend for run_id in ids), lines[:2]


async def test_a_held_out_row_count_reads_as_a_whole_number(workspace, monkeypatch):
    """val_size 6 (six rows held out) is held as 6.0; shown as 6, as it is written, where 6.0 read as a share."""
    from textual.widgets import Input, Static

    answer_preflight_at_once(monkeypatch)
    app = make_app(workspace, now=FIXED_TIME)
    async with app.run_test(size=SIZE) as pilot:
        await walk_to_config(pilot, app)
        assert app.screen.built.config["val_size"] == 6.0
        diff = str(app.screen.query_one("#diff", Static).render())
        assert "val_size: 0.0 → 6\n" in diff, diff
        await pilot.press("a")
        await pilot.pause(0.2)
        table = app.screen.query_one("#params")
        assert str(table.get_row_at(table.get_row_index("val_size"))[1]) == "6"
        table.focus()
        table.move_cursor(row=table.get_row_index("val_size"))
        await pilot.press("enter")
        await wait_until(pilot, lambda: on_screen(app, "EditValue"), what="the edit dialog")
        assert app.screen.query_one("#edit-value", Input).value == "6"


async def test_the_export_bar_is_not_full_while_its_last_step_runs(workspace, monkeypatch):
    """The export announces each step as it begins (progress 2/2 while writing): the bar shows the steps done."""
    import sys

    from textual.widgets import ProgressBar

    from assistant.wizard.stages import export
    from assistant.wizard.state import new_state, save_state
    from engine.config import dump_yaml
    from engine.rundir import RunDir

    model = str(workspace / "models" / "lf-tiny-qwen3")
    state = new_state(now=FIXED_TIME).replace(
        workflow="sft", scope="full", execution="run_here", method="lora", model=model, model_path=model,
        stage="export", launched=True, done=["flow", "data", "model", "gpu", "config", "train", "loss", "validate"],
        output_dir=str(workspace / "saves" / "demo"))
    save_state(state, workspace / "lf_runs")
    run = RunDir(workspace / "lf_runs" / state.run_id)
    dump_yaml({"model_name_or_path": model, "template": "qwen", "finetuning_type": "lora",
               "output_dir": state.output_dir}, run.path / "sft.yaml")
    run.update_status(state="completed", stage="sft", output_dir=state.output_dir)
    go_on, target = workspace / "go-on", workspace / "models" / "exported"
    script = (f"import pathlib, time\nprint('progress 2/2 writing the weights', flush=True)\n"
              f"while not pathlib.Path({str(go_on)!r}).exists(): time.sleep(0.05)\n"
              f"print('exported to {target}', flush=True)\n")
    monkeypatch.setattr(export, "export_command", lambda _folder: [sys.executable, "-c", script])
    app = make_app(workspace, resume=state.run_id)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: on_screen(app, "ExportScreen"), what="the export stage")
        app.screen._run()  # what confirming export.yaml starts
        bar = app.screen.query_one("#progress", ProgressBar)
        try:
            await wait_until(pilot, lambda: bar.total == 2, what="the last step begun")
            shown = bar.percentage, messages(app)
        finally:
            go_on.touch()  # the export ends whatever was seen, so the app can close
        assert shown[0] < 1 and "Exporting…" in shown[1], shown
        await wait_until(pilot, lambda: app.state.exported, what="the export's end")
        assert not bar.display and "Exported to models/exported" in str(app.screen.query_one("#export-result").render())


async def test_the_training_log_shows_a_progress_bar_as_words_without_a_fragment(workspace):
    """train.log as the training process writes it: a tqdm bar redrawn with carriage returns among the log lines."""
    from textual.widgets import Log

    from assistant.wizard.state import new_state, save_state
    from engine.rundir import RunDir

    state = new_state(now=FIXED_TIME).replace(workflow="sft", scope="full", execution="run_here", method="lora",
                                              stage="train", launched=True, done=["flow", "data", "model", "gpu",
                                                                                  "config"])
    save_state(state, workspace / "lf_runs")
    run = RunDir(workspace / "lf_runs" / state.run_id)
    run.update_status(state="failed", stage="sft", step=5, total_steps=6, exit_reason="killed")
    bar = "Loading weights: {:>3}%|{}| {}/24 [00:00<00:00, 28055.55it/s]"
    run.log_path.write_text(
        "[2026-01-02 03:04:06] data: 290 rows -> 290 train / 0 eval samples\n"
        + "".join("\r" + bar.format(done * 100 // 24, "█" * (done * 10 // 24) + " " * (10 - done * 10 // 24), done)
                  for done in (0, 12, 24)) + "\n"
        "[2026-01-02 03:04:08] trainable parameters: 32,768 of 852,736 (3.84%)\n"
        "[2026-01-02 03:04:15] step 5/6 loss 8.2859 lr 0.000191 grad_norm 0.777 tok/s 526\n", encoding="utf-8")
    app = make_app(workspace, resume=state.run_id)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: on_screen(app, "TrainScreen") and app.screen.log_lines, what="the log")
        await pilot.pause(0.2)
        log = app.screen.query_one("#log", Log)
        lines = [str(line) for line in log.lines]
        assert "Loading weights: 100% (24/24)" in lines, lines
        assert not any("it/s" in line or "█" in line or line.strip().startswith("[00:") for line in lines), lines


async def test_the_device_stage_names_a_cpus_bf16_units_and_records_them(workspace):
    from engine.devices import DeviceReport

    app = make_app(workspace, detect_devices=lambda: DeviceReport("cpu", [], "none", [], "AMX-BF16"))
    async with app.run_test(size=SIZE) as pilot:
        await walk_to(pilot, app, "GpuScreen")
        await wait_until(pilot, lambda: app.device_report is not None, what="devices")
        advice = app.screen.query_one("#gpu-advice")
        await pilot.pause(0.2)
        said = " ".join(str(advice.render()).split())
        assert "AMX-BF16 units: a config with bf16: true trains in bf16 here" in said, said
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: not on_screen(app, "GpuScreen"), what="leaving the device stage")
        assert app.state.device["platform"] == "cpu" and app.state.device["bf16_units"] == "AMX-BF16"
