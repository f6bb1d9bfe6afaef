"""Stage 4: confirm the config table, write the run's config (sft.yaml, or dpo.yaml for preference training),
launch detached, then watch: progress, loss, learning rate, tokens/s, elapsed and ETA, a live chart (the loss; for
preference training also reward accuracy and margin), the log tail, and health hints. Done only when status
says so. At 80x24 the chart and the log share the space: `l` gives it to the log and back."""

from __future__ import annotations

import re
import time

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Button, Log, ProgressBar, Static
from textual.worker import get_current_worker

from assistant.formatting import fmt_duration, metric_words
from assistant.i18n import t, t_message, t_or
from assistant.tui.messages import RunPolled, RunStarted
from assistant.tui.screens.base import StageScreen
from assistant.tui.widgets.chart import LossChart
from assistant.tui.widgets.dialogs import ConfirmDialog, ConfirmTable
from assistant.tui.widgets.keyhelp import KeyHelp
from assistant.wizard import build
from assistant.wizard.stages import config as config_stage
from assistant.wizard.stages import train
from engine.runstatus import RunStatus


# Lines of train.log read per poll: enough to fill the log view at 80x24 and a taller terminal.
LOG_TAIL = 60


# A tqdm bar as the training process prints it (loading weights, mapping data): `desc: 100%|█████| 24/24 [00:00<00:00,
# 2805.55it/s]`, the description and the bracket optional.
TQDM_BAR = re.compile(r"^(?P<desc>.*?):?\s*(?P<share>\d{1,3})%\|[^|]*\|\s*(?P<count>[^\s\[]+)\s*(?:\[[^\]]*\])?\s*$")


def progress_words(line: str) -> str:
    """A tqdm bar's line as its words (`Loading weights: 100% (24/24)`); any other line as it is. The bar, its
    times and its rate take ~70 columns: folded to the log's width, the rate was left on a line of its own."""
    bar = TQDM_BAR.match(line)
    if bar is None:
        return line
    words = f"{bar['share']}% ({bar['count']})"
    return f"{bar['desc'].rstrip()}: {words}" if bar["desc"].strip() else words


def wrap_lines(lines: list[str], width: int) -> list[str]:
    """Log lines folded to the log's width (continuations indented): at 80 columns a step line is ~90 long,
    and a sideways scrollbar would take one of the three lines the log has under the chart."""
    import textwrap

    wrapped: list[str] = []
    for line in lines:
        line = progress_words(line.rsplit("\r", 1)[-1])  # a progress bar redrawn in place: its last state
        wrapped += textwrap.wrap(line, width, subsequent_indent="  ", drop_whitespace=False) or [""]
    return wrapped


def since_logged(status: RunStatus, metrics: list[dict], key: str, *, now: float | None = None) -> float | None:
    """status.elapsed_s or .eta_s as the trainer wrote them at its last logged step, moved on by the time since
    that step's metrics row (elapsed counts up, the ETA down) while the run is live: between logged steps (every
    logging_steps) the clock still runs."""
    seconds = getattr(status, key)
    logged = next((row for row in reversed(metrics) if row.get(key) is not None and row.get("time")), None)
    if seconds is None or status.is_terminal or logged is None or logged[key] != seconds:
        return seconds
    began = attempt_began(status)
    if began and logged["time"] < began:  # logged by an interrupted attempt: the time since was no training
        return seconds
    moved = max(0.0, (now or time.time()) - logged["time"])
    return max(0.0, seconds + moved if key == "elapsed_s" else seconds - moved)


def attempt_began(status: RunStatus) -> float | None:
    """When the run's current attempt started: its launch, or its last resume."""
    return max((when for when in (status.started_at, status.resumed_at) if when), default=None)


