"""`lf-assistant web`: the same wizard in a browser, served by textual-serve.

Every page (every browser tab) starts its own wizard process, and that process reopens the newest unfinished
wizard session (`lf-assistant --resume-last`): the state is saved after each answer, so closing the tab and
opening the page again continues where it was. Training runs detached from any wizard process, so closing a tab
never stops it.

Access. The server binds 127.0.0.1 by default and then answers only requests addressed to a loopback name (a
page of another site cannot reach it through DNS rebinding), and its websocket only accepts pages of its own
origin. Every request must carry a token, in the page URL once (`/?token=...`, which sets an HttpOnly cookie for
the rest): on loopback too, since every user of a shared machine reaches 127.0.0.1 and the wizard runs as you.
Without `--token` a random one is made and printed in the URL; another address needs `--token`. The connection is plain HTTP: the token and the
session travel unencrypted, so on a network you do not trust use an SSH tunnel (`ssh -L 8000:127.0.0.1:8000
host`) or a TLS proxy in front, rather than a public bind.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from assistant.cli.common import checked_language, print_error

TOKEN_COOKIE = "lfa_token_{port}"  # per port: browsers share cookies across the ports of one host
TOKEN_ENV = "LFA_WEB_TOKEN"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
DEFAULT_PORT = 8000
PORT_TRIES = 50


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def page_url(host: str, port: int, token: str | None = None) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def child_command(runs_dir: Path, lang: str | None) -> str:
    """The shell command textual-serve runs for each page: the wizard, on the newest unfinished session."""
    argv = [os.path.abspath(sys.executable), "-m", "assistant.cli.main", "--resume-last",
            "--runs-dir", str(runs_dir)] + (["--lang", lang] if lang else [])
    return shlex.join(argv)


def web(
    host: str = typer.Option("127.0.0.1", "--host", metavar="ADDRESS", help="Address to listen on. Anything but a loopback address "
                             "needs --token."),
    port: int = typer.Option(DEFAULT_PORT, "--port", metavar="PORT", min=1, max=65535, help="Port to listen on."),
    token: Optional[str] = typer.Option(None, "--token", metavar="SECRET", envvar=TOKEN_ENV, help="The secret the page "
                                        f"URL must carry (?token=...); default: a random one, printed in the URL. Also "
                                        f"read from ${TOKEN_ENV}."),
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help="Runs folder (default ./lf_runs)."),
    lang: Optional[str] = typer.Option(None, "--lang", callback=checked_language, help="Interface language: en or zh."),
) -> None:
    """Serve the guided wizard in a browser (each tab continues the newest unfinished session; closing a tab
    never stops training). Ctrl+C stops the server."""
    from engine.rundir import runs_root

    if not is_loopback(host) and not token:
        print_error(f"--host {host} lets other machines reach the wizard, which can start training and write "
                    f"files here.\nGive an access token: --token SECRET (or ${TOKEN_ENV}), or keep the default "
                    "127.0.0.1 and use an SSH tunnel.")
        raise typer.Exit(2)
    if token is not None and len(token) < 8:
        print_error("--token must be at least 8 characters.")
        raise typer.Exit(2)
    # Loopback too: on a shared machine every local user reaches 127.0.0.1, and the wizard runs as you.
    token = token or secrets.token_urlsafe(18)
    runs = runs_root(runs_dir).resolve()
    server = make_server(host, port, token, child_command(runs, lang))
    if not is_loopback(host):
        typer.echo(f"warning: listening on {host}:{port}, reachable from other machines. Anyone with the token can "
                   "drive the wizard; the connection is not encrypted (prefer an SSH tunnel).", err=True)
    typer.echo(f"lf-assistant web: open {page_url(host, port, token)}")
    typer.echo(f"  sessions: {runs}  (each tab continues the newest unfinished one)")
    typer.echo("  Ctrl+C stops the server; running trainings keep going.")
    try:
        server.serve()
    except OSError as exc:
        print_error(f"cannot listen on {host}:{port}: {exc.strerror or exc}. Choose another --port.")
        raise typer.Exit(2) from None


def make_server(host: str, port: int, token: str | None, command: str):
    """A textual-serve Server with the access checks in front (textual-serve itself has none)."""
    import aiohttp_jinja2
    from aiohttp import web as aioweb
    from textual_serve.server import Server

    loopback = is_loopback(host)

    @aioweb.middleware
    async def guard(request: aioweb.Request, handler):
        from yarl import URL

        named = URL(f"http://{request.host}").host or ""
        if loopback and not is_loopback(named):
            raise aioweb.HTTPForbidden(text="This server only answers on 127.0.0.1 / localhost.\n")
        origin = request.headers.get("Origin")
        if request.path == "/ws" and origin and URL(origin).authority != URL(f"http://{request.host}").authority:
            raise aioweb.HTTPForbidden(text="Cross-origin connection refused.\n")
        cookie = TOKEN_COOKIE.format(port=port)
        given = request.query.get("token") or request.cookies.get(cookie)
        if token and not (given and hmac.compare_digest(given.encode(), token.encode())):
            raise aioweb.HTTPUnauthorized(text="Open the URL `lf-assistant web` printed (it carries ?token=...).\n")
        response = await handler(request)
        if token and request.query.get("token") and request.path == "/":
            response.set_cookie(cookie, token, httponly=True, samesite="Strict")
        return response

    class WizardServer(Server):
        async def _make_app(self) -> aioweb.Application:
            app = await super()._make_app()
            app.middlewares.append(guard)
            return app

        async def on_startup(self, app: aioweb.Application) -> None:
            """Quiet: `web` has already printed where to go (textual-serve prints a banner here)."""

        @aiohttp_jinja2.template("app_index.html")
        async def handle_index(self, request: aioweb.Request) -> dict:
            # The page's websocket URL follows the address the browser used (textual-serve derives it from the
            # bind address, which is wrong for 0.0.0.0 and for tunnels).
            base = f"{request.scheme}://{request.host}"
            ws_scheme = "wss" if request.scheme == "https" else "ws"
            return {"font_size": 16, "app_websocket_url": f"{ws_scheme}://{request.host}/ws",
                    "config": {"static": {"url": f"{base}/static/"}}, "application": {"name": "lf-assistant"}}

    return WizardServer(command, host=host, port=port, title="lf-assistant")


# ---------------------------------------------------------------------------------------- started from the wizard
def free_port(start: int = DEFAULT_PORT, tries: int = PORT_TRIES) -> int:
    """The first port from `start` that nothing listens on at 127.0.0.1."""
    for port in range(start, start + tries):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port between {start} and {start + tries - 1}")


def answers(port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def start_detached(runs_dir: Path, lang: str | None = None, *, wait_s: float = 20.0) -> tuple[str, Path, int]:
    """Start `lf-assistant web` on a free loopback port as its own session (it outlives the terminal wizard);
    (page URL, server log, server pid) once it answers. EngineError when it does not come up."""
    from engine.errors import EngineError

    runs_dir = Path(runs_dir).resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = runs_dir / f"web-{port}.log"
    argv = [sys.executable, "-m", "assistant.cli.main", "web", "--port", str(port), "--runs-dir", str(runs_dir)]
    root = str(Path(__file__).resolve().parents[2])
    token = secrets.token_urlsafe(18)  # through the environment: a command line is visible to every local user
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p),
           TOKEN_ENV: token}
    # The log holds the page URL and the access log, so the token: readable by this user only.
    descriptor = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.chmod(log_path, 0o600)
    with open(descriptor, "a", encoding="utf-8") as log:
        process = subprocess.Popen(argv + (["--lang", lang] if lang else []), stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if answers(port):
            return page_url("127.0.0.1", port, token), log_path, process.pid
        if process.poll() is not None:
            break
        time.sleep(0.2)
    if process.poll() is None:
        process.terminate()  # never left running unseen: the wizard reports the failure instead
    tail = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
    raise EngineError(f"The browser server did not start on port {port}: {' | '.join(tail) or 'no output'} "
                      f"(log: {log_path}).")
