"""Stage 3: the key parameters, the diff vs. the official example (with a reason per change), the small-dataset
check with a one-key fix, and a memory / run-time estimate — every value editable in place."""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.table import Table
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Button, DataTable, Label, Static

from assistant.i18n import t
from assistant.tui.messages import ConfigChecked, FixAccepted
from assistant.tui.screens.base import StageScreen
from assistant.tui.widgets.dialogs import EditValue, fill_table, fmt_value
from assistant.wizard import build, estimate
from assistant.wizard.stages import config as config_stage
from assistant.wizard.stages.data import count_rows
from assistant.wizard.stages.train import display_path


def human_size(value: float | None) -> str:
    if value is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.1f} {unit}"
        value /= 1024
    return "?"


def human_time(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 90:
        return f"~{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"~{round(seconds / 60)} min"
    return f"~{seconds / 3600:.1f} h"


def diff_table(rows: list[list[str]]) -> Table:
    """The diff as a wrapping table: four columns must fit ~55 cells, so long values wrap instead of scrolling."""
    table = Table(box=box.SIMPLE_HEAD, expand=True, padding=(0, 1), show_edge=False)
    for key, ratio in (("col.parameter", 4), ("col.default", 3), ("col.new", 3), ("col.reason", 4)):
        table.add_column(t(key), ratio=ratio, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


class ConfigScreen(StageScreen):
    STAGE = "config"
    KEYS = [("Enter", "key.edit"), ("a", "key.all"), ("e", "key.any"), ("f", "key.accept"), ("^N", "key.next"),
            ("Esc", "key.back")]
    BINDINGS = [Binding("a", "toggle_all", show=False), Binding("e", "edit_any", show=False),
                Binding("f", "accept_fix", show=False)]

    def __init__(self) -> None:
        super().__init__()
        self.built: build.BuiltConfig | None = None
        self.advice: config_stage.Advice | None = None
        self.show_all = False

    def compose_body(self) -> ComposeResult:
        yield Static("", id="example", classes="hint")
        yield DataTable(id="params", cursor_type="row", zebra_stripes=True)
        yield Label(t("config.diff_title"), classes="section")
        yield Static("", id="diff")
        yield Static("", id="advice")
        yield Button(t("config.accept_fix"), id="accept-fix", variant="warning")
        yield Static("", id="estimate")
        yield Button(t("button.continue"), id="continue", variant="primary")

    def on_mount(self) -> None:
        super().on_mount()
        self.rebuild()
        self.query_one("#params", DataTable).focus()

    # --------------------------------------------------------------- build and show
    def rebuild(self) -> None:
        from engine.errors import EngineError

        try:
            self.built = build.build_train_config(self.state, self.wizard.skill)
        except EngineError as exc:
            self.say([str(exc)])
            return
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
        note = f" — {self.state.example_note}" if self.state.example_note else ""
        self.query_one("#example", Static).update(escape(t("config.example", path=display_path(self.state.example))
                                                         + note))
        keys = list(built.config) if self.show_all else [k for k in self.stage.settings["key_params"]
                                                          if k in built.config]
        params = self.query_one("#params", DataTable)
        fill_table(params, [t("col.parameter"), t("col.value")], [[k, fmt_value(built.config[k], k)] for k in keys],
                   keys=keys)
        rows = [[row.parameter, fmt_value(row.default, row.parameter), fmt_value(row.new, row.parameter), row.reason]
                for row in built.diff]
        self.query_one("#diff", Static).update(diff_table(rows) if rows else t("config.no_diff"))
        self._show_advice()
        self._show_estimate()

    def _show_advice(self) -> None:
        advice, built = self.advice, self.built
        steps = t("config.steps", steps=built.total_steps if built.total_steps is not None else "?",
                  rows=built.rows if built.rows is not None else "?")
        lines = [steps] + ([f"[yellow]! {escape(p)}[/yellow]" for p in advice.problems] if advice else [])
        if advice and (advice.suggestions or advice.mix_dataset):
            fix = ", ".join(f"{k} → {fmt_value(v)}" for k, v in advice.suggestions.items())
            if advice.mix_dataset:
                fix = ", ".join(part for part in (fix, t("config.mix", dataset=advice.mix_dataset)) if part)
            lines.append(t("config.fix", fix=fix))
        self.query_one("#advice", Static).update("\n".join(lines))
        self.query_one("#accept-fix").display = bool(advice and (advice.suggestions or advice.mix_dataset))

    def _show_estimate(self) -> None:
        built, state = self.built, self.state
        on_gpu = bool(state.device) and state.device.get("platform") != "cpu"
        chars = [state.dataset_chars[n] for n in state.datasets if n in state.dataset_chars]
        result = estimate.estimate(built.config, model=state.model, method=state.method or "lora", on_gpu=on_gpu,
                                   rows=built.rows, mean_chars=sum(chars) / len(chars) if chars else None,
                                   devices=build.device_count(state), total_steps=built.total_steps)
        where = t("config.on_gpu") if on_gpu else t("config.on_cpu")
        self.query_one("#estimate", Static).update(
            t("config.estimate", memory=human_size(result.memory_bytes), time=human_time(result.seconds),
              where=where, basis=result.basis))

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
        self.app.push_screen(EditValue(key, current, info.help, info.choices),
                             callback=lambda value: self._edited(key, value))

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
        self.check(self.built)

    @work(thread=True, exclusive=True, group="check")
    def check(self, built: build.BuiltConfig) -> None:
        self.post_message(ConfigChecked(config_stage.confirm(self.state, built)))

    def on_config_checked(self, message: ConfigChecked) -> None:
        if not message.outcome.ok:
            self.say(message.outcome.problems)
            return
        self.wizard.advance(self.STAGE, message.outcome.state)
