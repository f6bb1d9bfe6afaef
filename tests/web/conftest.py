"""Starting `lf-assistant web` as a user does (a separate process), on a free port, in a temporary folder."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


TEST_TOKEN = "loopback-test-token"  # the server's token, given as LFA_WEB_TOKEN (a random one otherwise)


class WebServer:
    def __init__(self, folder: Path, *args: str):
        self.folder, self.port = folder, free_port()
        # No hub and no package index (pip honours PIP_NO_INDEX): the demo model is the one recommended.
        env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "PIP_NO_INDEX": "1", "LFA_LANG": "en",
               "LFA_WEB_TOKEN": TEST_TOKEN}
        self.token = args[list(args).index("--token") + 1] if "--token" in args else TEST_TOKEN
        # Output goes to a file: a pipe nobody reads would fill up with the access log and block the server.
        self.log = folder / f"web-{self.port}.out"
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "assistant.cli.main", "web", "--port", str(self.port),
                 "--runs-dir", str(folder / "lf_runs"), *args],
                cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_until_answering(self, timeout: float = 30.0) -> "WebServer":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"web exited with {self.process.returncode}: {self.output()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"web did not answer on port {self.port} within {timeout} s")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def url(self) -> str:
        """The page URL with its token, as `web` prints it."""
        return f"{self.base}?token={self.token}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> str:
        """Stop the server and the wizard processes it started (its process group); its output."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        return self.output()


@pytest.fixture()
def web_folder(tmp_path, demo_model_dir) -> Path:
    """A working folder with data/ and models/lf-tiny-qwen3, as `make run` leaves a checkout."""
    shutil.copytree(REPO / "data", tmp_path / "data")
    shutil.copytree(demo_model_dir, tmp_path / "models" / "lf-tiny-qwen3")
    return tmp_path


@pytest.fixture()
def start_web():
    servers: list[WebServer] = []

    def start(folder: Path, *args: str) -> WebServer:
        servers.append(WebServer(folder, *args))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
