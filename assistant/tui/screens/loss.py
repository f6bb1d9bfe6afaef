"""Stage 5: the loss curve of the finished run in the terminal (with the reward curves of a preference run), and
where training_loss.png was written."""

from __future__ import annotations

from rich.markup import escape
from textual.app import ComposeResult
from textual.widgets import Button, Static

from assistant.i18n import t
from assistant.tui.screens.base import StageScreen
from assistant.formatting import metric_words
from assistant.tui.screens.train import metric_label, metric_series, window_note
from assistant.wizard.stages.train import read_run_config
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
        train_settings = self.wizard.skill.stage("train").settings

        def points(name: str) -> list[tuple[float, float]]:
            return metric_series(metrics, name)

        losses, evals = points("loss"), points("eval_loss")
        series = {metric_label(name): points(name) for name in train_settings.get("chart", ["loss"])}
        series.update({"eval_loss": evals} if len(evals) >= 2 else {})
        right = [metric_label(name) for name in train_settings.get("right_axis", [])]
        note = window_note(read_run_config(self.wizard.run_folder, self.wizard.skill.config_file)[0])
        self.query_one("#chart", LossChart).set_series(series, right=right, note=note)
        plot = status.loss_plot
        lines = [t("loss.plot", path=display_path(plot)) if plot else t("loss.no_plot")]
        if losses:
            lines.append(t("loss.range", first=f"{losses[0][1]:.4f}", last=f"{losses[-1][1]:.4f}", points=len(losses)))
        for name in train_settings.get("chart", ["loss"]):
            values = points(name)
            if name != "loss" and values:
                lines.append(t("loss.metric", name=metric_words(name).capitalize(), first=f"{values[0][1]:+.3f}",
                               last=f"{values[-1][1]:+.3f}"))
        self.query_one("#loss-info", Static).update(escape("\n".join(lines)))
        self.query_one("#continue", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "continue":
            self.submit()

    def submit(self) -> None:
        self.wizard.advance(self.STAGE, self.state)
