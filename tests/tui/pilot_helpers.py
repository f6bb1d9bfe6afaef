"""Helpers for Pilot tests: fake detector output, the app factory, and waiting for background work."""

import time
from datetime import datetime
from pathlib import Path

SIZE = (80, 24)
# Run ids carry their start time; snapshots fix it so the board shows the same id every time.
FIXED_TIME = datetime(2026, 1, 2, 3, 4, 5)


def cpu_only():
    from engine.devices import DeviceReport

    return DeviceReport("cpu", [], "none")


def busy_gpus():
    """Two cards, both busy: 70 GB used at 99 %, and 30 GB at 50 % (what nvidia-smi would report)."""
    from engine.devices import GPU, DeviceReport

    return DeviceReport("cuda", [
        GPU(0, "H100", "nvidia", 71680, 81920, 99.0, ["python (pid 4242, 70.0 GiB)"]),
        GPU(1, "H100", "nvidia", 30720, 81920, 50.0, ["python (pid 4343, 30.0 GiB)"]),
    ], "nvidia-smi")


def make_app(workspace: Path, **kwargs):
    from assistant.tui.app import WizardApp

    kwargs.setdefault("detect_devices", cpu_only)
    kwargs.setdefault("online", False)
    return WizardApp(runs_dir=workspace / "lf_runs", **kwargs)


async def wait_until(pilot, condition, timeout: float = 60.0, what: str = "") -> None:
    """Let the app run until `condition()` holds; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.1)
        if condition():
            return
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or condition}")


def on_screen(app, name: str) -> bool:
    return type(app.screen).__name__ == name


def messages(app) -> str:
    """The text of the current stage's message area."""
    from textual.widgets import Static

    return str(app.screen.query_one("#messages", Static).render())


def shown_lines(widget) -> list[str]:
    """A widget's lines as the screen shows them (wrapped to its width), its whole content when it scrolls."""
    from textual.geometry import Region

    size = widget.virtual_size if widget.virtual_size.height > widget.size.height else widget.size
    return [strip.text.rstrip() for strip in widget.render_lines(Region(0, 0, size.width, size.height))]


def choose_datasets(app, *names: str) -> None:
    """On the data stage: exactly `names` selected (the recommended datasets are preselected)."""
    widget = app.screen.query_one("#datasets")
    widget.deselect_all()
    for name in names:
        widget.select(name)


async def walk_to(pilot, app, name: str) -> None:
    """Walk forward with the default answers until screen `name` is up (data: alpaca_demo)."""
    while not on_screen(app, name):
        current = type(app.screen).__name__
        if current == "DataScreen":
            await wait_until(pilot, lambda: app.screen.counts, what="row counts")
            choose_datasets(app, "alpaca_demo")
        if current == "ModelScreen":
            await wait_until(pilot, lambda: app.state.model_path, what="model resolved")
        if current == "GpuScreen":
            await wait_until(pilot, lambda: app.device_report is not None, what="devices")
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: type(app.screen).__name__ != current, what=f"leaving {current}")


async def walk_to_config(pilot, app) -> None:
    """Walk to the config stage (walk_to's answers) and wait until its config is built."""
    await walk_to(pilot, app, "ConfigScreen")
    await wait_until(pilot, lambda: app.screen.built is not None, what="config built")


def answer_preflight_at_once(monkeypatch, *, micro_batch: int = 1) -> None:
    """The pre-flight measures at once, with fixed figures (its real measurement is tested in test_one_key.py)."""
    import engine.api
    from engine.measurement import Measurement

    def measure_steps(config, **_kwargs):
        return Measurement(device="cpu", micro_batch=micro_batch, grad_accum=1, steps_timed=3, step_s=0.4,
                           tokens_per_s=900.0, startup_s=6.0, peak_bytes=700 * 2**20, limit_bytes=16 * 2**30,
                           total_steps=20, predicted_s=14.0, fits=True, measured_at=time.time())

    monkeypatch.setattr(engine.api, "measure_steps", measure_steps)
