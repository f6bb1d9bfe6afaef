"""`lf-assistant web` without a browser: the page, the app behind its websocket, and who may reach them."""

import asyncio
import urllib.error
import urllib.request

import pytest
from typer.testing import CliRunner

from assistant.cli.main import app


def get(url: str, headers: dict | None = None) -> tuple[int, str, dict]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), dict(error.headers)


def test_web_serves_the_page_that_loads_the_app_on_loopback(web_folder, start_web):
    server = start_web(web_folder).wait_until_answering()
    status, page, _ = get(server.url)
    assert status == 200
    assert get(server.base)[0] == 401  # loopback too: another user of this machine reaches 127.0.0.1
    assert "textual.js" in page and f'data-session-websocket-url="ws://127.0.0.1:{server.port}/ws"' in page
    assert "<div>lf-assistant</div>" in page
    assert f"open http://127.0.0.1:{server.port}/" in server.output()
    # A page of another site that resolves its own name to 127.0.0.1 (DNS rebinding) is refused.
    status, _, _ = get(server.url, {"Host": f"attacker.example:{server.port}"})
    assert status == 403


async def _first_screen(url: str, origin: str, token: str, timeout: float = 60.0) -> str:
    import aiohttp
    from yarl import URL

    received = b""
    async with aiohttp.ClientSession(cookies={f"lfa_token_{URL(url).port}": token}) as session:
        async with session.ws_connect(url + "ws?width=100&height=30", origin=origin) as socket:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while b"Stage 0" not in received and loop.time() < deadline:
                message = await socket.receive(timeout=deadline - loop.time())
                if message.type == aiohttp.WSMsgType.BINARY:
                    received += message.data
    return received.decode("utf-8", errors="replace")


def test_each_connection_runs_the_wizard_and_other_origins_are_refused(web_folder, start_web):
    import aiohttp

    server = start_web(web_folder).wait_until_answering()
    screen = asyncio.run(_first_screen(server.base, origin=server.base.rstrip("/"), token=server.token))
    assert "Stage 0" in screen and "Open in a browser" in screen
    assert not list((web_folder / "lf_runs").glob("*/state.json"))  # nothing is written before the first answer
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        asyncio.run(_first_screen(server.base, origin="http://attacker.example", token=server.token))
    assert refused.value.status == 403


def test_another_address_needs_a_token(tmp_path):
    result = CliRunner().invoke(app, ["web", "--host", "0.0.0.0", "--runs-dir", str(tmp_path)],
                                env={"COLUMNS": "200", "LFA_WEB_TOKEN": ""})
    assert result.exit_code == 2
    assert "--token" in result.output and "Traceback" not in result.output


def test_with_a_token_every_request_must_carry_it(web_folder, start_web):
    token = "correct-horse-battery"
    server = start_web(web_folder, "--host", "0.0.0.0", "--token", token).wait_until_answering()
    assert "warning: listening on 0.0.0.0" in server.output()
    assert get(server.base)[0] == 401
    assert get(server.base + "?token=wrong-token-value")[0] == 401
    status, page, headers = get(server.base + f"?token={token}")
    assert status == 200 and "textual.js" in page
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and f"lfa_token_{server.port}=" in cookie
    # The page's scripts and websocket then authenticate with the cookie alone.
    assert get(server.base + "static/js/textual.js", {"Cookie": f"lfa_token_{server.port}={token}"})[0] == 200
    assert get(server.base + "static/js/textual.js")[0] == 401
