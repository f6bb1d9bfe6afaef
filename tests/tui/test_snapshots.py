"""Snapshots of the key screens at 80x24 (update with `pytest tests/tui/test_snapshots.py --snapshot-update`).

A snapshot is a picture of the layout, so what varies from run to run is fixed here: the clock, the pre-flight's
figures (the real measurement is tested in test_one_key.py) and the toasts, which name temporary folders.
"""

import pytest

from pilot_helpers import FIXED_TIME, answer_preflight_at_once, busy_gpus, make_app, on_screen, wait_until


@pytest.fixture(autouse=True)
def fixed_preflight(monkeypatch):
    answer_preflight_at_once(monkeypatch, micro_batch=2)


def _app(workspace, **kwargs):
    return make_app(workspace, now=FIXED_TIME, **kwargs)


async def _to(pilot, app, name):
    while not on_screen(app, name):
        current = type(app.screen).__name__
        if current == "DataScreen":
            await wait_until(pilot, lambda: app.screen.counts)
            app.screen.query_one("#datasets").select("alpaca_demo")
        if current == "ConfigScreen":
            await wait_until(pilot, lambda: app.screen.built is not None)
        if current == "ModelScreen":
            await wait_until(pilot, lambda: app.state.model_path)
        if current == "GpuScreen":
            await wait_until(pilot, lambda: app.device_report is not None)
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: type(app.screen).__name__ != current)
    await pilot.pause(0.3)
    app.clear_notifications()
    await pilot.pause(0.1)


def test_flow_screen(snap_compare, workspace):
    assert snap_compare(_app(workspace), terminal_size=(80, 24))


def test_flow_screen_in_chinese(snap_compare, workspace):
    assert snap_compare(_app(workspace, lang="zh"), terminal_size=(80, 24))


def test_data_screen_with_preview(snap_compare, workspace):
    async def run_before(pilot):
        await _to(pilot, pilot.app, "DataScreen")
        await wait_until(pilot, lambda: pilot.app.screen.counts)
        await wait_until(pilot, lambda: "#1" in str(pilot.app.screen.query_one("#preview").render()))

    assert snap_compare(_app(workspace), terminal_size=(80, 24), run_before=run_before)


def test_gpu_screen_all_busy(snap_compare, workspace):
    async def run_before(pilot):
        await _to(pilot, pilot.app, "GpuScreen")
        await wait_until(pilot, lambda: pilot.app.device_report is not None)
        await pilot.pause(0.3)

    assert snap_compare(_app(workspace, detect_devices=busy_gpus), terminal_size=(80, 24), run_before=run_before)


def test_config_screen_with_diff(snap_compare, workspace):
    async def run_before(pilot):
        await _to(pilot, pilot.app, "ConfigScreen")
        await pilot.press("d")  # the diff shares the parameters' space: one key switches
        await pilot.pause(0.2)

    assert snap_compare(_app(workspace), terminal_size=(80, 24), run_before=run_before)


def test_config_screen_parameters(snap_compare, workspace):
    async def run_before(pilot):
        await _to(pilot, pilot.app, "ConfigScreen")

    assert snap_compare(_app(workspace), terminal_size=(80, 24), run_before=run_before)


def test_confirm_table_shows_the_keys_that_matter_first(snap_compare, workspace):
    async def run_before(pilot):
        await _to(pilot, pilot.app, "ConfirmTable")

    assert snap_compare(_app(workspace), terminal_size=(80, 24), run_before=run_before)


def test_dpo_data_screen_lists_only_pairs(snap_compare, workspace):
    async def run_before(pilot):
        await pilot.press("down", "enter")  # workflow: DPO
        await wait_until(pilot, lambda: pilot.app.skill.name == "dpo")
        await pilot.pause(0.2)
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(pilot.app, "DataScreen") and pilot.app.screen.counts)
        pilot.app.screen.query_one("#datasets").focus()
        await wait_until(pilot, lambda: "#1" in str(pilot.app.screen.query_one("#preview").render()))
        await pilot.pause(0.3)

    assert snap_compare(_app(workspace), terminal_size=(80, 24), run_before=run_before)
