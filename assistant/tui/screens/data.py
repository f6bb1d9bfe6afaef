"""Stage 1: registered datasets (multi-select, rows and format shown, a preview with the trained part highlighted)
or the user's own files (checked, optionally converted, copied in, registered); templated datasets are filled.

Only datasets of the kind the workflow trains on are listed (engine.data.kinds: pairs for DPO and RM, labelled
answers for KTO, raw text for PT, conversations for SFT); the screen says which others it hides. The skill's
recommended datasets are preselected, so Enter alone goes on with them."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Checkbox, Input, Label, RadioSet, SelectionList, Static
from textual.widgets.selection_list import Selection

from assistant.formatting import safe
from assistant.i18n import t, t_error, t_or
from assistant.tui.messages import (DatasetsListed, FileChecked, Filled, Onboarded, PlaceholdersFound, PreviewLoaded,
                                    RowsCounted)
from assistant.tui.screens.base import COMMON_KEYS, StageScreen
from assistant.tui.widgets.dialogs import AskValues
from assistant.tui.widgets.marked import MarkedCheckbox, MarkedSelectionList
from assistant.tui.widgets.question import QuestionSet
from assistant.wizard.stages import data
from assistant.wizard.stages.train import display_path

PREVIEW_CHARS = 160
# Every problem is listed (the area scrolls); past this many the file is not the right format at all.
PROBLEMS_SHOWN = 500


def _short(text: object) -> str:
    # Data rows may hold escape sequences and markup: both are shown as text, never interpreted.
    return safe(str(text or "").replace("\n", " ")[:PREVIEW_CHARS], keep_layout=True)


def preview_markup(examples: list[dict]) -> str:
    """Prompts dim, answers (what training learns) in green; for pairs, the chosen answer green (✓) and the
    rejected one red (✗), so the difference reads without colour too."""
    lines = []
    for number, example in enumerate(examples, start=1):
        lines.append(f"[b]#{number}[/b]")
        if "text" in example:  # pre-training: every token is learned
            lines.append(f"  [green]{t('data.trained')}: {_short(example['text'])}[/green]")
        messages = example.get("messages", [])
        for index, message in enumerate(messages):
            text = _short(message.get("content"))
            if "kto_tag" in example and index == len(messages) - 1:  # KTO: the last answer, pushed up or down
                desirable = bool(example["kto_tag"])
                lines.append(f"  [{'green' if desirable else 'red'}]{'✓' if desirable else '✗'} "
                             f"{t('data.desirable' if desirable else 'data.undesirable')}: {text}"
                             f"[/{'green' if desirable else 'red'}]")
            elif message.get("role") in ("assistant", "function_call"):
                lines.append(f"  [green]{t('data.trained')}: {text}[/green]")
            else:
                role = str(message.get("role"))
                lines.append(f"  [dim]{escape(t_or('role.' + role, role))}: {text}[/dim]")
        if "chosen" in example:
            lines.append(f"  [green]✓ {t('data.chosen')}: {_short(example['chosen'])}[/green]")
            lines.append(f"  [red]✗ {t('data.rejected')}: {_short(example['rejected'])}[/red]")
    return "\n".join(lines)


class DatasetList(MarkedSelectionList):
    """The datasets: Space selects, Enter goes on with the selection (like Ctrl+N)."""

    BINDINGS = [Binding("enter", "screen.next", show=False)]


class ConvertCheckbox(MarkedCheckbox):
    """Whether a converted copy is written: Space ticks it. Enter adds the file, as in the name field beside it,
    and never ticks: the box looks like a choice of the question above, where Enter chooses the row."""

    BINDINGS = [Binding("enter", "screen.add_file", show=False)]


class DataScreen(StageScreen):
    STAGE = "data"
    KEYS = [("Space", "key.select"), *COMMON_KEYS]

    def __init__(self) -> None:
        super().__init__()
        self.folder: Path | None = None
        self.listing: list[data.DatasetRow] = []
        self.counts: dict[str, tuple[int, float]] = {}
        self.checked: FileChecked | None = None
        self.pending_fill: list[tuple[str, list[str]]] = []
        self.hidden: list[str] = []
        self.preselected = bool(self.state.datasets)
        """The recommended datasets were selected once (never again over the user's own choice)."""
        self.to_select: set[str] = set()
        """A dataset just added: selected when the listing is next filled, beside what was selected."""
        self.choice_refused = False
        """Continue was refused for an empty selection: selecting something clears that message (only that)."""
        self.auto_selected: set[str] = set()
        """What the recommendation selected: a file of the user's own replaces it while it is all that is chosen."""

    @property
    def kind(self) -> str:
        """The rows this workflow trains on (engine.data.kinds): pairs, kto, text or conversations."""
        from engine.data.kinds import stage_kind

        return stage_kind(self.wizard.skill.training_stage)

    @property
    def ranking(self) -> bool:
        return self.kind == "pairs"

    def compose_body(self) -> ComposeResult:
        question = self.stage.question("data_source")
        yield QuestionSet(question, self.state.data_source)
        with Horizontal(classes="row"):
            yield Label(t("data.folder_label"), classes="inline-label")
            yield Input(value=self.state.dataset_dir or data.default_dir(self.stage.settings.get("dataset_dir", "data")),
                        id="dataset-dir", placeholder="data")
            yield Button(t("data.open_dir"), id="open-dir")
        with Vertical(id="builtin"):
            yield Static(t("data.pick"), classes="hint")
            yield Static("", id="hidden-note", classes="hint")
            yield DatasetList(id="datasets")
            yield Static("", id="preview")
        with Vertical(id="custom"):
            yield Static(t(f"data.custom_hint_{self.kind}"), classes="hint")
            with Horizontal(classes="row"):
                yield Input(placeholder="/path/to/my_data.jsonl", id="custom-path")
                yield Button(t("data.check"), id="check")
            yield Static("", id="check-result")
            with Horizontal(classes="row", id="onboard-row"):
                yield Input(placeholder=t("data.name_placeholder"), id="custom-name")
                yield ConvertCheckbox(t("data.convert"), id="convert")
                yield Button(t("data.add"), id="add")
        yield Button(t("button.continue"), id="continue", variant="primary")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#onboard-row").display = False
        self._show_source(self.query_one(QuestionSet).value)
        if self.query_one(QuestionSet).value == "builtin":
            # Space selects at once, no Tab hunt past the folder field; the page stays at its top (the question
            # and the folder in view).
            self.query_one("#datasets").focus(scroll_visible=False)
        self.list_folder(self.query_one("#dataset-dir", Input).value)

    # --------------------------------------------------------------- listing and preview
    @work(thread=True, exclusive=True, group="list")
    def list_folder(self, text: str) -> None:
        outcome = data.find_dir(text)
        if not outcome.notes:
            self.post_message(DatasetsListed(None, [], error="\n".join(outcome.problems)))
            return
        folder = Path(outcome.notes[0])
        try:
            rows, hidden = data.shown_rows(data.list_datasets(folder, kind=self.kind), kind=self.kind)
        except Exception as exc:  # noqa: BLE001 - a broken dataset_info.json is shown, not raised
            self.post_message(DatasetsListed(folder, [], error=t_error(exc)))
            return
        counts, errors = {}, {}
        for row in rows:
            if row.available:
                try:
                    counts[row.name] = data.count_rows(folder, row.name)
                except Exception as exc:  # noqa: BLE001
                    errors[row.name] = t_error(exc)
        self.post_message(DatasetsListed(folder, rows, hidden=hidden))
        self.post_message(RowsCounted(counts, errors))

    def on_datasets_listed(self, message: DatasetsListed) -> None:
        if message.folder is None:
            self.say([message.error or ""])
            return
        self.folder, self.listing, self.hidden = message.folder, message.rows, message.hidden
        if message.error:
            self.say(notes=[message.error])
        self.query_one("#dataset-dir", Input).value = display_path(message.folder)
        note = self.query_one("#hidden-note", Static)
        names = ", ".join(self.hidden[:4]) + (", …" if len(self.hidden) > 4 else "")
        note.update(escape(t("data.hidden", count=len(self.hidden), names=names, kind=t(f"data.kind_{self.kind}")))
                    if self.hidden else "")
        note.display = bool(self.hidden)
        if not self.listing:
            self.say([t("data.none_of_kind", kind=t(f"data.kind_{self.kind}"))])
        self._fill_list()

    def on_rows_counted(self, message: RowsCounted) -> None:
        self.counts = message.counts
        if message.errors:
            self.say(notes=[f"{name}: {error}" for name, error in message.errors.items()])
        self._fill_list()

    def _fill_list(self) -> None:
        widget = self.query_one("#datasets", SelectionList)
        keep = (set(widget.selected) or set(self.state.datasets)) | self.to_select
        self.to_select = set()
        if not keep and not self.preselected and self.listing:
            keep = set(data.recommended(self.listing, self.stage.settings.get("recommended", [])))
            self.preselected, self.auto_selected = bool(keep), set(keep)
        highlighted = widget.highlighted
        widget.clear_options()
        for row in self.listing:
            size = t("data.rows", rows=self.counts[row.name][0]) if row.name in self.counts else ""
            label = f"{row.name}  {size} · {row.formatting}" + (f" · {row.note}" if row.note else "")
            widget.add_option(Selection(label, row.name, row.name in keep and row.available, disabled=not row.available))
        if self.listing:
            widget.highlighted = min(highlighted or 0, len(self.listing) - 1)

    @on(SelectionList.SelectedChanged, "#datasets")
    def _selection_changed(self) -> None:
        if self.choice_refused and self.query_one("#datasets", SelectionList).selected:
            self.choice_refused = False
            self.say()  # "select at least one" no longer applies (other messages, e.g. what Add did, stay)

    @on(SelectionList.SelectionHighlighted, "#datasets")
    def _highlighted(self, event: SelectionList.SelectionHighlighted) -> None:
        if self.folder is not None:
            self.load_preview(self.folder, event.selection.value)

    @work(thread=True, exclusive=True, group="preview")
    def load_preview(self, folder: Path, name: str) -> None:
        limit = int(self.stage.settings.get("preview_rows", 3))
        try:
            self.post_message(PreviewLoaded(name, data.preview(folder, name, limit)))
        except Exception as exc:  # noqa: BLE001
            self.post_message(PreviewLoaded(name, [], error=t_error(exc)))

    def on_preview_loaded(self, message: PreviewLoaded) -> None:
        body = safe(message.error, keep_layout=True) if message.error else preview_markup(message.examples)
        title = t("data.preview_pairs" if self.ranking else "data.preview", name=message.name)
        self.query_one("#preview", Static).update(f"[b]{escape(title)}[/b]\n{body}")

    # --------------------------------------------------------------- source, folder, custom files
    @on(RadioSet.Changed)
    def _source_changed(self, event: RadioSet.Changed) -> None:
        self._show_source(self.query_one(QuestionSet).value)

    def _show_source(self, source: str) -> None:
        self.query_one("#builtin").display = source == "builtin"
        self.query_one("#custom").display = source == "custom"

    def on_button_pressed(self, event: Button.Pressed) -> None:
        actions = {"open-dir": lambda: self.list_folder(self.query_one("#dataset-dir", Input).value),
                   "check": self._check, "add": self._add, "continue": self.submit}
        if event.button.id in actions:
            actions[event.button.id]()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "dataset-dir":
            self.list_folder(event.value)
        elif event.input.id == "custom-path":
            self._check()
        elif event.input.id == "custom-name":
            self._add()

    def _check(self) -> None:
        self.query_one("#check-result", Static).update(t("data.checking"))
        self.check_file(self.query_one("#custom-path", Input).value)

    @work(thread=True, exclusive=True, group="check")
    def check_file(self, text: str) -> None:
        path, report, problems = data.check_custom(text, kind=self.kind)
        self.post_message(FileChecked(path, report, problems))

    def on_file_checked(self, message: FileChecked) -> None:
        self.checked = message
        shown = message.problems[:PROBLEMS_SHOWN]
        lines = [f"[red]{safe(p, keep_layout=True)}[/red]" for p in shown]
        if len(message.problems) > len(shown):
            lines.append(t("data.more_problems", count=len(message.problems) - len(shown)))
        report = message.report
        if report is not None:
            lines.insert(0, t("data.checked", rows=report.rows, format=report.format,
                              errors=len(report.errors), warnings=len(report.warnings)))
        wrong_kind = report is not None and report.format != "unknown" and not data.fits_kind(report, self.kind)
        if wrong_kind and self.kind == "conversations":
            lines.insert(1, f"[yellow]{escape(t('data.pairs_for_sft'))}[/yellow]")
        self.query_one("#check-result", Static).update("\n".join(lines))
        usable = message.path is not None and data.fits_kind(report, self.kind)
        self.query_one("#onboard-row").display = usable
        if usable:
            self.query_one("#custom-name", Input).value = message.path.stem.replace(",", "_")
            self.query_one("#convert", Checkbox).value = not report.ok and self.kind in ("pairs", "conversations")

    def action_add_file(self) -> None:
        self._add()

    def _add(self) -> None:
        if self.checked is None or self.checked.path is None or self.folder is None:
            self.say([t("data.check_first")])
            return
        self.say(info=[t("data.adding")])
        self.onboard(self.checked.path, self.query_one("#custom-name", Input).value,
                     self.query_one("#convert", Checkbox).value)

    @work(thread=True, exclusive=True, group="onboard")
    def onboard(self, source: Path, name: str, convert: bool) -> None:
        """Converting or copying a large file takes a while: never on the event loop."""
        self.post_message(Onboarded(data.onboard(self.state, self.folder, source, name, convert=convert,
                                                 kind=self.kind)))

    def on_onboarded(self, message: Onboarded) -> None:
        outcome = message.outcome
        if not outcome.ok:
            self.say(outcome.problems)
            return
        record = outcome.state.onboarded[-1]
        chosen = list(self.state.datasets)
        widget = self.query_one("#datasets", SelectionList)
        if self.auto_selected and set(widget.selected) == self.auto_selected:
            # the selection is still only our recommendation, not their choice: their own file replaces it
            chosen = [name for name in chosen if name not in self.auto_selected]
            for name in self.auto_selected:
                widget.deselect(name)
        self.auto_selected = set()
        self.wizard.commit(outcome.state.replace(datasets=[*chosen, record["name"]]))
        self.folder = Path(outcome.state.dataset_dir)
        self.to_select.add(record["name"])
        # What a conversion left out or changed stays on screen with the result (the listing does not replace it).
        self.say(notes=outcome.notes, info=[t("data.added", name=record["name"], folder=display_path(self.folder))])
        self.list_folder(str(self.folder))

    # --------------------------------------------------------------- continue: choose, then fill templates
    def submit(self) -> None:
        if self.folder is None:
            self.say([t("data.no_folder")])
            return
        names = list(self.query_one("#datasets", SelectionList).selected)
        outcome = data.choose(self.state, self.folder, names, self.listing, self.counts)
        if not outcome.ok:
            self.choice_refused = True
            self.say(outcome.problems)
            return
        self.wizard.commit(outcome.state.replace(data_source=self.query_one(QuestionSet).value))
        self.find_placeholders(self.folder, names)

    @work(thread=True, exclusive=True, group="placeholders")
    def find_placeholders(self, folder: Path, names: list[str]) -> None:
        found = {}
        for name in names:
            try:
                found[name] = data.placeholders(folder, name)
            except Exception:  # noqa: BLE001 - a file the check accepted but placeholders cannot read: none
                found[name] = []
        self.post_message(PlaceholdersFound({k: v for k, v in found.items() if v}))

    def on_placeholders_found(self, message: PlaceholdersFound) -> None:
        self.pending_fill = list(message.found.items())
        self._ask_next_fill()

    def _ask_next_fill(self, values: dict | None = None) -> None:
        if not self.pending_fill:
            self.wizard.advance(self.STAGE, self.state)
            return
        name, variables = self.pending_fill[0]
        title = t("data.fill_title", name=name,
                  filled=data.filled_name(self.folder, name, self.stage.settings.get("filled_suffix", "_custom")))
        suggested = self.stage.settings.get("fill_defaults", {})
        values = values or {var: str(suggested[var]) for var in variables if var in suggested}
        self.app.push_screen(AskValues(title, variables, values, note=t("data.fill_note") if values else ""),
                             callback=self._filled)

    def _filled(self, values: dict | None) -> None:
        name, _variables = self.pending_fill[0]
        if values is None:  # Esc: the stage stays, nothing is filled or trained on yet
            self.pending_fill = []
            self.say([t("data.fill_cancelled", name=name)])
            return
        self.fill(name, values)

    @work(thread=True, exclusive=True, group="fill")
    def fill(self, name: str, values: dict) -> None:
        suffix = self.stage.settings.get("filled_suffix", "_custom")
        self.post_message(Filled(data.fill_template(self.state, self.folder, name, values, suffix), values))

    def on_filled(self, message: Filled) -> None:
        outcome, values = message.outcome, message.values
        if not outcome.ok:
            self.say(outcome.problems)
            self._ask_next_fill(values)  # ask again, keeping what was typed
            return
        self.pending_fill.pop(0)
        self.wizard.commit(outcome.state)
        for note in outcome.notes:
            self.app.notify(note, timeout=6)
        self._ask_next_fill()