def eta_words(status: RunStatus, metrics: list[dict], measured: dict, *, now: float | None = None) -> str:
    """The run's own ETA (from its step times) once this attempt logged one. Before that, the pre-flight's: the
    start-up still ahead plus its time per step for every step left, which never runs out before a step is done
    (counting the whole prediction down from the start reached 0:00 while the model was still loading); without
    a pre-flight, "estimating"."""
    began = attempt_began(status)
    logged = next((row for row in reversed(metrics) if row.get("eta_s") is not None and row.get("time")), None)
    # an ETA logged before this attempt began (a killed run's, resumed) counts down a run that is gone
    if status.eta_s is not None and not (began and logged and logged["time"] < began):
        return t("train.eta", eta=fmt_duration(since_logged(status, metrics, "eta_s", now=now)))
    predicted, startup, steps = (measured.get(key) for key in ("predicted_s", "startup_s", "total_steps"))
    if not (predicted and steps and isinstance(startup, (int, float))):
        return t("train.eta_estimating")
    since = max(0.0, (now or time.time()) - began) if began else 0.0
    per_step = max(0.0, predicted - startup) / steps
    left = max(0.0, startup - since) + per_step * max(0, (status.total_steps or steps) - (status.step or 0))
    return t("train.eta_preflight", eta=fmt_duration(left))


def metric_series(metrics: list[dict], name: str) -> list[tuple[float, float]]:
    """(step, value) of one metric, one point per step: a resumed run logs the steps after its checkpoint again,
    and the later value (the run that went on) is the one kept."""
    points: dict[float, float] = {}
    for row in metrics:
        if row.get(name) is not None and "step" in row:
            points.pop(row["step"], None)
            points[row["step"]] = row[name]
    return sorted(points.items())


def window_note(config: dict) -> str:
    """What a point of the chart is: the trainer logs each metric as its mean over the logging_steps steps since
    the last row, so a curve of them is smoother than the steps were; the chart says so."""
    steps = config.get("logging_steps")
    return t("chart.window", steps=steps) if isinstance(steps, int) and steps > 1 else ""


def metric_label(name: str) -> str:
    """rewards/accuracies -> accuracies (准确率 in zh): the chart legend must fit ~54 columns."""
    return t_or(f"metric.short.{name}", name.rsplit("/", 1)[-1])


