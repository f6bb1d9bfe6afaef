"""A fake model hub on 127.0.0.1 for download tests: just enough of the Hugging Face Hub API (model and dataset
repos) and of ModelScope's.

The real clients (`huggingface_hub` via HF_ENDPOINT, `modelscope` via MODELSCOPE_ENDPOINT) talk to it exactly as
they talk to the real hubs. Files are served from folders the test creates, with Range support (resume), an
optional bandwidth cap (so progress is observable), an optional latency (for the source probe) and an optional
connection drop part-way through a file (an interrupted transfer). No Xet headers are ever sent, so
huggingface_hub falls back to plain HTTP. The server binds a free port on 127.0.0.1 only and shuts itself down
after `lifetime_s` even if a test forgets to stop it.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CHUNK = 64 * 1024


@dataclass
class Logged:
    method: str
    path: str
    file: str | None
    range: str | None


@dataclass
class HubOptions:
    throttle_bps: float | None = None
    """Cap on the body bytes per second of each file transfer (None: as fast as possible)."""
    latency_s: float = 0.0
    """Delay before every response."""
    drop_after: dict[str, int] = field(default_factory=dict)
    """file path -> bytes after which the first GET of that file is cut off."""


def make_tiny_repo(folder: Path, *, weight_bytes: int = 2 * 2**20, shards: int = 1, seed: int = 0) -> Path:
    """A model folder with config, tokenizer and float32 safetensors weights (one file or `shards` shards)."""
    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "torch_dtype": "float32",
              "hidden_size": 64, "num_hidden_layers": 2}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"}),
        encoding="utf-8")
    rng = np.random.default_rng(seed)
    per_shard = weight_bytes // 4 // shards
    if shards == 1:
        save_file({"w": rng.standard_normal(per_shard, dtype=np.float32)}, str(folder / "model.safetensors"))
        return folder
    weight_map, total = {}, 0
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({f"w{i}": rng.standard_normal(per_shard, dtype=np.float32)}, str(folder / name))
        weight_map[f"w{i}"], total = name, total + per_shard * 4
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    return folder


class FakeHub:
    """`with FakeHub({"org/name": folder}) as hub:` then point HF_ENDPOINT / MODELSCOPE_ENDPOINT at hub.url."""

    def __init__(self, repos: dict[str, Path], options: HubOptions | None = None, *, lifetime_s: float = 120):
        self.repos = {repo: Path(folder) for repo, folder in repos.items()}
        self.options = options or HubOptions()
        self.log: list[Logged] = []
        self._dropped: set[str] = set()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._timer = threading.Timer(lifetime_s, self.stop)
        self._timer.daemon = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        self._thread.start()
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()

    def gets(self, file: str) -> list[Logged]:
        """Every GET of one file's content (HF resolve or ModelScope repo?FilePath=)."""
        with self._lock:
            return [e for e in self.log if e.method == "GET" and e.file == file]

    # ---- repo contents
    def files(self, repo: str) -> list[str]:
        root = self.repos[repo]
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())

    def should_drop(self, file: str) -> int | None:
        with self._lock:
            if file in self.options.drop_after and file not in self._dropped:
                self._dropped.add(file)
                return self.options.drop_after[file]
        return None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _handler_for(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep pytest output clean
            pass

        def do_HEAD(self) -> None:
            self._route(head=True)

        def do_GET(self) -> None:
            self._route(head=False)

        # ---- routing
        def _route(self, *, head: bool) -> None:
            time.sleep(hub.options.latency_s)
            url = urlparse(self.path)
            parts = [unquote(p) for p in url.path.split("/") if p]
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if parts[:2] in (["api", "models"], ["api", "datasets"]) and len(parts) >= 4:
                return self._hf_api(parts[2] + "/" + parts[3], parts[4:])
            if parts[:1] == ["datasets"] and len(parts) >= 6 and parts[3] == "resolve":  # a dataset repo's file
                return self._serve(parts[1] + "/" + parts[2], "/".join(parts[5:]), head, hf=True)
            if parts[:3] == ["api", "v1", "models"] and len(parts) >= 6 and parts[5] == "repo":
                return self._ms_api(parts[3] + "/" + parts[4], parts[6:], query, head)
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._serve(parts[0] + "/" + parts[1], "/".join(parts[4:]), head, hf=True)
            self._json({"error": "not found"}, 404)

        def _hf_api(self, repo: str, rest: list[str]) -> None:
            if repo not in hub.repos:
                return self._json({"error": "Repository not found"}, 404, {"X-Error-Code": "RepoNotFound"})
            root = hub.repos[repo]
            if not rest or rest[0] == "revision":
                siblings = [{"rfilename": f} for f in hub.files(repo)]
                return self._json({"id": repo, "modelId": repo, "sha": COMMIT, "private": False,
                                   "siblings": siblings})
            if rest[0] == "tree":
                entries = [{"type": "file", "path": f, "size": (root / f).stat().st_size,
                            "oid": hashlib.sha1((root / f).read_bytes()).hexdigest()} for f in hub.files(repo)]
                return self._json(entries)
            self._json({"error": "not found"}, 404)

        def _ms_api(self, repo: str, rest: list[str], query: dict, head: bool) -> None:
            if repo not in hub.repos:
                return self._json({"Code": 404, "Success": False, "Message": f"model {repo} not found"}, 404)
            if rest == ["files"]:
                root = hub.repos[repo]
                files = [{"Name": Path(f).name, "Path": f, "Type": "blob", "Size": (root / f).stat().st_size,
                          "Sha256": _sha256(root / f), "Revision": COMMIT} for f in hub.files(repo)]
                return self._json({"Code": 200, "Success": True, "Data": {"Files": files}})
            if not rest and "FilePath" in query:
                return self._serve(repo, query["FilePath"], head, hf=False)
            self._json({"Code": 404, "Success": False}, 404)

        # ---- file bodies
        def _serve(self, repo: str, file: str, head: bool, *, hf: bool) -> None:
            range_header = self.headers.get("Range")
            with hub._lock:
                hub.log.append(Logged("HEAD" if head else "GET", self.path, file, range_header))
            path = hub.repos.get(repo, Path("/nonexistent")) / file
            if not path.is_file():
                return self._json({"error": "Entry not found"}, 404, {"X-Error-Code": "EntryNotFound"})
            size = path.stat().st_size
            start = int(range_header.split("=")[1].split("-")[0]) if range_header else 0
            self.send_response(206 if range_header else 200)
            headers = {"Content-Length": str(size - start), "Accept-Ranges": "bytes",
                       "Content-Type": "application/octet-stream"}
            if range_header:
                headers["Content-Range"] = f"bytes {start}-{size - 1}/{size}"
            if hf:
                headers |= {"X-Repo-Commit": COMMIT, "ETag": f'"{_sha256(path)}"'}
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            if not head:
                self._body(path, file, start)

        def _body(self, path: Path, file: str, start: int) -> None:
            drop_at = hub.should_drop(file)
            sent = 0
            with path.open("rb") as fh:
                fh.seek(start)
                while chunk := fh.read(CHUNK):
                    if drop_at is not None and sent + len(chunk) > drop_at:
                        self.wfile.write(chunk[: drop_at - sent])
                        self.wfile.flush()
                        self.close_connection = True
                        return  # the client sees the connection close before Content-Length bytes
                    try:
                        self.wfile.write(chunk)
                    except (BrokenPipeError, ConnectionResetError):
                        return  # the client went away (a cancelled download)
                    sent += len(chunk)
                    if hub.options.throttle_bps:
                        time.sleep(len(chunk) / hub.options.throttle_bps)

        def _json(self, payload, status: int = 200, extra: dict | None = None) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

    return Handler
