"""What a new user reads at 80x24 is whole where it matters: the run id on the board (typed back for --resume)."""

from pilot_helpers import FIXED_TIME, SIZE, answer_preflight_at_once, make_app, walk_to


def board_lines(app) -> list[str]:
    from assistant.tui.widgets.board import ProgressBoard

    return str(app.screen.query_one(ProgressBoard).render()).splitlines()


async def test_the_board_shows_the_whole_run_id_within_its_width(workspace, monkeypatch):
    answer_preflight_at_once(monkeypatch)
    app = make_app(workspace, now=FIXED_TIME)
    async with app.run_test(size=SIZE) as pilot:
        await walk_to(pilot, app, "GpuScreen")  # the model is chosen: the id names it
        run_id = app.state.run_id
        assert len(run_id) > 21 and run_id.startswith("lf-tiny-qwen3_")
        board = app.screen.query_one("#board")
        lines = board_lines(app)
        assert all(len(line) <= board.content_size.width for line in lines), lines
        start = lines.index("Run") + 1
        shown = lines[start:start + 3]
        assert run_id in ["".join(shown[:count]) for count in (1, 2, 3)], shown  # whole, over lines
