"""The runs review: the list of runs; one run's config, diff, loss chart, answers and export; two runs compared."""

from __future__ import annotations

from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Label, Static

from assistant.formatting import safe
from assistant.i18n import t, t_or
from assistant.tui.screens.config import diff_text
from assistant.tui.screens.train import window_note
from assistant.tui.widgets.chart import LossChart
from assistant.tui.widgets.dialogs import column_widths, fill_table, fmt_value
from assistant.tui.widgets.keyhelp import KeyHelp
from assistant.wizard import review
from assistant.wizard.stages.train import display_path


def state_words(state: str) -> str:
    """A run state in the interface language (a wizard's own "wizard: stage" stays as it is)."""
    return t_or(f"run.{state}", state)


def row_state(row: review.RunRow) -> str:
    """The state column: a session that has not trained yet names the stage it was left at."""
    if row.stage is not None:
        return t("review.wizard_stage", stage=t_or(f"stage.{row.stage}.title", row.stage))
    return state_words(row.state)


def page_table(table_id: str) -> DataTable:
    """A read-only table on a page that scrolls: it never takes the focus, so the arrow and page keys scroll the
    page from the start (unfold gives it its whole height: a table scrolling inside the page took them only after
    Tab)."""
    table = DataTable(id=table_id, zebra_stripes=True, cursor_type="none")
    table.can_focus = False
    return table


def unfold(table: DataTable) -> None:
    """The table at the height of all its rows (a DataTable stops at its parent's height and scrolls inside)."""
    table.styles.max_height = table.header_height + sum(row.height for row in table.rows.values())


