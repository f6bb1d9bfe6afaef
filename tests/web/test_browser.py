"""The wizard in a real browser: headless Chromium opens `lf-assistant web`, types keys, reads the screen.

The page draws the terminal on a canvas (xterm.js, WebGL), so there is no DOM text to read: the test feeds the
bytes the page receives on its websocket into a terminal emulator (pyte) sized like the page's terminal, which
gives the text the page shows. A screenshot of the page is saved in the test's temporary folder.

Needs Debian's `chromium` (`make browser-deps`) and the dev extras (playwright, pyte); no browser is downloaded.
"""

import json
import shutil
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
# Playwright adds --headless and a fresh profile folder (--user-data-dir) itself.
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]

if CHROMIUM is None:
    pytest.skip("Chromium is not installed: run `make browser-deps` (apt-get install -y chromium)",
                allow_module_level=True)
playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[dev]' (playwright)")
pyte = pytest.importorskip("pyte", reason="pip install -e '.[dev]' (pyte)")


class PageTerminal:
    """What the page's terminal shows, rebuilt from the page's websocket traffic."""

    def __init__(self, page):
        self.page, self.screen = page, None
        page.on("websocket", self._connected)

    def _connected(self, socket) -> None:
        size = parse_qs(urlparse(socket.url).query)
        self.screen = pyte.Screen(int(size["width"][0]), int(size["height"][0]))
        stream = pyte.ByteStream(self.screen)
        socket.on("framereceived", lambda data: stream.feed(data) if isinstance(data, bytes) else None)

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display) if self.screen else ""

    def wait_for(self, needle: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text():
                return self.text()
            self.page.wait_for_timeout(200)
        raise AssertionError(f"{needle!r} never showed; the page shows:\n{self.text()}")

    def press(self, *keys: str) -> None:
        self.page.focus(".xterm-helper-textarea")  # xterm's input; a click would land on a widget of the app
        for key in keys:
            self.page.keyboard.press(key)
            self.page.wait_for_timeout(300)


def open_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1100, "height": 700})
    terminal = PageTerminal(page)
    page.goto(url, wait_until="domcontentloaded")  # "load" would wait for web fonts that cannot be fetched
    return page, terminal


def test_wizard_in_chromium_drives_stages_and_resumes_after_reopening(web_folder, start_web, tmp_path):
    started = time.monotonic()
    server = start_web(web_folder).wait_until_answering()
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS,
                                             chromium_sandbox=False)
        try:
            page, terminal = open_page(browser, server.url)
            terminal.wait_for("Stage 0 · The shape of this run")
            screen = terminal.wait_for("[~] 0. Flow")
            assert "Open in a browser" in screen
            terminal.press("Control+n")  # stage 0's recommended answers: SFT, full flow, run here, LoRA
            terminal.wait_for("Stage 1 · Data")
            assert "alpaca_demo" in terminal.wait_for("400 rows")
            assert "[x] 0. Flow" in terminal.wait_for("[~] 1. Data")
            terminal.press("Space", "ArrowDown", "Space", "Control+n")  # identity off, alpaca_demo on (no placeholders)
            terminal.wait_for("Stage 2 · Model")
            assert "[x] 1. Data" in terminal.wait_for("[~] 2. Model")
            assert "lf-tiny-qwen3" in terminal.wait_for("Recommended: the built-in demo model")
            page.screenshot(path=str(tmp_path / "wizard-model-stage.png"))
            page.close()  # closing the tab ends that wizard process; its answers are saved

            states = list((web_folder / "lf_runs").glob("*/state.json"))
            assert len(states) == 1
            saved = json.loads(states[0].read_text())
            assert saved["stage"] == "model" and saved["datasets"] == ["alpaca_demo"]

            page, terminal = open_page(browser, server.url)  # reopening continues the same session
            terminal.wait_for("Stage 2 · Model")
            assert "[x] 1. Data" in terminal.wait_for("[~] 2. Model")
            assert len(list((web_folder / "lf_runs").glob("*/state.json"))) == 1
        finally:
            browser.close()
    shot = tmp_path / "wizard-model-stage.png"
    assert shot.stat().st_size > 10_000
    print(f"browser test: {time.monotonic() - started:.1f} s; screenshot {shot}")
