"""Keys that take several names (report_to, lora_target, ...) are edited on the config stage by picking names in a
list (Space toggles, Enter sets, Esc cancels) or typing them; the names that stand alone (all, none) clear the
others. Keys that take one value keep their single choice or text field."""

import pytest
from pilot_helpers import SIZE, answer_preflight_at_once, make_app, messages, on_screen, wait_until, walk_to_config


@pytest.fixture(autouse=True)
def fixed_preflight(monkeypatch):
    """The pre-flight's real measurement is tested in test_one_key.py; here it answers at once."""
    answer_preflight_at_once(monkeypatch, micro_batch=1)


async def _open(pilot, app, key: str, dialog: str = "EditNames"):
    await pilot.press("e", *key, "enter")
    await wait_until(pilot, lambda: on_screen(app, dialog) and app.screen.key == key, what=f"{dialog} for {key}")
    await pilot.pause()
    return app.screen


def _picked(dialog) -> list[str]:
    return list(dialog.query_one("#edit-names").selected)


def _value(dialog) -> str:
    return dialog.query_one("#edit-value").value


def _note(dialog) -> str:
    note = dialog.query_one("#names-note")
    return str(note.render()) if note.display else ""


async def _toggle(pilot, dialog, name: str) -> None:
    """Move the list's highlight to `name` with the arrows, then Space."""
    names = dialog.query_one("#edit-names")
    target = [str(names.get_option_at_index(i).value) for i in range(names.option_count)].index(name)
    while names.highlighted != target:
        await pilot.press("down" if names.highlighted < target else "up")
    await pilot.press("space")
    await pilot.pause()


def _fits(app, dialog) -> None:
    """Every part of the dialog inside the 80x24 screen, and the key help names its keys."""
    width, height = app.size
    assert (width, height) == SIZE
    for widget in [dialog.query_one(".dialog"), *dialog.query_one(".dialog").children]:
        if widget.display:
            region = widget.region
            assert region.height > 0 and region.right <= width and region.bottom <= height - 1, (widget, region)
    keys = str(dialog.query_one("KeyHelp").render())
    for key in ("Space", "Enter", "Tab", "Esc"):
        assert key in keys, keys


async def _set(pilot, app, key: str, value: str) -> None:
    await pilot.press("enter")
    await wait_until(pilot, lambda: on_screen(app, "ConfigScreen") and app.state.edits.get(key) == value,
                     what=f"{key} set to {value}")
    assert app.screen.built.config[key] == value
    assert "set (user-specified)" in messages(app)


async def test_two_trackers_are_picked_in_the_list_and_set_as_a_comma_list(workspace):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await walk_to_config(pilot, app)
        dialog = await _open(pilot, app, "report_to")
        _fits(app, dialog)
        assert _picked(dialog) == ["none"] and _value(dialog) == "none"  # the current value is picked
        await _toggle(pilot, dialog, "tensorboard")
        assert _picked(dialog) == ["tensorboard"] and "tensorboard replaces none" in _note(dialog)
        await _toggle(pilot, dialog, "wandb")
        assert _picked(dialog) == ["tensorboard", "wandb"] and _value(dialog) == "tensorboard,wandb"
        _fits(app, dialog)  # the note line included
        await _set(pilot, app, "report_to", "tensorboard,wandb")
        dialog = await _open(pilot, app, "report_to")  # opened again: both picked
        assert _picked(dialog) == ["tensorboard", "wandb"]
        await pilot.press("escape")
        await wait_until(pilot, lambda: on_screen(app, "ConfigScreen"))
        assert app.state.edits["report_to"] == "tensorboard,wandb"


async def test_lora_target_offers_the_models_modules_and_all_stands_alone(workspace):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await walk_to_config(pilot, app)
        dialog = await _open(pilot, app, "lora_target")
        _fits(app, dialog)
        options = dialog.query_one("#edit-names")
        names = [str(options.get_option_at_index(i).value) for i in range(options.option_count)]
        assert names[0] == "all" and {"q_proj", "v_proj", "down_proj"} <= set(names)
        assert _picked(dialog) == ["all"]
        await _toggle(pilot, dialog, "q_proj")
        assert _picked(dialog) == ["q_proj"] and "q_proj replaces all" in _note(dialog)
        await _toggle(pilot, dialog, "v_proj")
        assert _picked(dialog) == ["q_proj", "v_proj"] and _value(dialog) == "q_proj,v_proj"
        await _set(pilot, app, "lora_target", "q_proj,v_proj")
        dialog = await _open(pilot, app, "lora_target")
        assert _picked(dialog) == ["q_proj", "v_proj"]
        await _toggle(pilot, dialog, "all")  # all with module names is contradictory: they are cleared, visibly
        assert _picked(dialog) == ["all"] and _value(dialog) == "all"
        assert "all stands alone: q_proj, v_proj cleared" in _note(dialog)
        _fits(app, dialog)
        await _set(pilot, app, "lora_target", "all")


async def test_none_clears_the_trackers_and_names_can_still_be_typed(workspace):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await walk_to_config(pilot, app)
        dialog = await _open(pilot, app, "report_to")
        await _toggle(pilot, dialog, "tensorboard")
        await _toggle(pilot, dialog, "none")
        assert _picked(dialog) == ["none"] and "none stands alone: tensorboard cleared" in _note(dialog)
        await pilot.press("escape")  # Esc cancels: nothing set
        await wait_until(pilot, lambda: on_screen(app, "ConfigScreen"))
        assert "report_to" not in app.state.edits
        dialog = await _open(pilot, app, "lora_target")
        await pilot.press("tab")  # the text field: the names typed, marked in the list as they are
        assert dialog.focused is dialog.query_one("#edit-value")
        dialog.query_one("#edit-value").value = ""
        await pilot.press(*"k_proj, o_proj")
        await pilot.pause()
        assert _picked(dialog) == ["k_proj", "o_proj"]
        await _set(pilot, app, "lora_target", "k_proj,o_proj")
        dialog = await _open(pilot, app, "lora_target")  # a typed name the list lacks stays as typed
        dialog.query_one("#edit-value").value = "q_proj,model.layers.0.self_attn.k_proj"
        await pilot.pause()
        assert _picked(dialog) == ["q_proj"]
        await _toggle(pilot, dialog, "v_proj")
        assert _value(dialog) == "q_proj,v_proj,model.layers.0.self_attn.k_proj"
        await pilot.press("escape")
        await wait_until(pilot, lambda: on_screen(app, "ConfigScreen"))
        assert app.state.edits["lora_target"] == "k_proj,o_proj"


async def test_keys_of_one_value_keep_their_single_choice_and_text_field(workspace):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await walk_to_config(pilot, app)
        config = app.screen.built.config
        dialog = await _open(pilot, app, "lr_scheduler_type", "EditValue")
        assert not dialog.query("#edit-names") and dialog.query_one("#edit-choices")
        choices = dialog.query_one("#edit-choices")
        assert choices.highlighted == list(dialog.choices).index(config["lr_scheduler_type"])
        choices.highlighted = list(dialog.choices).index("linear")
        await _set(pilot, app, "lr_scheduler_type", "linear")
        dialog = await _open(pilot, app, "lora_rank", "EditValue")
        assert dialog.query_one("#edit-value").value == str(config["lora_rank"])
        dialog.query_one("#edit-value").value = "4"
        await pilot.press("enter")
        await wait_until(pilot, lambda: on_screen(app, "ConfigScreen") and app.state.edits.get("lora_rank") == 4)
