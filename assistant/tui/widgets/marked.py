"""Choice widgets whose state shows as a symbol, not by colour alone.

Textual draws the same glyph inside a radio button, a checkbox or a selection-list box whether it is on or off
and tells them apart by colour; over SSH, in a monochrome terminal or with NO_COLOR that difference is gone. These
subclasses draw the glyph only when the choice is on.
"""

from __future__ import annotations

from rich.segment import Segment
from textual.strip import Strip
from textual.widgets import Checkbox, RadioButton, SelectionList
from textual.widgets._toggle_button import ToggleButton

RADIO_ON = "●"
CHECK_ON = "X"


class MarkedRadioButton(RadioButton):
    """● when chosen, empty otherwise."""

    @property
    def BUTTON_INNER(self) -> str:  # noqa: N802 - the name Textual's ToggleButton reads
        return RADIO_ON if self.value else " "


class MarkedCheckbox(Checkbox):
    """X when ticked, empty otherwise."""

    @property
    def BUTTON_INNER(self) -> str:  # noqa: N802
        return CHECK_ON if self.value else " "


class MarkedSelectionList(SelectionList):
    """A multi-select list whose box shows X only for the selected entries."""

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        segments = list(strip)
        if len(segments) < 2 or segments[1].text != ToggleButton.BUTTON_INNER:
            return strip  # not an option line (past the end of the list)
        index = self.scroll_offset.y + y
        selected = self.get_option_at_index(index).value in self._selected
        segments[1] = Segment(CHECK_ON if selected else " ", segments[1].style)
        return Strip(segments, strip.cell_length)
