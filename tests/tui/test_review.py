"""The runs review: the list, one run's record, and two runs compared (config diff, both curves on one chart)."""

from datetime import datetime

from pilot_helpers import SIZE, make_app, on_screen, wait_until

from assistant.wizard.state import new_state, save_state
from engine.config import dump_yaml
from engine.rundir import RunDir


def _finished_run(workspace, when, rank, losses):
    model = "/work/cache/models/SmolLM2-135M-Instruct"  # a long local path, as real runs have
    state = new_state(now=when).replace(model=model, method="lora", stage="summary", launched=True,
                                        diff=[{"parameter": "lora_rank", "default": 8, "new": rank,
                                               "reason": "user-specified"}])
    save_state(state, workspace / "lf_runs")
    run = RunDir(workspace / "lf_runs" / state.run_id)
    dump_yaml({"finetuning_type": "lora", "lora_rank": rank, "template": "qwen", "logging_steps": 2,
               "output_dir": f"/work/projects/acme/saves/SmolLM2-135M-Instruct/lora/sft_rank{rank}_{when:%H%M%S}"},
              run.path / "sft.yaml")
    run.update_status(state="completed", stage="sft", model=model, method="lora", step=len(losses),
                      total_steps=len(losses), started_at=when.timestamp())
    for step, loss in enumerate(losses, start=1):
        run.append_metric({"step": step, "loss": loss})
    (run.path / "validation.jsonl").write_text('{"prompt": "hi", "base": "x", "tuned": "Hello, I am Ada"}\n')
    return state.run_id


async def test_review_lists_opens_and_compares_runs(workspace):
    first = _finished_run(workspace, datetime(2026, 1, 1, 10), 16, [3.0, 2.5, 2.0, 1.5])
    second = _finished_run(workspace, datetime(2026, 1, 1, 11), 8, [3.1, 2.9, 2.8, 2.7])
    app = make_app(workspace, review=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: on_screen(app, "RunsScreen"))
        table = app.screen.query_one("#runs")
        assert table.row_count == 2
        assert table.virtual_size.width <= SIZE[0]  # 80 columns: the id whole, what it already says left out
        ids = [app.screen.rows[i].run_id for i in range(2)]
        assert set(ids) == {first, second}
        await pilot.press("enter")
        await wait_until(pilot, lambda: on_screen(app, "RunScreen"))
        facts = str(app.screen.query_one("#answers").render())
        assert "Hello, I am Ada" in facts
        assert app.screen.query_one("#config").row_count == 5
        assert "each training point: the mean of 2 steps" in str(app.screen.query_one("#chart").render())
        assert app.screen.query_one("#config").virtual_size.width <= SIZE[0]
        diff = str(app.screen.query_one("#diff").render())
        assert "lora_rank" in diff and "user-specified" in diff  # as the config stage lists it
        await pilot.press("escape")
        await wait_until(pilot, lambda: on_screen(app, "RunsScreen"))
        await pilot.press("space", "down", "space", "c")
        await wait_until(pilot, lambda: on_screen(app, "CompareScreen"))
        difference = app.screen.query_one("#difference")
        assert difference.row_count == 2 and difference.virtual_size.width <= SIZE[0]  # long paths fold
        assert [str(c) for c in difference.get_row_at(0)][0] == "lora_rank"
        chart = str(app.screen.query_one("#chart").render())
        assert "A " in chart and "B " in chart  # two labelled series on one chart
        await pilot.press("escape", "escape")
    assert app.return_code in (0, None)


async def test_f2_lists_a_session_left_before_training_with_its_stage_and_r_reopens_it(workspace):
    """F2 from a new wizard: a session left at the data stage is listed as such and can be gone back to."""
    finished = _finished_run(workspace, datetime(2026, 1, 1, 10), 16, [3.0, 2.0])
    left = new_state(now=datetime(2026, 1, 1, 12)).replace(stage="data", done=["flow"], workflow="sft",
                                                           scope="train")
    save_state(left, workspace / "lf_runs")  # left before training: no status.json, no config
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: on_screen(app, "FlowScreen"))
        await pilot.press("f2")
        await wait_until(pilot, lambda: on_screen(app, "RunsScreen"))
        rows = {row.run_id: row for row in app.screen.rows}
        assert set(rows) == {finished, left.run_id}
        assert rows[left.run_id].stage == "data" and rows[finished].stage is None
        table = app.screen.query_one("#runs")
        cells = [str(cell) for cell in table.get_row(left.run_id)]
        assert "not trained: Data" in cells  # its stage, where it said "pending"
        assert "r reopen" in str(app.screen.query_one("KeyHelp").render())
        table.move_cursor(row=[r.run_id for r in app.screen.rows].index(left.run_id))
        await pilot.press("r")
        await wait_until(pilot, lambda: on_screen(app, "DataScreen"), what="the session's own stage")
        assert app.state.run_id == left.run_id and app.state.done == ["flow"]
        assert len(app.screen_stack) == 2  # the new wizard's screens and the review are gone
        await pilot.press("ctrl+q")
    assert left.run_id in (app.exit_hint or "")  # quitting names the session it was in


