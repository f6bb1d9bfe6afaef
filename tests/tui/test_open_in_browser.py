"""Stage 0's "Open in a browser": the wizard starts `lf-assistant web`, saves the session and leaves with the URL."""

import json
import os
import signal
import urllib.error
import urllib.request

import pytest

from pilot_helpers import SIZE, make_app, wait_until


async def test_open_in_browser_starts_the_server_and_hands_the_session_over(workspace):
    app = make_app(workspace)
    pid = None
    try:
        async with app.run_test(size=SIZE) as pilot:
            # execution is the third question; "Open in a browser" is its third choice
            await pilot.press("tab", "tab", "down", "down", "enter", "ctrl+n")
            await wait_until(pilot, lambda: app.exit_hint is not None, timeout=60, what="server started")
        hint = app.exit_hint
        assert "http://127.0.0.1:" in hint and "continues in your browser" in hint
        url = hint.split()[hint.split().index("browser:") + 1]
        pid = int(hint.rsplit("kill ", 1)[1].split(")")[0])
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200 and "textual.js" in response.read().decode()
        # the page needs the token the hint carries: another user of this machine cannot drive the wizard
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url.split("?")[0], timeout=10)
        assert refused.value.code == 401
        logs = list((workspace / "lf_runs").glob("web-*.log"))  # it holds the URL: this user's only
        assert logs and all(log.stat().st_mode & 0o077 == 0 for log in logs)
        # The session is saved past stage 0 as a run-here session: the page's wizard reopens it there.
        state = json.loads((workspace / "lf_runs" / app.state.run_id / "state.json").read_text())
        assert state["execution"] == "run_here" and state["stage"] == "data" and "flow" in state["done"]
    finally:
        if pid is not None:
            os.killpg(pid, signal.SIGTERM)  # the server runs in its own session, started by this test
