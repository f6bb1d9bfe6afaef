"""Stage 5: the loss curve of the finished run in the terminal, and where training_loss.png was written."""

from __future__ import annotations

from rich.markup import escape
from textual.app import ComposeResult
from textual.widgets import Button, Static

from assistant.i18n import t
from assistant.tui.screens.base import StageScreen
from assistant.tui.widgets.chart import LossChart
from assistant.wizard.stages.train import display_path


class LossScreen(StageScreen):
    STAGE = "loss"

    def compose_body(self) -> ComposeResult:
        yield LossChart(id="chart")
        yield Static("", id="loss-info")
        yield Button(t("button.continue"), id="continue", variant="primary")

    def on_mount(self) -> None:
        super().on_mount()
        from engine.rundir import RunDir

        run = RunDir(self.wizard.run_folder)
        status = run.read_status()
        metrics = run.read_metrics()
        losses = [(m["step"], m["loss"]) for m in metrics if m.get("loss") is not None and "step" in m]
        evals = [(m["step"], m["eval_loss"]) for m in metrics if m.get("eval_loss") is not None]
        series = {"loss": losses, **({"eval_loss": evals} if len(evals) >= 2 else {})}
        self.query_one("#chart", LossChart).set_series(series)
        plot = status.get("loss_plot")
        lines = [t("loss.plot", path=display_path(plot)) if plot else t("loss.no_plot")]
        if losses:
            lines.append(t("loss.range", first=f"{losses[0][1]:.4f}", last=f"{losses[-1][1]:.4f}", points=len(losses)))
        self.query_one("#loss-info", Static).update(escape("\n".join(lines)))
        self.query_one("#continue", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "continue":
            self.submit()

    def submit(self) -> None:
        self.wizard.advance(self.STAGE, self.state)
