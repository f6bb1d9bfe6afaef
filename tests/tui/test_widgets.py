"""Small rendering rules that keep the 80x24 layout readable: the run id, wrapped log lines, empty answers."""

from assistant.tui.screens.train import eta_words, metric_label, since_logged, wrap_lines
from assistant.tui.screens.validate import answer_markup
from assistant.tui.widgets.board import RUN_ID_WIDTH, run_id_lines


def test_run_id_is_shown_whole_in_lines_of_the_board_width_keeping_its_time_stamp_together():
    assert run_id_lines("wizard_run_0102") == ["wizard_run_0102"]  # fits: one line
    for run_id, shown in [("lf-tiny-qwen3_lora_20260102_030405", ["lf-tiny-qwen3_lora_", "20260102_030405"]),
                          ("qwen3-0.6b_lora-dpo_20260102_030405-2", ["qwen3-0.6b_lora-dpo_", "20260102_030405-2"]),
                          ("qwen3-4b-instruct-2507_freeze_20260102_030405",
                           ["qwen3-4b-instruct-", "2507_freeze_", "20260102_030405"]),
                          ("m" * 30 + "_lora_20260102_030405", ["m" * 21, "m" * 9 + "_lora_", "20260102_030405"])]:
        assert run_id_lines(run_id) == shown and all(len(line) <= RUN_ID_WIDTH for line in shown)


def test_log_lines_fold_to_the_width_and_progress_bars_keep_their_last_state():
    line = "[2026-01-02 03:04:05] step 8/10 loss 0.6436 lr 0.000351 grad_norm 0.267 tok/s 520"
    folded = wrap_lines([line, "Loading:   0%|   | 0/24 [00:00<?, ?it/s]\rLoading: 100%|###| 24/24 [00:00<00:00, "
                               "28055.55it/s]", " 50%|#####     | 1/2", ""], 40)
    assert all(len(part) <= 40 for part in folded)
    assert "".join(part.strip() + " " for part in folded[:-3]).split() == line.split()
    assert folded[-3:] == ["Loading: 100% (24/24)", "50% (1/2)", ""]  # a bar's words, no fragment of it
    assert metric_label("rewards/margins") == "margins"


def test_an_empty_answer_says_so():
    assert "no text" in answer_markup("  \n ") and answer_markup("4") == "4"


def test_elapsed_and_eta_keep_moving_between_logged_steps():
    from engine.runstatus import RunStatus

    metrics = [{"step": 5, "loss": 1.0, "elapsed_s": 100.0, "eta_s": 300.0, "time": 1000.0}]
    live = RunStatus(state="running", elapsed_s=100.0, eta_s=300.0)
    assert since_logged(live, metrics, "elapsed_s", now=1060.0) == 160.0
    assert since_logged(live, metrics, "eta_s", now=1060.0) == 240.0
    assert since_logged(live, metrics, "eta_s", now=5000.0) == 0.0  # late: never a negative ETA
    ended = RunStatus(state="completed", elapsed_s=100.0)
    assert since_logged(ended, metrics, "elapsed_s", now=1060.0) == 100.0  # an ended run's clock stopped
    # Resumed at 5000: the time since the interrupted attempt's last row was no training.
    resumed = RunStatus(state="running", elapsed_s=100.0, started_at=900.0, resumed_at=5000.0)
    assert since_logged(resumed, metrics, "elapsed_s", now=5060.0) == 100.0


def test_before_the_first_logged_step_the_eta_is_the_preflights_and_never_runs_out():
    from engine.runstatus import RunStatus

    measured = {"predicted_s": 70.0, "startup_s": 20.0, "total_steps": 100}  # 0.5 s a step after 20 s start-up
    loading = RunStatus(state="running", step=0, total_steps=100, started_at=1000.0)
    assert eta_words(loading, [], measured, now=1005.0) == "ETA ~1:05 (pre-flight)"  # start-up still ahead
    # A slow start-up: the whole prediction counted down from the start read 0:00 at step 0.
    assert eta_words(loading, [], measured, now=1600.0) == "ETA ~0:50 (pre-flight)"
    resumed = RunStatus(state="pending", step=60, total_steps=100, started_at=1000.0, resumed_at=9000.0)
    assert eta_words(resumed, [], measured, now=9010.0) == "ETA ~0:30 (pre-flight)"  # 10 s of start-up + 40 steps
    assert eta_words(loading, [], {}, now=1600.0) == "ETA estimating…"  # no pre-flight: nothing to count down
    logged = RunStatus(state="running", step=5, total_steps=100, eta_s=300.0)
    rows = [{"step": 5, "eta_s": 300.0, "time": 1000.0}]
    assert eta_words(logged, rows, measured, now=1060.0) == "ETA 4:00"  # the run's own, once it logged one
    # Resumed: the killed attempt's ETA (logged at 1000) is not this attempt's, which began at 9000.
    stale = RunStatus(state="running", step=5, total_steps=100, eta_s=300.0, started_at=900.0, resumed_at=9000.0)
    assert eta_words(stale, rows, measured, now=9005.0) == "ETA ~1:02 (pre-flight)"