async def test_runs_tui_reopens_a_wizard_session_and_names_a_plain_run_it_cannot(workspace):
    plain = RunDir(workspace / "lf_runs" / "cli_run_20260101_090000")
    plain.update_status(state="failed", stage="sft", step=3, total_steps=9)  # `lf-assistant train`: no state.json
    left = new_state(now=datetime(2026, 1, 1, 12)).replace(stage="data", done=["flow"], workflow="sft",
                                                           scope="train")
    save_state(left, workspace / "lf_runs")
    app = make_app(workspace, review=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: on_screen(app, "RunsScreen"))
        ids = [r.run_id for r in app.screen.rows]
        app.screen.query_one("#runs").move_cursor(row=ids.index(plain.run_id))
        await pilot.press("r")
        note = str(app.screen.query_one("#review-note").render())
        assert "resume-train cli_run_20260101_090000" in note and on_screen(app, "RunsScreen")
        app.screen.query_one("#runs").move_cursor(row=ids.index(left.run_id))
        await pilot.press("r")
        await wait_until(pilot, lambda: on_screen(app, "DataScreen"), what="the session's stage")
        assert app.state.run_id == left.run_id
        await pilot.press("ctrl+q")


async def test_a_long_config_and_a_long_comparison_scroll_with_the_keys_at_once(workspace):
    from engine.config import read_yaml

    runs = [_finished_run(workspace, datetime(2026, 1, 1, 10 + n), 8 * (n + 1), [3.0, 2.5, 2.0]) for n in range(2)]
    for factor, run_id in enumerate(runs, start=1):  # thirty keys more that differ: taller than the screen
        path = workspace / "lf_runs" / run_id / "sft.yaml"
        dump_yaml(dict(read_yaml(path), **{f"key_{i:02d}": factor * i for i in range(1, 31)}), path)
    app = make_app(workspace, review=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: on_screen(app, "RunsScreen"))
        await pilot.press("enter")
        await wait_until(pilot, lambda: on_screen(app, "RunScreen"))
        await _end_in_view_with_keys(pilot, app, "#config", "key_30")
        await pilot.press("escape")
        await wait_until(pilot, lambda: on_screen(app, "RunsScreen"))
        await pilot.press("space", "down", "space", "c")
        await wait_until(pilot, lambda: on_screen(app, "CompareScreen"))
        await _end_in_view_with_keys(pilot, app, "#difference", "key_30")


async def _end_in_view_with_keys(pilot, app, table_id: str, last: str) -> None:
    """Page Down, with no Tab first, brings the table's last row onto the screen."""
    await pilot.pause()
    table = app.screen.query_one(table_id)
    assert str(table.get_row_at(table.row_count - 1)[0]) == last and last not in app.export_screenshot()
    for _ in range(6):
        await pilot.press("pagedown")
    await pilot.pause()
    assert last in app.export_screenshot()
    assert table.scroll_y == 0  # the page scrolled, not the table inside it


async def test_the_comparison_gives_a_and_b_equal_columns_and_long_paths_one_line_each(workspace):
    first = _finished_run(workspace, datetime(2026, 1, 1, 10), 16, [3.0, 2.5])
    second = _finished_run(workspace, datetime(2026, 1, 1, 11), 8, [3.1, 2.9])
    app = make_app(workspace, review=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: on_screen(app, "RunsScreen"))
        await pilot.press("space", "down", "space", "c")
        await wait_until(pilot, lambda: on_screen(app, "CompareScreen"))
        await pilot.pause()
        table = app.screen.query_one("#difference")
        assert table.virtual_size.width <= SIZE[0]
        parameter, a, b = (column.width for column in table.columns.values())
        assert a == b >= 20, (parameter, a, b)
        keys = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        row = keys.index("output_dir")
        assert list(table.rows.values())[row].height == 1  # one line, not folded
        shown = [str(cell) for cell in table.get_row_at(row)[1:]]
        assert all(cell.startswith("/work/") and "…" in cell for cell in shown), shown
        assert {cell.rsplit("/", 1)[-1] for cell in shown} == {"sft_rank16_100000", "sft_rank8_110000"}  # the ends
        whole = str(app.screen.query_one("#whole-values").render())
        assert "Shortened above, in full:" in whole
        for run_id, rank, when in ((first, 16, "100000"), (second, 8, "110000")):
            assert f"/work/projects/acme/saves/SmolLM2-135M-Instruct/lora/sft_rank{rank}_{when}" in \
                whole.replace("\n", ""), whole
        assert "lora_rank" not in whole  # short values are whole in the table already
