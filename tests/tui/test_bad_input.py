"""Bad input through the TUI: each gets a clear message and can be corrected on the spot, without restarting."""

import json

from pilot_helpers import SIZE, busy_gpus, make_app, messages, on_screen, wait_until, walk_to


async def test_malformed_dataset_is_explained_then_a_converted_copy_is_used(workspace):
    broken = workspace / "chats.jsonl"
    rows = [{"conversations": [{"from": "human", "value": "hi"}, {"from": "bot", "value": "hello"}]},
            {"conversations": [{"from": "human", "value": "2+2?"}]}]
    broken.write_text("\n".join(json.dumps(r) for r in rows) + "\n{oops\n", encoding="utf-8")
    original = broken.read_bytes()
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await walk_to(pilot, app, "DataScreen")
        app.screen.query_one("#q-data_source").choose("custom")
        await pilot.pause()
        path_field = app.screen.query_one("#custom-path")
        path_field.focus()
        await pilot.press(*"nowhere.jsonl", "enter")
        await wait_until(pilot, lambda: "does not exist" in str(app.screen.query_one("#check-result").render()))
        path_field.value = str(broken)
        await pilot.press("enter")
        await wait_until(pilot, lambda: "error" in str(app.screen.query_one("#check-result").render()),
                         what="problems listed")
        report = str(app.screen.query_one("#check-result").render())
        assert "line 3" in report and "row 2" in report
        assert app.screen.query_one("#convert").value is True  # errors: a converted copy is proposed
        app.screen.query_one("#custom-name").value = "chats"
        app.screen.query_one("#add").press()
        await wait_until(pilot, lambda: "chats" in app.state.datasets, what="registered")
        assert broken.read_bytes() == original
        info = json.loads((workspace / "data" / "dataset_info.json").read_text())
        assert info["chats"]["file_name"] == "chats.json"
        await wait_until(pilot, lambda: "chats" in app.screen.query_one("#datasets").selected, what="selected")
        await pilot.pause()
        # what Add did stays on screen once the listing selects the new dataset: where it went and what changed
        said = messages(app)
        assert "chats" in said and "renamed" in said and app.screen.query_one("#messages-box").display, said
        # the recommended identity, selected only because we recommended it, gives way to the user's own file
        assert list(app.screen.query_one("#datasets").selected) == ["chats"] and app.state.datasets == ["chats"]


async def test_unsupported_model_and_missing_path_can_be_corrected(workspace):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await walk_to(pilot, app, "ModelScreen")
        field = app.screen.query_one("#model-input")
        field.value = "someone/unheard-of-model"
        field.focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: "template" in messages(app), what="unsupported message")
        assert app.screen.query_one("#template-box").display
        await pilot.press("ctrl+n")  # cannot go on with an unresolved model: it is checked again, and refused
        await wait_until(pilot, lambda: not app.screen.checking and not app.screen.continue_when_resolved,
                         what="the check answered")
        assert on_screen(app, "ModelScreen") and "template" in messages(app)
        template = app.screen.query_one("#template-input")
        template.focus()
        await pilot.press(*"qwen3", "enter")
        await wait_until(pilot, lambda: app.state.template == "qwen3" and app.state.family == "custom")
        await wait_until(pilot, lambda: on_screen(app, "GpuScreen"), what="Enter on the template goes on")
        await pilot.press("escape")
        await wait_until(pilot, lambda: on_screen(app, "ModelScreen"), what="back to the model")
        field = app.screen.query_one("#model-input")
        field.value = "./models/not-here"
        field.focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: "does not exist" in messages(app), what="missing path message")
        # Ctrl+N on the failed path checks it again and says why once more: never "checking..." for ever
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: not app.screen.checking and not app.screen.continue_when_resolved,
                         what="the second check answered")
        assert on_screen(app, "ModelScreen") and "does not exist" in messages(app)
        field.value = "./models/lf-tiny-qwen3"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.state.family == "demo" and app.state.model_path)
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "GpuScreen"))


async def test_busy_gpus_are_never_chosen_silently(workspace):
    app = make_app(workspace, detect_devices=busy_gpus)
    async with app.run_test(size=SIZE) as pilot:
        await walk_to(pilot, app, "GpuScreen")
        await wait_until(pilot, lambda: app.device_report is not None, what="detection")
        listing = str(app.screen.query_one("#gpu-list").render())
        assert "70.0/80 GiB, 99% — busy" in listing and "pid 4242" in listing
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: "detect again" in messages(app), timeout=10, what="the busy cards refused")
        assert on_screen(app, "GpuScreen")
        app.screen.query_one("#q-busy_action").choose("share")
        await pilot.pause()
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: "index" in messages(app), timeout=10, what="an index asked for")
        assert on_screen(app, "GpuScreen")
        app.screen.query_one("#indices").value = "1"
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "ConfigScreen"), what="config screen")
        device = json.loads((workspace / "lf_runs" / app.state.run_id / "device.json").read_text())
        assert device["indices"] == [1] and device["env"] == {"CUDA_VISIBLE_DEVICES": "1"}
        assert app.state.device["mode"] == "share"


async def test_esc_on_the_placeholder_values_stays_on_the_data_stage(workspace):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: on_screen(app, "FlowScreen"))
        await pilot.press("enter")
        await wait_until(pilot, lambda: on_screen(app, "DataScreen") and app.screen.counts, what="data listed")
        await pilot.press("ctrl+n")  # identity, the recommended data, has {{name}} and {{author}}
        await wait_until(pilot, lambda: on_screen(app, "AskValues"), what="placeholder values asked")
        await pilot.press("escape")
        await wait_until(pilot, lambda: on_screen(app, "DataScreen"), what="back on the data stage")
        await pilot.pause()
        assert on_screen(app, "DataScreen") and "still holds placeholders" in messages(app)
        assert not app.state.filled
        await pilot.press("ctrl+n")  # continuing asks again
        await wait_until(pilot, lambda: on_screen(app, "AskValues"), what="asked again")
