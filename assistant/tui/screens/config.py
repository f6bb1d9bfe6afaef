"""Stage 3: the key parameters, the diff vs. the official example (with a reason per change), the small-dataset
check with a one-key fix, and a measured pre-flight — every value editable in place.

The pre-flight times a few real training steps of this very config on the chosen device (engine.api.measure_steps,
in a child process) before it is confirmed: step time, peak memory, and the whole run's predicted time. When the
micro-batch does not fit, the largest one that does is applied, with gradient accumulation raised to keep the
effective batch, and the diff says why. Continuing while it measures goes on once it is done.

At 80x24 the parameters and the diff share one area, switched with `d` (the header names both, with their
counts, so the diff is never below the fold); the page itself does not scroll, only the table or the diff does."""

from __future__ import annotations

from rich.markup import escape
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.events import Click
from textual.widgets import Button, ContentSwitcher, DataTable, Static

from assistant.i18n import t
from assistant.tui.messages import ConfigChecked, FixAccepted, Measured
from assistant.tui.screens.base import StageScreen
from assistant.tui.widgets.dialogs import EditNames, EditValue, fill_table, fmt_value
from assistant.wizard import build
from assistant.wizard.stages import config as config_stage
from assistant.wizard.stages import preflight
from assistant.wizard.stages.gpu import device_env
from assistant.wizard.stages.data import count_rows
from assistant.wizard.stages.train import display_path


def diff_text(rows: list[list[str]]) -> Text:
    """The diff as two lines per change — `parameter: example value → new value`, then the reason — which reads
    at ~54 columns where a four-column table folds every cell."""
    text = Text()
    text.append(t("config.diff_legend") + "\n", style="dim")
    for parameter, default, new, reason in rows:
        text.append(parameter, style="bold")
        text.append(": ")
        text.append(default, style="red")
        text.append(" → ")
        text.append(new, style="green")
        text.append(f"\n  {reason}\n", style="italic")
    return text


class ViewTabs(Static):
    """The one-line header of the parameters / diff area; a click switches like `d` does."""

    def on_click(self, event: Click) -> None:
        self.screen.action_switch_view()


# Keys that scroll the parameters or the diff while the focus is elsewhere (a button): the Widget.scroll_* method.
SCROLL_KEYS = {"up": "up", "down": "down", "pageup": "page_up", "pagedown": "page_down", "home": "home",
               "end": "end"}