class RunsScreen(Screen):
    """Every run and wizard session, newest first. Enter opens one; r reopens a wizard session where it was left
    (one that has not trained yet too); Space marks up to two; c compares the marked pair."""

    BINDINGS = [Binding("space", "mark", show=False), Binding("c", "compare", show=False),
                Binding("r", "reopen", show=False),
                Binding("escape", "close", show=False), Binding("q", "close", show=False)]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[review.RunRow] = []
        self.marked: list[str] = []

    def compose(self) -> ComposeResult:
        yield Label(t("review.title"), id="stage-title")
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        yield Static("", id="review-note", classes="hint")
        yield KeyHelp([("Enter", "key.open"), ("r", "key.reopen"), ("Space", "key.mark"), ("c", "key.compare"),
                       ("Esc", "key.back")])

    def on_mount(self) -> None:
        self.rows = review.list_runs(self.app.runs_dir)
        self._fill()
        self.query_one(DataTable).focus()
        if not self.rows:
            self.query_one("#review-note", Static).update(t("review.empty"))

    def _fill(self) -> None:
        columns = [t("review.run_id"), t("review.model"), t("review.method"), t("review.state"), t("review.steps"),
                   t("review.loss"), t("review.date")]
        cells = [[("* " if r.run_id in self.marked else "") + r.run_id, Path(r.model).name or r.model, r.method,
                  row_state(r), r.steps, r.final_loss, r.date] for r in self.rows]
        # The id is never cut; columns it already tells (its model and time) go first when the table is too wide
        for dropped in (6, 1):  # each column pads its cells by 2; the scrollbar takes 2 more
            if sum(width + 2 for width in column_widths(columns, cells)) <= self.app.size.width - 2:
                break
            columns, cells = columns[:dropped] + columns[dropped + 1:], [c[:dropped] + c[dropped + 1:] for c in cells]
        fill_table(self.query_one(DataTable), columns, cells, keys=[r.run_id for r in self.rows])

    def _current(self) -> review.RunRow | None:
        table = self.query_one(DataTable)
        if not self.rows:
            return None
        return self.rows[min(table.cursor_row, len(self.rows) - 1)]

    @on(DataTable.RowSelected)
    def _open(self, event: DataTable.RowSelected) -> None:
        row = next(r for r in self.rows if r.run_id == event.row_key.value)
        self.app.push_screen(RunScreen(row))

    def action_mark(self) -> None:
        row = self._current()
        if row is None:
            return
        if row.run_id in self.marked:
            self.marked.remove(row.run_id)
        else:
            self.marked = (self.marked + [row.run_id])[-2:]
        cursor = self.query_one(DataTable).cursor_row
        self._fill()
        self.query_one(DataTable).move_cursor(row=cursor)
        self.query_one("#review-note", Static).update(t("review.marked", runs=", ".join(self.marked) or "-"))

    def action_reopen(self) -> None:
        """Back into the wizard at the selected session, where it was left."""
        row = self._current()
        if row is None:
            return
        if not row.resumable:
            self.query_one("#review-note", Static).update(t("review.not_wizard", run_id=row.run_id))
            return
        self.app.reopen_session(row.run_id)

    def action_compare(self) -> None:
        if len(self.marked) != 2:
            self.query_one("#review-note", Static).update(t("review.mark_two"))
            return
        by_id = {r.run_id: r for r in self.rows}
        self.app.push_screen(CompareScreen(by_id[self.marked[0]], by_id[self.marked[1]]))

    def action_close(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
        else:
            self.app.exit()


class RunScreen(Screen):
    """One run: its config, the diff vs. the example, the loss curve, validation answers, export folder."""

    BINDINGS = [Binding("escape", "app.pop_screen", show=False), Binding("q", "app.pop_screen", show=False)]

    def __init__(self, row: review.RunRow) -> None:
        super().__init__()
        self.row = row

    def compose(self) -> ComposeResult:
        yield Label(self.row.run_id, id="stage-title")
        with VerticalScroll(classes="review-page"):
            yield Static("", id="run-facts")
            yield LossChart(id="chart")
            yield Label(t("config.diff_title"), classes="section")
            yield Static("", id="diff")
            yield Label(t("review.config"), classes="section")
            yield page_table("config")
            yield Label(t("review.answers"), classes="section")
            yield Static("", id="answers")
        yield KeyHelp([("↑↓", "key.scroll"), ("Esc", "key.back")])

    def on_mount(self) -> None:
        self.query_one(".review-page").focus()
        record = review.load_record(self.row.path)
        status = record.status
        facts = [t("review.facts", state=state_words(str(status.state)), steps=self.row.steps,
                   loss=self.row.final_loss),
                 t("loss.plot", path=display_path(record.loss_plot)) if record.loss_plot else "",
                 t("summary.export") + " " + display_path(record.export_dir) if record.export_dir else ""]
        self.query_one("#run-facts", Static).update(safe("\n".join(f for f in facts if f), keep_layout=True))
        self.query_one("#chart", LossChart).set_series({"loss": record.losses}, note=window_note(record.config))
        diff = [[d["parameter"], fmt_value(d["default"], d["parameter"]), fmt_value(d["new"], d["parameter"]),
                 d["reason"]] for d in record.diff]  # as the config stage showed it: it reads at 80 columns
        self.query_one("#diff", Static).update(diff_text(diff) if diff else t("config.no_diff"))
        fill_table(self.query_one("#config", DataTable), [t("col.parameter"), t("col.value")],
                   [[k, fmt_value(v, k)] for k, v in record.config.items()], width=self.app.size.width - 6)
        unfold(self.query_one("#config", DataTable))
        answers = [f"[b]{safe(a.get('prompt', ''), keep_layout=True)}[/b]"
                   f"\n  {t('validate.base')}: {safe(a.get('base', ''), keep_layout=True)}"
                   f"\n  {t('validate.tuned')}: {safe(a.get('tuned', ''), keep_layout=True)}" for a in record.answers]
        self.query_one("#answers", Static).update("\n".join(answers) or t("review.no_answers"))


class CompareScreen(Screen):
    """Two runs: the config keys that differ, and both loss curves on one chart."""

    BINDINGS = [Binding("escape", "app.pop_screen", show=False), Binding("q", "app.pop_screen", show=False)]

    def __init__(self, first: review.RunRow, second: review.RunRow) -> None:
        super().__init__()
        self.first, self.second = first, second

    def compose(self) -> ComposeResult:
        yield Label(t("review.compare_title"), id="stage-title")
        with VerticalScroll(classes="review-page"):
            yield LossChart(id="chart")
            yield page_table("difference")
            yield Static("", id="whole-values")
        yield KeyHelp([("↑↓", "key.scroll"), ("Esc", "key.back")])

    def on_mount(self) -> None:
        self.query_one(".review-page").focus()
        first, second = review.load_record(self.first.path), review.load_record(self.second.path)
        # The whole ids: cut at a fixed length, two runs of one model read the same (their time stamps are last).
        self.query_one("#chart", LossChart).set_series({"A " + first.run_id: first.losses,
                                                        "B " + second.run_id: second.losses})
        rows = [[key, fmt_value(a, key), fmt_value(b, key)]
                for key, a, b in review.config_difference(first.config, second.config)]
        table = self.query_one("#difference", DataTable)
        fill_table(table, [t("col.parameter"), "A", "B"], rows or [[t("review.same_config"), "", ""]],
                   width=self.app.size.width - 6, short_paths=True, share=2)
        unfold(table)
        # A path too wide for its column is shortened in the middle there (the differing end stays): whole below.
        shortened = [row for index, row in enumerate(rows)
                     if [str(cell) for cell in table.get_row_at(index)[1:]] != row[1:]]
        whole = [f"{safe(key)}\n  A {safe(a)}\n  B {safe(b)}" for key, a, b in shortened]
        self.query_one("#whole-values", Static).update(
            "\n".join([t("review.whole_values"), *whole]) if whole else "")