class TrainScreen(StageScreen):
    STAGE = "train"
    BODY_SCROLLS = False
    # Before anything is written Esc goes back to the config; then the keys follow the run's state. F2 (the runs
    # review) works throughout.
    KEYS = [("^N", "key.next"), ("Esc", "key.back"), ("^Q", "key.quit"), ("F2", "key.runs")]
    WRITTEN_KEYS = [("^N", "key.next"), ("^Q", "key.quit"), ("F2", "key.runs")]  # the config is fixed now
    RUNNING_KEYS = [("s", "key.stop"), ("l", "key.log"), ("^Q", "key.quit"), ("F2", "key.runs")]
    COMPLETED_KEYS = [("l", "key.log"), ("^N", "key.next"), ("^Q", "key.quit"), ("F2", "key.runs")]
    RESUMABLE_KEYS = [("r", "key.resume"), ("l", "key.log"), ("^Q", "key.quit"), ("F2", "key.runs")]  # failed, stopped
    BINDINGS = [Binding("s", "stop", show=False), Binding("r", "resume", show=False),
                Binding("l", "toggle_log", show=False)]

    def __init__(self) -> None:
        super().__init__()
        self.built: build.BuiltConfig | None = None
        self.process = None
        self.metrics: list[dict] = []
        self.status = RunStatus()
        self.last_metric_at: float | None = None
        self.watching = False
        self.chart_drawn = False
        self.log_view = False
        """True: the log has the space the chart usually takes."""
        self.log_lines: list[str] = []
        self.launching = False
        """The confirmed config is being written (and launched): going back would leave it behind."""
        self.note: str | None = None
        """What a point of the chart is (window_note), once the run's config was read."""

    def compose_body(self) -> ComposeResult:
        with Vertical(id="prelaunch"):
            yield Static("", id="launch-info")
            yield Button(t("train.review"), id="review", variant="primary")
        with Vertical(id="live"):
            yield Static("", id="run-state")
            yield ProgressBar(id="progress", show_eta=False)
            yield Static("", id="numbers")
            yield Static("", id="rewards")
            yield LossChart(id="chart")
            yield Static("", id="hints")
            yield Log(id="log", max_lines=self.stage.settings.get("log_lines", 200))
        yield Static("", id="command")
        yield Button(t("button.continue"), id="continue", variant="primary")

    def on_mount(self) -> None:
        super().on_mount()
        for empty in ("#continue", "#command", "#hints", "#rewards"):
            self.query_one(empty).display = False
        if self.state.launched or self.wizard.resume_action in ("reattach", "offer_resume"):
            self._enter_live()
            return
        self.query_one("#live").display = False
        self._prepare()

    # --------------------------------------------------------------- before launch
    def unwritten(self) -> bool:
        """Nothing of this stage is on disk yet: its config was not confirmed (or not written), nothing launched."""
        return not (self.state.launched or self.launching or self.watching or self.process is not None
                    or (self.wizard.run_folder / self.wizard.skill.config_file).exists())

    def keys(self) -> list[tuple[str, str]]:
        return self.KEYS if self.unwritten() else self.WRITTEN_KEYS

    def action_back(self) -> None:
        """Back to the config stage while nothing is written; after that the config is fixed (the app says so)."""
        previous = self.wizard.skill.previous_stage(self.STAGE, self.state.answers())
        if self.unwritten() and previous is not None:
            self.wizard.goto(previous)
        else:
            self.wizard.go_back()

    def _prepare(self) -> None:
        ready = train.ready_to_write(self.state)
        built, problems = config_stage.build_config(self.state, self.wizard.skill)
        if problems:
            self.say(problems)
            return
        self.built = built
        mode = t("train.mode_here") if self.state.execution == "run_here" else t("train.mode_write")
        config_path = self.wizard.run_folder / self.wizard.skill.config_file
        info = [t("train.will_write", path=train.display_path(config_path)), mode]
        self.query_one("#launch-info", Static).update(escape("\n".join(info)))
        if not ready.ok:
            self.say(ready.problems)  # a fetch still running: fetch_changed asks again once it is done
            return
        self.say()
        self.query_one("#review", Button).focus()
        self._ask_confirm()

    def fetch_changed(self) -> None:
        """The model arrived while the config waited for it: show the table to confirm now."""
        if not self.state.launched and self.built is not None and self.process is None and not self.watching:
            if self.state.download.get("state") != "running" and self.app.screen is self:
                self._prepare()

    def _ask_confirm(self) -> None:
        rows = list(self.built.config.items())
        config_stage = self.wizard.skill.stage("config")
        first = {row.parameter for row in self.built.diff} | set(config_stage.settings.get("key_params", []))
        title = t("train.confirm_title", file=self.wizard.skill.config_file, count=len(rows))
        self.app.push_screen(ConfirmTable(title, rows, t("train.confirm_note"), first=sorted(first)),
                             callback=self._confirmed)

    def _confirmed(self, yes: bool) -> None:
        if not yes:
            self.say(info=[t("train.not_written")])
            return
        self.say(info=[t("train.writing")])
        self.launching = True
        self.query_one("#keyhelp", KeyHelp).set_keys(self.WRITTEN_KEYS)
        self.start(self.built.config, self.state.execution == "run_here")

    @work(thread=True, exclusive=True, group="launch")
    def start(self, config: dict, launch: bool) -> None:
        try:
            run = train.write_config(self.state, config, self.wizard.runs_dir)
            process = train.launch(self.state, run, self.wizard.skill.training_stage) if launch else None
        except Exception as exc:  # noqa: BLE001 - shown to the user; nothing was launched
            self.post_message(RunStarted(None, None, error=str(exc)))
            return
        self.post_message(RunStarted(run, process))

    def on_run_started(self, message: RunStarted) -> None:
        self.launching = False
        if message.error:
            self.say([message.error])
            self.query_one("#keyhelp", KeyHelp).set_keys(self.keys())
            return
        self.process = message.process
        output_dir = self.built.config.get("output_dir") if self.built else None
        if message.process is None:  # write_only: show the command, the stage is done
            command = train.launch_command(self.state, self.wizard.run_folder, self.wizard.skill.config_file)
            self.wizard.commit(self.state.replace(output_dir=output_dir))
            self.query_one("#command", Static).update(t("train.command", command=command))
            self.query_one("#command").display = True
            self.query_one("#continue").display = True
            self.query_one("#continue", Button).focus()
            self.say(info=[t("train.written")])
            return
        self.wizard.commit(self.state.replace(launched=True, output_dir=output_dir))
        self._enter_live()

    # --------------------------------------------------------------- live view
    def _enter_live(self) -> None:
        self.query_one("#keyhelp", KeyHelp).set_keys(self.RUNNING_KEYS)  # r and ^N do nothing while it runs
        self.query_one("#prelaunch").display = False
        self.query_one("#live").display = True
        self._show_view()
        self.say()
        if not self.watching:
            self.watching = True
            self.watch_run()

    @work(thread=True, exclusive=True, group="watch")
    def watch_run(self) -> None:
        from engine.rundir import RunDir

        run = RunDir(self.wizard.run_folder)
        worker, seen, poll = get_current_worker(), None, float(self.stage.settings.get("poll_s", 0.5))
        last_metric_at: float | None = None
        while not worker.is_cancelled:
            if self.process is not None:
                self.process.poll()  # reap our own child so its end is seen at once
            status = run.read_status()
            metrics = run.read_metrics()
            # A resumed run logs again the steps after its checkpoint, replacing rows already shown: the whole
            # (step-ordered, de-duplicated) list goes over whenever it changed, never a tail counted by rows.
            mark = (len(metrics), metrics[-1] if metrics else None)
            changed = metrics if mark != seen else None
            seen = mark
            if changed:
                last_metric_at = time.time()
            self.post_message(RunPolled(status, changed, run.tail_log(LOG_TAIL), last_metric_at))
            if status.is_terminal:
                return
            time.sleep(poll)

    def on_run_polled(self, message: RunPolled) -> None:
        self.status = message.status
        if message.metrics is not None:
            self.metrics = list(message.metrics)
        self.last_metric_at = message.last_metric_at or self.last_metric_at
        self._show_status()
        if message.metrics or not self.chart_drawn:
            self._draw_chart()
            self.chart_drawn = True
        self._show_log(message.log_lines)
        self._show_hints()
        state = self.status.state
        if state in train.TERMINAL_STATES:
            self.watching = False
            self._finished(state)

    def _show_log(self, lines: list[str]) -> None:
        """The tail of train.log, newest line in view — unless the user scrolled up to read (then it stays)."""
        while lines and not lines[-1].strip():
            lines = lines[:-1]
        if lines == self.log_lines:
            return
        log = self.query_one("#log", Log)
        follow = log.is_vertical_scroll_end or not self.log_lines
        log.clear()
        # the vertical scrollbar (there once the tail overflows) covers the last columns: fold before it
        width = (log.content_size.width or 52) - log.styles.scrollbar_size_vertical - 1
        log.write_lines(wrap_lines(lines, max(20, width)), scroll_end=False)
        self.log_lines = lines
        if follow:
            log.call_after_refresh(log.scroll_end, animate=False)

    def _series(self, name: str) -> list[tuple[float, float]]:
        return metric_series(self.metrics, name)

    def _draw_chart(self) -> None:
        """The loss, and whatever else the skill charts (preference runs: reward accuracy and margin)."""
        settings = self.stage.settings
        names = settings.get("chart", ["loss"])
        series = {metric_label(name): self._series(name) for name in names}
        right = [metric_label(name) for name in settings.get("right_axis", [])]
        if self.note is None:
            config = self.built.config if self.built else train.read_run_config(
                self.wizard.run_folder, self.wizard.skill.config_file)[0]
            self.note = window_note(config)
        self.query_one("#chart", LossChart).set_series(series, right=right, note=self.note)

    def action_toggle_log(self) -> None:
        self.log_view = not self.log_view
        self._show_view()

    def _show_view(self) -> None:
        self.query_one("#chart").display = not self.log_view
        log = self.query_one("#log", Log)
        log.set_class(self.log_view, "full")
        log.call_after_refresh(log.scroll_end, animate=False)

    def _show_status(self) -> None:
        status = self.status
        step, total = status.step or 0, status.total_steps
        bar = self.query_one("#progress", ProgressBar)
        bar.update(total=total or None, progress=step)
        last = next((m for m in reversed(self.metrics) if m.get("loss") is not None), {})
        loss = status.loss if status.loss is not None else last.get("loss")
        run_state = t("train.state", state=t(f"run.{status.state}"), step=step, total=total or "?",
                      elapsed=fmt_duration(since_logged(status, self.metrics, "elapsed_s")))
        if not status.is_terminal:  # an ended run has nothing left to estimate
            run_state += " · " + self._eta(status)
        self.query_one("#run-state", Static).update(run_state)
        numbers = t(
            "train.numbers", loss=f"{loss:.4f}" if isinstance(loss, (int, float)) else "-",
            lr=f"{last['learning_rate']:.1e}" if last.get("learning_rate") is not None else "-",
            tps=f"{last['tokens_per_second']:.0f}" if last.get("tokens_per_second") is not None else "-")
        evaluated = next((m for m in reversed(self.metrics) if m.get("eval_loss") is not None), None)
        if evaluated is not None:  # the held-out rows' loss, where the plot alone showed it
            numbers += " · " + t("train.eval_loss", loss=f"{evaluated['eval_loss']:.4f}", step=evaluated["step"])
        self.query_one("#numbers", Static).update(numbers)
        rewards = self.query_one("#rewards", Static)
        shown = [name for name in self.stage.settings.get("chart", ["loss"]) if name != "loss"]
        figures = [f"{metric_words(name)} {last[name]:+.3f}" for name in shown if last.get(name) is not None]
        rewards.display = bool(figures)
        rewards.update(" · ".join(figures))

    def _eta(self, status: RunStatus) -> str:
        return eta_words(status, self.metrics, (self.state.measured or {}).get("result") or {})

    def _show_hints(self) -> None:
        hints = train.health_hints(self.metrics, self.status, self.stage.settings,
                                   rows=self.built.rows if self.built else self._rows(),
                                   last_metric_at=self.last_metric_at)
        colour = {"info": "", "warning": "yellow", "error": "red"}
        widget = self.query_one("#hints", Static)
        widget.update("\n".join(
            f"[{colour[h.level]}]! {escape(h.message)}[/]" if colour[h.level] else escape(h.message) for h in hints))
        widget.display = bool(hints)

    def _rows(self) -> int | None:
        counts = [self.state.dataset_rows.get(n) for n in self.state.datasets]
        return sum(counts) if counts and None not in counts else None

    def _finished(self, state: str) -> None:
        self.query_one("#keyhelp", KeyHelp).set_keys(self.COMPLETED_KEYS if state == "completed" else
                                                     self.RESUMABLE_KEYS)
        if state == "completed":
            self.say(info=[t("train.completed", path=train.display_path(self.status.output_dir or "-"))])
            self.query_one("#continue").display = True
            self.query_one("#continue", Button).focus()
            return
        reason = t_message(self.status.exit_message, self.status.exit_reason or "-")
        checkpoint = train.newest_checkpoint(self.status)
        offer = t("train.offer_resume", checkpoint=train.display_path(checkpoint)) if checkpoint else \
            t("train.no_checkpoint")
        ended = t("train.ended", state=t(f"run.{state}"), reason=reason)
        if state == "stopped":  # asked for: not an error
            self.say(notes=[ended, offer])
        else:
            self.say([ended], notes=[offer])

    # --------------------------------------------------------------- keys
    def action_stop(self) -> None:
        if self.status.state != "running":
            return
        self.app.push_screen(ConfirmDialog(t("train.stop_question")), callback=self._stop_confirmed)

    def _stop_confirmed(self, yes: bool) -> None:
        if not yes:
            self.say(info=[t("train.not_stopped")])
            return
        from engine.api import stop
        from engine.errors import EngineError

        try:
            stop(self.state.run_id, runs_dir=self.wizard.runs_dir)
            self.say(info=[t("train.stopping")])
        except EngineError as exc:
            self.say([t_message(exc.message, str(exc))])

    def action_resume(self) -> None:
        if self.status.state not in ("failed", "stopped"):
            return
        from engine.errors import EngineError

        try:
            handle = train.resume_from_checkpoint(self.state, self.wizard.runs_dir)
        except EngineError as exc:
            self.say([t_message(exc.message, str(exc))])
            return
        self.process = handle.process
        self.wizard.resume_action = None
        self.say(info=[t("train.resumed")])
        self._enter_live()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "review":
            if self.built is not None:
                self._ask_confirm()
        elif event.button.id == "continue":
            self.submit()

    def submit(self) -> None:
        if self.state.execution != "run_here":
            if (self.wizard.run_folder / self.wizard.skill.config_file).is_file():
                self.wizard.advance(self.STAGE, self.state)
            return
        outcome = train.finished(self.state, self.status)
        if not outcome.ok:
            self.say(outcome.problems)
            return
        self.wizard.advance(self.STAGE, outcome.state)