class ConfigScreen(StageScreen):
    STAGE = "config"
    BODY_SCROLLS = False
    KEYS = [("Enter", "key.edit"), ("d", "key.diff"), ("a", "key.all"), ("e", "key.any"), ("f", "key.accept"),
            ("^N", "key.next"), ("Esc", "key.back"), ("^Q", "key.quit"), ("F2", "key.runs")]
    BINDINGS = [Binding("a", "toggle_all", show=False), Binding("e", "edit_any", show=False),
                Binding("f", "accept_fix", show=False), Binding("d", "switch_view", show=False),
                *[Binding(key, f"scroll_view('{how}')", show=False) for key, how in SCROLL_KEYS.items()]]

    def __init__(self) -> None:
        super().__init__()
        self.built: build.BuiltConfig | None = None
        self.advice: config_stage.Advice | None = None
        self.show_all = False
        self.measuring: str | None = None
        """The key of the config being measured now (None: no pre-flight running)."""
        self.measure_error: str | None = None
        self.continue_after_measure = False
        self.measure_began = 0.0

    def compose_body(self) -> ComposeResult:
        yield Static("", id="example", classes="hint")
        yield ViewTabs("", id="view-tabs")
        with ContentSwitcher(initial="params", id="views"):
            yield DataTable(id="params", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="diff-view", can_focus=True):
                yield Static("", id="diff")
        yield Static("", id="preflight")
        with VerticalScroll(id="facts"):
            yield Static("", id="advice")
        with Horizontal(classes="buttons"):
            yield Button(t("button.continue"), id="continue", variant="primary")
            yield Button(t("config.accept_fix"), id="accept-fix", variant="warning")

    def on_mount(self) -> None:
        super().on_mount()
        self.rebuild()
        # Enter goes on with the recommended config; Tab (or a click) reaches the table to edit a value.
        self.query_one("#continue", Button).focus()
        self.set_interval(1.0, self._tick)

    @property
    def view(self) -> str:
        """params | diff-view: what the shared area shows."""
        return self.query_one("#views", ContentSwitcher).current or "params"

    def action_switch_view(self) -> None:
        switcher = self.query_one("#views", ContentSwitcher)
        switcher.current = "diff-view" if self.view == "params" else "params"
        self.query_one(f"#{switcher.current}").focus()
        self._show_tabs()

    def action_scroll_view(self, how: str) -> None:
        """The arrow and page keys scroll the parameters or the diff, whichever is shown, from the start: Continue
        has the focus (Enter goes on), and a focused table or diff takes the keys itself."""
        getattr(self.query_one(f"#{self.view}"), f"scroll_{how}")(animate=False)

    def _show_tabs(self) -> None:
        if self.built is None:
            return
        keys = len(self.built.config) if self.show_all else len(self._keys())
        labels = {"params": t("config.tab_params", count=keys), "diff-view": t("config.tab_diff",
                                                                                 count=len(self.built.diff))}
        parts = [f"[reverse b] {escape(label)} [/]" if view == self.view else f" {escape(label)} "
                 for view, label in labels.items()]
        self.query_one("#view-tabs", Static).update(" ".join(parts) + f"  [dim]{escape(t('config.tab_key'))}[/dim]")

    def _keys(self) -> list[str]:
        return [k for k in self.stage.settings["key_params"] if k in self.built.config]

    # --------------------------------------------------------------- build and show
    def rebuild(self) -> None:
        built, problems = config_stage.build_config(self.state, self.wizard.skill)
        if problems:
            self.say(problems)
            return
        self.built = built
        available = [name for name in self._registered()]
        self.advice = config_stage.small_data_advice(self.built, self.state, self.wizard.skill, available)
        self._show()

    def _registered(self) -> list[str]:
        from engine.data.registry import load_dataset_info
        from engine.errors import EngineError

        try:
            return list(load_dataset_info(self.state.dataset_dir)) if self.state.dataset_dir else []
        except EngineError:
            return []

    def _show(self) -> None:
        built = self.built
        note = self.state.example_note
        example = t("config.example", path=display_path(self.state.example))
        # One line here; why the example was adapted heads the diff, where its consequences are listed.
        self.query_one("#example", Static).update(escape(example + (f" · {t('config.adapted')}" if note else "")))
        keys = list(built.config) if self.show_all else self._keys()
        params = self.query_one("#params", DataTable)
        fill_table(params, [t("col.parameter"), t("col.value")], [[k, fmt_value(built.config[k], k)] for k in keys],
                   keys=keys, width=(params.size.width or self.app.size.width - 26) - 3, short_paths=True)
        rows = [[row.parameter, fmt_value(row.default, row.parameter), fmt_value(row.new, row.parameter), row.reason]
                for row in built.diff]
        diff = diff_text(rows) if rows else Text(t("config.no_diff"))
        if built.lf_defaults:  # keys the example omits whose default here is not LLaMA-Factory's
            diff.append("\n" + t("config.lf_defaults") + "\n", style="dim")
            for row in built.lf_defaults:
                diff.append(row.parameter, style="bold")
                diff.append(f": {fmt_value(row.default, row.parameter)} → {fmt_value(row.new, row.parameter)}")
                diff.append(f"\n  {row.reason}\n", style="italic")
        if note:
            diff = Text.assemble(Text(f"! {note}\n", style="yellow"), diff)
        self.query_one("#diff", Static).update(diff)
        self._show_tabs()
        self._show_advice()
        self._show_preflight()

    def _show_advice(self) -> None:
        advice, built = self.advice, self.built
        rows = built.rows if built.rows is not None else "?"
        steps = t("config.steps", steps=built.total_steps, rows=rows) if built.total_steps is not None else \
            t("config.steps_packed" if built.config.get("stage") == "pt" else "config.steps", steps="?", rows=rows)
        lines = [steps]
        if advice and (advice.suggestions or advice.mix_dataset):  # what f does, first: the area is short at 80x24
            fix = ", ".join(f"{k} → {fmt_value(v)}" for k, v in advice.suggestions.items())
            if advice.mix_dataset:
                fix = ", ".join(part for part in (fix, t("config.mix", dataset=advice.mix_dataset)) if part)
            lines.append(escape(t("config.fix", fix=fix)))
        lines += [f"[yellow]! {escape(p)}[/yellow]" for p in advice.problems] if advice else []
        lines += [f"[yellow]! {escape(note)}[/yellow]" for note in built.notes]
        self.query_one("#advice", Static).update("\n".join(lines))
        self.query_one("#accept-fix").display = bool(advice and (advice.suggestions or advice.mix_dataset))

    # --------------------------------------------------------------- pre-flight
    def _show_preflight(self) -> None:
        """The stored measurement of this config, or start one (when the model is here), or say what it waits for."""
        import time

        built, state = self.built, self.state
        widget = self.query_one("#preflight", Static)
        found = preflight.current(state, built.config)
        if found is not None:
            colour = {"": "", "warning": "yellow"}
            widget.update("\n".join(f"[{colour[level]}]! {escape(line)}[/]" if level else escape(line)
                                    for level, line in preflight.describe(found)))
            return
        waiting = preflight.waiting_for(state)
        if waiting:
            widget.update(escape(waiting))
            return
        if self.measure_error and self.measuring is None:
            widget.update(f"[yellow]! {escape(self.measure_error)}[/]")
            return
        key = preflight.measure_key(built.config)
        if self.measuring != key:
            self.measuring, self.measure_error, self.measure_began = key, None, time.time()
            self.measure(built.config, key)
        self._tick()

    def _tick(self) -> None:
        import time

        if self.measuring is not None:
            device = "CPU" if not self.state.device or self.state.device.get("platform") == "cpu" else "GPU"
            self.query_one("#preflight", Static).update(escape(t(
                "preflight.running", device=device, seconds=int(time.time() - self.measure_began))))

    @work(thread=True, exclusive=True, group="measure")
    def measure(self, config: dict, key: str) -> None:
        """A few real steps in a child process; a newer measurement (the config changed) stops this one."""
        from textual.worker import get_current_worker

        from engine.api import measure_steps
        from engine.errors import EngineError
        from engine.measurement import MeasureCancelled

        worker = get_current_worker()
        try:
            result = measure_steps(config, steps=3, env=device_env(self.state.device),
                                   should_stop=lambda: worker.is_cancelled)
        except MeasureCancelled:
            return
        except EngineError as exc:
            self.post_message(Measured(key, config, None, preflight.failure_text(exc)))
            return
        self.post_message(Measured(key, config, result))

    def on_measured(self, message: Measured) -> None:
        if message.key != self.measuring:
            return  # an older config's answer
        self.measuring = None
        if message.error:
            self.measure_error = message.error
        else:
            self.wizard.commit(preflight.record(self.state, message.config, message.result))
        self.rebuild()
        if self.continue_after_measure:
            self.continue_after_measure = False
            self.submit()

    def fetch_changed(self) -> None:
        """The model arrived (or its fetch failed): the pre-flight can run, or says why not."""
        if self.built is not None:
            self.rebuild()

    # --------------------------------------------------------------- edits
    @on(DataTable.RowSelected, "#params")
    def _edit_row(self, event: DataTable.RowSelected) -> None:
        self._edit(str(event.row_key.value))

    def _edit(self, key: str) -> None:
        info = config_stage.params().get(key)
        if info is None:
            self.say([t("config.unknown_param", key=key, hint="-")])
            return
        current = self.built.config.get(key) if self.built else None
        if info.multi == "names" and self.built is not None:
            if info.choices:  # declared: at hand
                self._open_edit(key, current, config_stage.name_choices(key, self.built.config, []))
                return
            if config_stage.reads_names(key):  # the model's modules, the registered datasets: off the event loop
                self.say(info=[t("config.reading_names", key=key)])
                self.read_names(key, current, dict(self.built.config))
                return
        self._open_edit(key, current, None)

    @work(thread=True, exclusive=True, group="names")
    def read_names(self, key: str, current: object, config: dict) -> None:
        try:
            names = config_stage.name_choices(key, config, self._registered() if key == "eval_dataset" else [])
        except Exception:  # a model that cannot be inspected: its names are typed, as before
            names = None
        self.app.call_from_thread(self._opened_after_reading, key, current, names)

    def _opened_after_reading(self, key: str, current: object, names: tuple[str, ...] | None) -> None:
        if self.app.screen is self:  # not when the user has moved on meanwhile
            self.say(info=[])
            self._open_edit(key, current, names)

    def _open_edit(self, key: str, current: object, names: tuple[str, ...] | None) -> None:
        """Several names to pick from: a pick of several (the value can still be typed); else one choice or a
        typed value."""
        info = config_stage.params()[key]
        if names:
            dialog = EditNames(key, current, info.help, names, info.alone)
        else:
            dialog = EditValue(key, current, info.help, None if info.multi else info.choices)
        self.app.push_screen(dialog, callback=lambda value: self._edited(key, value))

    def _edited(self, key: str, value: str | None) -> None:
        if value is None:
            return
        outcome = config_stage.apply_edit(self.state, key, value)
        if not outcome.ok:
            self.say(outcome.problems)
            return
        self.wizard.commit(outcome.state)
        self.say(info=[t("config.edited", key=key)])
        self.rebuild()

    def action_edit_any(self) -> None:
        keys = list(config_stage.params())
        self.app.push_screen(EditValue("", None, "", all_keys=keys),
                             callback=lambda key: self._edit(key.strip()) if key else None)

    def action_toggle_all(self) -> None:
        self.show_all = not self.show_all
        if self.built is not None:
            self._show()

    def action_accept_fix(self) -> None:
        if self.advice and (self.advice.suggestions or self.advice.mix_dataset):
            self.accept_fix(self.advice)

    @work(thread=True, exclusive=True, group="fix")
    def accept_fix(self, advice: config_stage.Advice) -> None:
        """Counting the rows of the dataset mixed in reads it whole: off the event loop."""
        state, mix_rows = self.state, None
        if advice.mix_dataset:
            mix_rows, chars = count_rows(state.dataset_dir, advice.mix_dataset)
            state = state.replace(dataset_chars=dict(state.dataset_chars, **{advice.mix_dataset: chars}))
        self.post_message(FixAccepted(config_stage.accept_advice(state, advice, mix_rows=mix_rows)))

    def on_fix_accepted(self, message: FixAccepted) -> None:
        self.wizard.commit(message.state)
        self.rebuild()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "accept-fix":
            self.action_accept_fix()
        elif event.button.id == "continue":
            self.submit()

    # --------------------------------------------------------------- leave
    def submit(self) -> None:
        if self.built is None:
            return
        if self.measuring is not None:
            self.continue_after_measure = True  # go on as soon as the measurement is in
            self.say(info=[t("preflight.continue_after")])
            return
        self.check(self.built)

    @work(thread=True, exclusive=True, group="check")
    def check(self, built: build.BuiltConfig) -> None:
        self.post_message(ConfigChecked(config_stage.confirm(self.state, built)))

    def on_config_checked(self, message: ConfigChecked) -> None:
        if not message.outcome.ok:
            self.say(message.outcome.problems)
            return
        self.wizard.advance(self.STAGE, message.outcome.state)
