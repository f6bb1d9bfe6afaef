"""Modal dialogs: confirm a config table before it is written, confirm an action, edit one value, fill values."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Button, DataTable, Input, Label, OptionList, SelectionList, Static

from assistant.i18n import t
from assistant.tui.widgets.keyhelp import KeyHelp
from assistant.wizard.stages.train import display_path

PATH_KEYS = ("model_name_or_path", "adapter_name_or_path", "dataset_dir", "output_dir", "export_dir")


def fmt_value(value: Any, key: str = "") -> str:
    """A config value as it reads in YAML (paths inside the working directory shown relative, a count as a whole
    number: count_as_written)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if key in PATH_KEYS and isinstance(value, str) and value.startswith("/"):
        return display_path(value)
    return str(count_as_written(value, key))


def count_as_written(value: Any, key: str) -> Any:
    """val_size as the user writes it: LLaMA-Factory reads it below 1 as a share of the rows and from 1 on as a
    row count, which the float field holds as 6.0; a count reads 6."""
    if key == "val_size" and isinstance(value, float) and value >= 1 and value.is_integer():
        return int(value)
    return value


def column_widths(columns: list[str], rows: list[list[Any]]) -> list[int]:
    """Each column's widest cell (the header included), in terminal cells (a CJK character takes two): what it
    takes unfolded."""
    from rich.cells import cell_len

    return [max(cell_len(str(row[i])) for row in [columns, *rows]) for i in range(len(columns))]


def short_path(text: str, width: int) -> str:
    """A path wider than `width` cells shortened in the middle with its file name kept whole
    (saves/lf-tiny-qwen3/lora/sft_20260102_030405 -> saves/…/sft_20260102_030405), the folders kept from the
    start as far as they fit; a name wider than that keeps its end (a run's folder ends with its time stamp). Text
    without a `/`, or that fits, is returned as it is."""
    from rich.cells import cell_len

    head, slash, name = text.rpartition("/")
    if cell_len(text) <= width or not slash:
        return text
    tail = "…/" + name
    if cell_len(tail) > width:
        end = ""
        for character in reversed(text):
            if cell_len(character + end) > width - 1:
                break
            end = character + end
        return "…" + end
    start = ""
    for folder in head.split("/"):
        if cell_len(start + folder + "/" + tail) > width:
            break
        start += folder + "/"
    return start + tail


def is_path(text: str) -> bool:
    return "/" in text and not any(character.isspace() for character in text)