def test_chart_ticks_are_round_evenly_spaced_and_whole_steps():
    from assistant.tui.widgets.chart import nice_ticks, render_chart

    for low, high, count, whole in [(5, 15, 7, True), (1, 37, 7, True), (0.69, 1.02, 5, False),
                                    (0.3, 2.6, 5, False), (0.001, 2.0, 5, False), (-0.31, 0.42, 4, False)]:
        positions, labels = nice_ticks(low, high, count, whole=whole)
        gaps = {round(b - a, 9) for a, b in zip(positions, positions[1:])}
        assert len(gaps) == 1 and low - 1e-9 <= positions[0] and positions[-1] <= high + 1e-9, (low, high)
        assert count / 2.5 <= len(positions) <= count * 2.5
        assert len({len(label.split(".")[-1]) if "." in label else 0 for label in labels}) == 1  # same decimals
        if whole:
            assert all(label.isdigit() for label in labels)
    drawn = render_chart({"loss": [(5, 1.2), (10, 0.9), (15, 0.7)]}, 52, 12).plain
    axis = drawn.splitlines()[-1].split()
    assert axis and all(tick.isdigit() for tick in axis)  # fractional steps (6.7, 8.3) were shown before


def _plotted_range(lines: list[str]) -> tuple[tuple[float, float], tuple[float, float]]:
    """The steps at the plot's left and right edges and the values at its bottom and top edges, as the axes'
    tick marks (┬ along the bottom, ┤ up the side) place them."""
    top = next(row for row, line in enumerate(lines) if "┌" in line) + 1
    bottom = next(row for row, line in enumerate(lines) if "└" in line) - 1
    ticks = [(row, float(line.split("┤")[0])) for row, line in enumerate(lines) if line.split("┤")[0].strip()
             and "┤" in line]
    (first_row, first), (last_row, last) = ticks[0], ticks[-1]
    per_row = (first - last) / (last_row - first_row)
    axis = lines[bottom + 1]
    marks = [column for column, char in enumerate(axis) if char == "┬"]
    steps = [float(label) for label in lines[bottom + 2].split()]
    per_column = (steps[-1] - steps[0]) / (marks[-1] - marks[0])
    left, right = axis.index("└") + 1, axis.index("┘") - 1
    return ((steps[0] - (marks[0] - left) * per_column, steps[-1] + (right - marks[-1]) * per_column),
            (last - (bottom - last_row + 0.5) * per_row, first + (first_row - top + 0.5) * per_row))


def test_the_chart_holds_every_point_with_a_margin_and_says_what_a_point_is():
    import math

    from assistant.tui.widgets.chart import render_chart, y_range

    # logged every 20 steps from step 20: the first, highest loss lies before the first round step tick (50)
    losses = [(step, 1.2 + 2.0 * math.exp(-step / 80)) for step in range(20, 401, 20)]
    (left, right), (low, high) = _plotted_range(render_chart({"loss": losses}, 54, 12).plain.splitlines())
    column = (400 - 20) / 48
    assert abs(left - 20) <= column and abs(right - 400) <= column  # the first and the last step
    values = [loss for _, loss in losses]
    assert low < min(values) and max(values) < high  # the highest loss too
    low, high = y_range(values)
    margin = (max(values) - min(values)) * 0.05
    assert math.isclose(high - max(values), margin) and math.isclose(min(values) - low, margin)
    assert y_range([1.0, 1.0]) == (0.95, 1.05)  # a flat curve still sits inside the plot
    drawn = render_chart({"loss": losses}, 54, 12, note="each training point: the mean of 20 steps").plain
    assert drawn.splitlines()[0] == "⠤ loss  each training point: the mean of 20 steps"


def test_metric_names_and_run_states_read_in_the_interface_language():
    from assistant import i18n
    from assistant.formatting import metric_words
    from assistant.i18n.zh import STRINGS as ZH
    from assistant.tui.screens.review import state_words
    from assistant.tui.screens.train import metric_label

    assert (metric_words("rewards/accuracies"), metric_label("rewards/accuracies")) == ("reward accuracies",
                                                                                          "accuracies")
    i18n.set_language("zh")
    try:
        assert metric_words("rewards/accuracies") == "奖励准确率" and metric_label("rewards/margins") == "奖励间隔"
        assert state_words("stopped") == ZH["run.stopped"] != "stopped"
        assert state_words("wizard: config") == "wizard: config"  # a wizard's own stage stays as it is
        assert metric_words("custom/score") == "custom score"  # one the catalogs do not name reads as its key
        from assistant.wizard.stages.model import rule_words

        assert rule_words("registry") == ZH["rule.registry"] != "registry" and rule_words(None) == "-"
    finally:
        i18n.set_language("en")


def test_answers_and_messages_show_escape_sequences_without_obeying_them():
    """An answer or a held-out row may hold an escape sequence (OSC 52 writes the clipboard): shown escaped."""
    from assistant.tui.screens.chat import turn_markup
    from assistant.tui.screens.validate import answer_block

    hostile = "hi \x1b]52;c;ZXZpbA==\x07 [bold]there[/bold]"
    block = answer_block({"prompt": hostile, "base": hostile, "tuned": hostile})
    turn = turn_markup(hostile, {"tuned": hostile, "base": hostile})
    for markup in (block, turn):
        assert "\x1b" not in markup and "\x07" not in markup and "\\x1b]52" in markup
        assert "\\[bold]" in markup  # markup in the text stays text


def test_table_columns_are_measured_in_terminal_cells():
    """A Chinese header or value takes two cells a character: the column is as wide as it shows."""
    from assistant.tui.widgets.dialogs import column_widths

    assert column_widths(["参数", "值"], [["lr", "关闭（会询问）"]]) == [4, 14]
    assert column_widths(["parameter", "value"], [["lr", "off"]]) == [9, 5]
