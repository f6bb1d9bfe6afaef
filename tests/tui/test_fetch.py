"""A model that is not on the machine is fetched in the background, its progress on the board of every screen."""

import shutil

import pytest
from pilot_helpers import SIZE, choose_datasets, make_app, on_screen, wait_until


async def _to_model_screen(pilot, app):
    await pilot.press("ctrl+n")
    await wait_until(pilot, lambda: on_screen(app, "DataScreen") and app.screen.counts)
    choose_datasets(app, "alpaca_demo")
    await pilot.press("ctrl+n")
    await wait_until(pilot, lambda: on_screen(app, "ModelScreen"))


async def _type_model(pilot, app, name: str) -> None:
    field = app.screen.query_one("#model-input")
    field.value = name
    field.focus()
    await pilot.press("enter")


async def _offer_download(pilot, app, repo_id: str) -> None:
    """The model stage with a hub id typed in: it offers the download."""
    await _type_model(pilot, app, repo_id)
    await wait_until(pilot, lambda: app.screen.query_one("#fetch-box").display, what="download offered")


async def test_offline_download_fails_clearly_and_the_user_can_pick_another_model(workspace):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await _to_model_screen(pilot, app)
        await _offer_download(pilot, app, "Qwen/Qwen3-0.6B")
        assert "will be downloaded into models/Qwen3-0.6B" in str(app.screen.query_one("#resolution").render())
        await pilot.press("ctrl+n")  # the recommended action: the download starts and the wizard goes on
        await wait_until(pilot, lambda: app.state.download.get("state") == "failed", what="offline failure")
        assert "HF_HUB_OFFLINE" in app.state.download["error"]
        assert "failed" in str(app.screen.query_one("#board").render())
        if not on_screen(app, "ModelScreen"):
            await pilot.press("escape")
            await wait_until(pilot, lambda: on_screen(app, "ModelScreen"), what="back to the model")
        assert not app.state.model_path  # a failed download gives no model
        await _type_model(pilot, app, "lf-tiny-qwen3")
        await wait_until(pilot, lambda: app.state.model_path, what="the demo model instead")
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "GpuScreen"))


async def test_a_download_refused_offline_says_why_in_chinese(workspace):
    from textual.widgets import Static

    app = make_app(workspace, lang="zh")
    async with app.run_test(size=SIZE) as pilot:
        await _to_model_screen(pilot, app)
        await _offer_download(pilot, app, "Qwen/Qwen3-0.6B")
        app.screen.query_one("#fetch").press()
        await wait_until(pilot, lambda: app.state.download.get("state") == "failed", what="offline failure")
        shown = str(app.screen.query_one("#fetch-status", Static).render())
        assert shown.startswith("获取失败：离线：已设置 HF_HUB_OFFLINE") and "Unset it" not in shown, shown
        assert app.state.download["error"].startswith("Offline: HF_HUB_OFFLINE")  # the engine's words, kept


@pytest.mark.slow
async def test_demo_model_is_built_in_the_background_while_the_user_goes_on(workspace):
    shutil.rmtree(workspace / "models")
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await _to_model_screen(pilot, app)
        await wait_until(pilot, lambda: app.screen.query_one("#fetch-box").display, what="build offered")
        app.screen.query_one("#fetch").press()
        await wait_until(pilot, lambda: app.state.download.get("state") == "running")
        await pilot.press("ctrl+n")  # go on while it builds
        await wait_until(pilot, lambda: on_screen(app, "GpuScreen"))
        assert "Building lf-tiny-qwen3" in str(app.screen.query_one("#board").render()) or app.state.model_path
        await wait_until(pilot, lambda: app.state.model_path, timeout=180, what="the build to finish")
        assert app.state.model_path == str(workspace / "models" / "lf-tiny-qwen3")
        assert (workspace / "models" / "lf-tiny-qwen3" / "config.json").is_file()


async def test_the_board_shows_the_step_of_a_gguf_import_after_its_colon(workspace, monkeypatch):
    """After the bytes, the package source imports the GGUF: the board names the import's own step too."""
    import engine.models.download
    from engine.messages import Message
    from engine.models.download import DownloadProgress

    step = Message("gguf.dequantizing_tensor", "dequantizing the weights: tensor 3 of 24", {"done": 3, "tensors": 24})
    importing = Message("download.importing", f"importing (2/5): {step.text}", {"step": 2, "total": 5, "what": step})

    def start_download(repo_id, *, on_progress, **_options):
        on_progress(DownloadProgress(9000, 9000, 0.0, None, message=importing.text, phase_message=importing.to_dict()))

    monkeypatch.setattr(engine.models.download, "start_download", start_download)
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await _to_model_screen(pilot, app)
        await _offer_download(pilot, app, "Qwen/Qwen3-0.6B")
        await pilot.press("ctrl+n")
        board = app.screen.query_one("#board")
        await wait_until(pilot, lambda: "importing" in str(board.render()), what="the import step on the board")
        shown = " ".join(str(board.render()).split())
        assert "importing (2/5): dequantizing the weights: tensor 3 of 24" in shown, shown
