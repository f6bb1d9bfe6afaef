"""Keys at 80x24 do what the screen shows: one Enter where one is asked for, arrows that scroll what is shown, a
key help that lists the keys that work."""

from pilot_helpers import SIZE, answer_preflight_at_once, make_app, on_screen, wait_until, walk_to, walk_to_config


async def _to_data(pilot, app) -> None:
    await wait_until(pilot, lambda: on_screen(app, "FlowScreen"))
    await pilot.press("enter")
    await wait_until(pilot, lambda: on_screen(app, "DataScreen") and app.screen.counts, what="data listed")


async def test_one_enter_sets_the_placeholder_values(workspace):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await _to_data(pilot, app)
        await pilot.press("enter")  # identity, the recommended data, has {{author}} and {{name}}
        await wait_until(pilot, lambda: on_screen(app, "AskValues"), what="placeholder values asked")
        author, name = app.screen.query_one("#value-0"), app.screen.query_one("#value-1")
        # widget.focus() takes effect through call_later: wait for it rather than assert it at once
        await wait_until(pilot, lambda: app.focused is author, timeout=5, what="the first value focused")
        assert (author.value, name.value) == ("Acme Labs", "Nova")
        name.value = ""
        await pilot.press("enter")  # a field is empty: Enter goes to it instead of setting an empty name
        await wait_until(pilot, lambda: app.focused is name, timeout=5, what="the empty field focused")
        assert on_screen(app, "AskValues")
        await pilot.press(*"Ada", "shift+tab")
        assert app.focused is author
        await pilot.press("enter")  # every field has a value: one Enter sets them, from whichever field
        await wait_until(pilot, lambda: on_screen(app, "ModelScreen"), timeout=15, what="the values set")
        assert app.state.datasets == ["identity_custom"]
        assert app.state.filled["identity_custom"]["values"] == {"author": "Acme Labs", "name": "Ada"}


async def test_enter_on_the_own_files_rows_chooses_and_never_ticks_the_conversion(workspace):
    mine = workspace / "mine.jsonl"
    mine.write_text('{"instruction": "hi", "output": "hello"}\n{"instruction": "2+2?", "output": "4"}\n')
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await _to_data(pilot, app)
        await pilot.press("shift+tab", "shift+tab", "shift+tab")
        assert app.focused.id == "data_source-set"
        await pilot.press("down", "enter")  # Enter on "My own files" chooses it
        assert app.screen.query_one("#q-data_source").value == "custom" and app.screen.query_one("#custom").display
        app.screen.query_one("#custom-path").focus()
        await pilot.press(*str(mine), "enter")
        await wait_until(pilot, lambda: app.screen.query_one("#onboard-row").display, what="the file checked")
        convert = app.screen.query_one("#convert")
        assert convert.value is False  # a clean file: copied as it is
        await pilot.press("tab", "tab", "tab")  # past Check and the name, to the box
        assert app.focused is convert
        await pilot.press("enter")  # on the box's row, Enter adds the file; the box stays as it was
        await wait_until(pilot, lambda: "mine" in app.state.datasets, timeout=15, what="the file added")
        assert convert.value is False and not app.state.onboarded[-1]["converted"]
        await pilot.press("space")  # Space still ticks it
        assert convert.value is True


async def test_the_parameters_and_the_diff_scroll_with_the_keys_while_continue_has_the_focus(workspace, monkeypatch):
    answer_preflight_at_once(monkeypatch)
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await walk_to_config(pilot, app)
        await pilot.press("a")  # every parameter: taller than the area
        await pilot.pause()
        table, diff, go_on = (app.screen.query_one(name) for name in ("#params", "#diff-view", "#continue"))
        await wait_until(pilot, lambda: app.focused is go_on, timeout=5, what="Continue focused")
        assert table.max_scroll_y > 0
        await pilot.press("pagedown", "down")
        await pilot.pause()
        assert table.scroll_y > 0 and table.cursor_row == 0 and app.focused is go_on
        await pilot.press("d")
        await pilot.pause()
        go_on.focus()  # back on Continue (Enter goes on), the diff still shown
        await wait_until(pilot, lambda: app.focused is go_on, timeout=5, what="Continue focused again")
        assert diff.max_scroll_y > 0 and diff.scroll_y == 0
        await pilot.press("end")
        await pilot.pause()
        assert diff.scroll_y == diff.max_scroll_y and app.focused is go_on
        await pilot.press("enter")  # and Enter still goes on
        await wait_until(pilot, lambda: on_screen(app, "ConfirmTable"), timeout=20, what="the sft.yaml table")


async def test_the_training_screen_lists_f2_and_esc_and_esc_goes_back_before_anything_is_written(workspace,
                                                                                                monkeypatch):
    from assistant.tui.screens.train import TrainScreen

    answer_preflight_at_once(monkeypatch)
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await walk_to(pilot, app, "ConfigScreen")
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "ConfirmTable"), what="the sft.yaml table")
        await pilot.press("n")  # not written: the training screen waits
        await wait_until(pilot, lambda: on_screen(app, "TrainScreen"))
        keys = str(app.screen.query_one("#keyhelp").render())
        assert "Esc back" in keys and "F2 runs" in keys
        await pilot.press("f2")
        await wait_until(pilot, lambda: on_screen(app, "RunsScreen"), what="the runs review")
        await pilot.press("escape")
        await wait_until(pilot, lambda: on_screen(app, "TrainScreen"), what="back from the review")
        await pilot.press("escape")
        await wait_until(pilot, lambda: on_screen(app, "ConfigScreen"), timeout=10, what="back to the config")
        assert app.state.stage == "config" and not (workspace / "lf_runs" / app.state.run_id / "sft.yaml").exists()
    # once the config is written the keys follow the run, F2 with each of them
    for keys in (TrainScreen.WRITTEN_KEYS, TrainScreen.RUNNING_KEYS, TrainScreen.COMPLETED_KEYS,
                 TrainScreen.RESUMABLE_KEYS):
        assert ("F2", "key.runs") in keys and "Esc" not in dict(keys)