def fill_table(table: DataTable, columns: list[str], rows: list[list[Any]], keys: list[str] | None = None,
               width: int | None = None, short_paths: bool = False, share: int = 1) -> None:
    """Rows of (name, value). With `width` (the table's), the last column takes what the others leave and a long
    value (a path) wraps onto more lines of its row instead of being cut at the edge; with `short_paths` as well,
    a path too wide for it is shortened in the middle instead (short_path: one line that ends with the file name,
    where a fold broke the path anywhere), for a table whose full values are a key away (the config stage edits
    the row) or listed beside it. `share`: how many last columns take what the others leave, in equal parts
    (two values side by side)."""
    from rich.cells import cell_len
    from rich.text import Text

    table.clear(columns=True)
    if not width or not rows:
        table.add_columns(*columns)
        for index, row in enumerate(rows):
            table.add_row(*[str(cell) for cell in row], key=keys[index] if keys else None)
        return
    first = column_widths(columns, rows)[:-share]
    room = width - 2 * len(columns) - 2
    least = 12 * share
    while sum(first) + least > room and max(first, default=0) > 12:  # the widest column folds first
        widest = first.index(max(first))
        first[widest] = max(12, first[widest] - (sum(first) + least - room))
    last = max(12, (room - sum(first)) // share)
    widths = first + [last] * share
    for index, name in enumerate(columns):
        table.add_column(name, width=widths[index])
    for index, row in enumerate(rows):
        cells = [str(cell) for cell in row]
        if short_paths:
            cells[-share:] = [short_path(cell, last) if is_path(cell) else cell for cell in cells[-share:]]
        lines = max(max(1, -(-cell_len(cell) // size)) for cell, size in zip(cells, widths))
        table.add_row(*[Text(cell, overflow="fold") for cell in cells], height=lines,
                      key=keys[index] if keys else None)


class ConfirmTable(ModalScreen[bool]):
    """A YAML about to be written, as a parameter | value table; y writes it, n goes back without writing.

    With `first`, those keys (the ones that matter: changed from the example, and the key training parameters)
    are listed and the rest is folded into one line, a key away (a). `rows` is always everything written."""

    # Enter and Ctrl+N confirm like y (the one-key path); the arrows still scroll the table.
    BINDINGS = [Binding("y", "answer(True)", show=False), Binding("n", "answer(False)", show=False),
                Binding("enter", "enter", show=False, priority=True),
                Binding("ctrl+n", "answer(True)", show=False, priority=True),
                Binding("escape", "answer(False)", show=False), Binding("a", "toggle_all", show=False)]

    def __init__(self, title: str, rows: list[tuple[str, Any]], note: str = "", first: list[str] | None = None) -> None:
        super().__init__()
        self.title_text, self.rows, self.note = title, rows, note
        self.first = [key for key, _ in rows if key in set(first)] if first else None
        self.show_all = first is None

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.title_text, classes="dialog-title")
            table = DataTable(id="confirm-table", cursor_type="row", zebra_stripes=True)
            yield table
            yield Static("", id="folded", classes="hint")
            if self.note:
                yield Static(self.note, classes="note")
            with Horizontal(classes="buttons"):
                yield Button(t("button.write"), id="yes", variant="success")
                yield Button(t("button.cancel"), id="no")
        keys = [("Enter/y", "key.confirm"), ("n", "key.cancel"), ("↑↓", "key.scroll")]
        yield KeyHelp(keys + ([("a", "key.all")] if self.first is not None else []))

    def on_mount(self) -> None:
        self._fill()
        self.query_one(DataTable).focus()

    def _fill(self) -> None:
        shown = self.rows if self.show_all else [(k, v) for k, v in self.rows if k in self.first]
        fill_table(self.query_one(DataTable), [t("col.parameter"), t("col.value")],
                   [[k, fmt_value(v, k)] for k, v in shown], width=min(76, self.app.size.width - 4) - 6)
        folded = self.query_one("#folded", Static)
        hidden = len(self.rows) - len(shown)
        folded.update(t("confirm.folded", count=hidden) if hidden else
                      (t("confirm.all_shown", count=len(self.rows)) if self.first is not None else ""))
        folded.display = self.first is not None

    def action_toggle_all(self) -> None:
        if self.first is not None:
            self.show_all = not self.show_all
            self._fill()

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    def action_enter(self) -> None:
        """Enter writes, unless a button has the focus (Tab to Cancel, then Enter, cancels)."""
        focused = self.focused
        self.dismiss(focused.id == "yes" if isinstance(focused, Button) else True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class ConfirmDialog(ModalScreen[bool]):
    """A yes/no question (stopping a run, leaving a stage with work in flight)."""

    BINDINGS = [Binding("y", "answer(True)", show=False), Binding("n", "answer(False)", show=False),
                Binding("escape", "answer(False)", show=False)]

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog small"):
            yield Static(self.message)
            with Horizontal(classes="buttons"):
                yield Button(t("button.yes"), id="yes", variant="warning")
                yield Button(t("button.no"), id="no")
        # No has the focus (the safe answer to Enter), so the keys for both are shown
        yield KeyHelp([("y", "key.yes"), ("n/Esc", "key.no")])

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class EditValue(ModalScreen["str | None"]):
    """Edit one parameter: its help text, then a list of its choices or a text field. Enter sets, Esc cancels."""

    BINDINGS = [Binding("escape", "cancel", show=False)]

    def __init__(self, key: str, current: Any, help_text: str, choices: tuple | None = None,
                 all_keys: list[str] | None = None) -> None:
        super().__init__()
        self.key, self.current, self.help_text, self.choices = key, current, help_text, choices
        self.all_keys = all_keys

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog small"):
            if self.all_keys is not None:
                yield Label(t("config.which_param"), classes="dialog-title")
                yield Input(placeholder="learning_rate", id="edit-key",
                            suggester=SuggestFromList(self.all_keys, case_sensitive=True))
            else:
                yield Label(self.key, classes="dialog-title")
                yield Static(self.help_text, classes="note")
                if self.choices:
                    options = [fmt_value(choice) for choice in self.choices]
                    yield OptionList(*options, id="edit-choices")
                else:
                    current = count_as_written(self.current, self.key)  # a path stays whole: no display_path
                    yield Input(value=fmt_value(current) if current is not None else "", id="edit-value")
        yield KeyHelp([("Enter", "key.set"), ("Esc", "key.cancel")])

    def on_mount(self) -> None:
        widget = self.query_one("#edit-key, #edit-choices, #edit-value")
        widget.focus()
        if isinstance(widget, OptionList) and self.current in (self.choices or ()):
            widget.highlighted = list(self.choices).index(self.current)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(fmt_value(self.choices[event.option_index]))

    def action_cancel(self) -> None:
        self.dismiss(None)


def split_names(value: Any) -> list[str]:
    """A comma-separated value (or a list of names) as its names, each once, in order."""
    items = value if isinstance(value, (list, tuple)) else str(value or "").split(",")
    return list(dict.fromkeys(str(item).strip() for item in items if str(item).strip()))


class NameList(SelectionList):
    """The names to pick: Space toggles the highlighted one, Enter sets the value (an option list's Enter would
    toggle)."""

    BINDINGS = [Binding("enter", "confirm", show=False)]

    def action_confirm(self) -> None:
        self.screen.action_confirm()


class EditNames(ModalScreen["str | None"]):
    """Edit a key that takes several names (report_to, lora_target, ...): pick any of them, or type the list.

    The text field below the list always holds the value that Enter sets, the picked names in the list's order
    plus any typed name the list does not offer; typing there updates the marks in the list. A name in ``alone``
    (all, none) stands for the whole or nothing: picking it clears the others, picking another clears it, and a
    line says which were cleared. Esc cancels."""

    BINDINGS = [Binding("escape", "cancel", show=False)]

    def __init__(self, key: str, current: Any, help_text: str, names: tuple[str, ...],
                 alone: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.key, self.help_text, self.names, self.alone = key, help_text, tuple(names), tuple(alone)
        self.current = split_names(current)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog small"):
            yield Label(self.key, classes="dialog-title")
            yield Static(self.help_text, classes="note")
            yield NameList(*[(name, name, name in self.current) for name in self.names], id="edit-names")
            yield Static("", id="names-note", classes="hint")
            yield Label(t("edit.names_value"), classes="hint")
            yield Input(value=",".join(self.current), id="edit-value")
        yield KeyHelp([("Space", "key.toggle"), ("Enter", "key.set"), ("Tab", "key.type"), ("Esc", "key.cancel")])

    def on_mount(self) -> None:
        names = self.query_one(NameList)
        names.focus()
        picked = [index for index, name in enumerate(self.names) if name in self.current]
        names.highlighted = picked[0] if picked else 0
        self.query_one("#names-note", Static).display = False

    def _value(self) -> list[str]:
        return split_names(self.query_one("#edit-value", Input).value)

    def _note(self, text: str) -> None:
        note = self.query_one("#names-note", Static)
        note.update(text)
        note.display = bool(text)

    def on_selection_list_selection_toggled(self, event: SelectionList.SelectionToggled) -> None:
        """A name picked or unpicked with Space (or a click): the value follows; an `alone` name and the others
        exclude each other."""
        event.stop()
        names = self.query_one(NameList)
        name = str(event.selection.value)
        cleared: list[str] = []
        if name in names.selected:
            typed = [other for other in self._value() if other not in self.names]
            if name in self.alone:
                cleared = [other for other in names.selected if other != name] + typed
                keep = [name]
            else:
                cleared = [other for other in names.selected if other in self.alone]
                keep = [other for other in names.selected if other not in self.alone] + typed
            for other in cleared:
                if other in self.names:
                    names.deselect(other)
        else:
            keep = [other for other in self._value() if other != name]
        self._note(t("edit.names_alone", name=name, cleared=", ".join(cleared)) if cleared and name in self.alone
                   else t("edit.names_replaced", name=name, cleared=", ".join(cleared)) if cleared else "")
        picked = set(names.selected)
        value = [other for other in self.names if other in picked] + [other for other in keep
                                                                      if other not in self.names]
        self.query_one("#edit-value", Input).value = ",".join(value)

    def on_input_changed(self, event: Input.Changed) -> None:
        """Typed names mark the list (a name the list does not offer stays in the text). The field's value now,
        not the event's: a later toggle may have rewritten it already."""
        wanted = set(self._value())
        names = self.query_one(NameList)
        for name in self.names:
            if name in wanted:
                names.select(name)
            else:
                names.deselect(name)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_confirm()

    def action_confirm(self) -> None:
        self.dismiss(",".join(self._value()))

    def action_cancel(self) -> None:
        self.dismiss(None)


class AskValues(ModalScreen["dict | None"]):
    """One text field per name (e.g. the {{name}} and {{author}} of a templated dataset). Enter sets them all."""

    BINDINGS = [Binding("escape", "cancel", show=False), Binding("ctrl+s", "submit", show=False),
                Binding("ctrl+n", "submit", show=False, priority=True)]

    def __init__(self, title: str, names: list[str], values: dict[str, str] | None = None, note: str = "") -> None:
        super().__init__()
        self.title_text, self.names, self.values, self.note = title, names, values or {}, note

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog"):
            yield Static(self.title_text, classes="dialog-title")
            if self.note:
                yield Static(self.note, classes="note")
            for index, name in enumerate(self.names):
                yield Label("{{" + name + "}}")
                yield Input(value=self.values.get(name, ""), id=f"value-{index}", classes="value-input")
        yield KeyHelp([("Tab", "key.move"), ("Enter", "key.submit"), ("^N", "key.next"), ("Esc", "key.cancel")])

    def on_mount(self) -> None:
        self.query(Input).first().focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter sets the values once every field holds one (the suggested ones: a single Enter); until then it
        goes to the next empty field, so typing them in reads field by field."""
        inputs = list(self.query(Input))
        position = inputs.index(event.input)
        empty = [field for field in inputs[position + 1:] + inputs[:position + 1] if not field.value.strip()]
        if empty:
            empty[0].focus()
        else:
            self.action_submit()

    def action_submit(self) -> None:
        self.dismiss({name: self.query_one(f"#value-{i}", Input).value for i, name in enumerate(self.names)})

    def action_cancel(self) -> None:
        self.dismiss(None)
