"""What a new user reads at 80x24 is whole, or readable with the whole a key away: the run id on the board (typed
back for --resume), paths in the config stage's parameter table."""

from pilot_helpers import FIXED_TIME, SIZE, answer_preflight_at_once, make_app, on_screen, wait_until, walk_to


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
        await walk_to(pilot, app, "ConfigScreen")
        await wait_until(pilot, lambda: app.screen.built is not None, what="config built")
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
