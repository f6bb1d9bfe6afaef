"""Stage 2.5: detect the GPUs once, show memory and utilisation, choose free ones (never a busy one silently)."""

from __future__ import annotations

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, RadioSet, Static

from assistant.i18n import t
from assistant.tui.messages import DevicesDetected
from assistant.tui.screens.base import COMMON_KEYS, StageScreen
from assistant.tui.widgets.question import QuestionSet
from assistant.wizard.stages import gpu


class GpuScreen(StageScreen):
    STAGE = "gpu"
    KEYS = [("r", "key.redetect"), *COMMON_KEYS]
    BINDINGS = [Binding("r", "redetect", show=False)]

    def __init__(self) -> None:
        super().__init__()
        self.continue_when_detected = False

    def compose_body(self) -> ComposeResult:
        yield Static(t("gpu.detecting"), id="gpu-list")
        with Vertical(id="several"):
            yield QuestionSet(self.stage.question("gpu_mode"), self.state.gpu_mode)
        with Vertical(id="busy"):
            yield QuestionSet(self.stage.question("busy_action"), self.state.busy_action)
        with Horizontal(classes="row", id="index-row"):
            yield Static(t("gpu.indices"), classes="hint")
            yield Input(id="indices", placeholder="0,1")
        yield Static("", id="gpu-advice")
        yield Button(t("button.continue"), id="continue", variant="primary")

    def on_mount(self) -> None:
        super().on_mount()
        for box in ("#several", "#busy", "#index-row"):
            self.query_one(box).display = False
        if self.wizard.device_report is not None:
            self._show(self.wizard.device_report)
        else:
            self.detect()

    @work(thread=True, exclusive=True, group="detect")
    def detect(self) -> None:
        try:
            self.post_message(DevicesDetected(self.wizard.detect_devices()))
        except Exception as exc:  # noqa: BLE001 - detection failing means: say so, offer CPU
            self.post_message(DevicesDetected(None, error=str(exc)))

    def on_devices_detected(self, message: DevicesDetected) -> None:
        if message.report is None:
            self.query_one("#gpu-list", Static).update(f"[red]{escape(message.error or '')}[/red]")
            return
        self.wizard.device_report = message.report
        self._show(message.report)
        if self.continue_when_detected:
            self.continue_when_detected = False
            self.submit()

    def action_redetect(self) -> None:
        if isinstance(self.focused, Input):
            return
        self.wizard.device_report = None
        self.query_one("#gpu-list", Static).update(t("gpu.detecting"))
        self.detect()

    def _show(self, report) -> None:
        case = gpu.situation(report)
        lines = [escape(gpu.describe_gpu(g)) for g in report.gpus] or [t("gpu.none")]
        self.query_one("#gpu-list", Static).update("\n".join(lines))
        cpu_advice = t("gpu.cpu_advice")
        if getattr(report, "cpu_bf16", None):
            cpu_advice += "\n" + t("gpu.cpu_bf16", units=report.cpu_bf16)
        advice = {"none": cpu_advice, "one_free": t("gpu.one_free_advice"),
                  "several_free": t("gpu.several_advice", free=",".join(map(str, gpu.free_indices(report)))),
                  "all_busy": t("gpu.all_busy_advice")}[case]
        self.query_one("#gpu-advice", Static).update(advice)
        self.query_one("#several").display = case == "several_free"
        self.query_one("#busy").display = case == "all_busy"
        self._update_index_row()

    @on(RadioSet.Changed)
    def _update_index_row(self, _event=None) -> None:
        report = self.wizard.device_report
        case = gpu.situation(report) if report is not None else "none"
        multi = case == "several_free" and self.query_one("#q-gpu_mode", QuestionSet).value == "multi"
        naming = case == "all_busy" and self.query_one("#q-busy_action", QuestionSet).value in ("share", "pick")
        self.query_one("#index-row").display = multi or naming or case == "several_free"

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "continue":
            self.submit()

    def submit(self) -> None:
        report = self.wizard.device_report
        if report is None:
            self.continue_when_detected = True  # go on with the recommended choice once detection answers
            self.say(info=[t("gpu.not_detected")])
            return
        raw = self.query_one("#indices", Input).value.replace(" ", "")
        try:
            indices = [int(part) for part in raw.split(",") if part]
        except ValueError:
            self.say([t("gpu.bad_indices", text=raw)])
            return
        answers = {"gpu_mode": self.query_one("#q-gpu_mode", QuestionSet).value,
                   "busy_action": self.query_one("#q-busy_action", QuestionSet).value, "indices": indices}
        outcome = gpu.apply(self.state, report, answers)
        if not outcome.ok:
            self.say(outcome.problems)
            return
        gpu.write_device_file(self.wizard.run_folder, outcome.state.device)
        self.wizard.advance(self.STAGE, outcome.state)
