"""One live writer per run folder and per output_dir, and output folders that are provably ours.

A lock is an exclusive ``flock`` on ``<folder>/.lfa.lock``, held by the process that trains (or by torchrun for
several processes, which keeps it for the whole run). The kernel drops the lock when its holder dies, so a lock is
never stale: "held" means a live process holds it. The file also records who holds it (run id, pid, host, start
time) so a refusal can name the owner. The launcher takes the locks before it writes anything, then hands them
to the training process it starts (the open descriptors are inherited; ``LFA_HELD_LOCKS`` names them).

An output folder is ours when it carries ``.lfa-output.json``, written when a run claims the folder as its
training starts (after the model and data have loaded: a run that is refused, fails early or is only printed
for another machine changes nothing there). Training never writes into a non-empty folder that is not ours. The
marker lists every entry the run wrote (``record_outputs``: each checkpoint before it is written, the final
result's files after), and ``overwrite_output_dir`` removes only those: a file anyone else put into the folder
makes the overwrite refused, naming it, instead of deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import json
import os
import re
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EngineError
from engine.jsonio import read_json_dict, write_text_atomic

LOCK_NAME = ".lfa.lock"
_RUN_ID = re.compile(r"[\w.+-]{1,200}")
OUTPUT_MARKER = ".lfa-output.json"
HELD_LOCKS_ENV = "LFA_HELD_LOCKS"
OWN_FILES = (LOCK_NAME, OUTPUT_MARKER)
# Scratch entries only training writes (a checkpoint being written, DeepSpeed's shard staging, a PiSSA adapter
# being replaced), left behind when a run is killed mid-write: an earlier run's, whatever its marker lists.
SCRATCH_GLOBS = (".checkpoint-*.partial", ".deepspeed-staging", ".*.converting")


class FolderInUse(EngineError):
    """Another live process owns the folder."""


@dataclass
class Lock:
    """An exclusive lock on one folder, held through an open descriptor."""

    path: Path
    fd: int | None

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *_exc) -> None:
        self.release()


def owner_text(info: dict) -> str:
    run_id = info.get("run_id") or "an unknown run"
    pid, host = info.get("pid"), info.get("host")
    since = info.get("since")
    when = time.strftime(", since %Y-%m-%d %H:%M", time.localtime(since)) if isinstance(since, (int, float)) else ""
    where = f" (pid {pid} on {host}{when})" if pid else ""
    return f"run {run_id}{where}"


def read_owner(folder: Path) -> dict:
    """Who the lock file says holds the lock, for a refusal's words only (never to signal anyone): run_id, pid,
    host and since where each has its expected form; {} when the file is missing, empty or damaged."""
    data = read_json_dict(Path(folder) / LOCK_NAME)
    owner = {}
    if isinstance(data.get("run_id"), str) and _RUN_ID.fullmatch(data["run_id"]):
        owner["run_id"] = data["run_id"]
    if type(data.get("pid")) is int and 0 < data["pid"] < 1 << 22:
        owner["pid"] = data["pid"]
    if isinstance(data.get("host"), str) and 0 < len(data["host"]) <= 255:
        owner["host"] = data["host"]
    if type(data.get("since")) in (int, float) and 0 < data["since"] < 1e11:
        owner["since"] = data["since"]
    return owner


def _inherited_fd(path: Path) -> int | None:
    """The descriptor of ``path``'s lock this process inherited from its launcher, if any."""
    try:
        target = os.stat(path)
    except OSError:
        return None
    for item in os.environ.get(HELD_LOCKS_ENV, "").split(os.pathsep):
        if not item.isdigit():
            continue
        try:
            held = os.fstat(int(item))
        except OSError:
            continue
        if (held.st_dev, held.st_ino) == (target.st_dev, target.st_ino):
            return int(item)
    return None


def acquire(folder: str | Path, *, run_id: str, what: str) -> Lock:
    """Take ``folder``'s lock (creating the folder), or raise FolderInUse naming the live owner."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / LOCK_NAME
        inherited = _inherited_fd(path)
        if inherited is not None:
            return Lock(path, os.dup(inherited))
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise EngineError(f"Cannot write to {what} {folder}: {exc.strerror or exc}. Choose a folder you can "
                          "write to.") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        owner = read_owner(folder)
        raise FolderInUse(f"{what} {folder} is in use by {owner_text(owner)}. Wait for that run to end, stop it "
                          f"(`lf-assistant stop {owner.get('run_id') or 'RUN_ID'}`), or choose another {what}.") \
            from None
    info = {"run_id": run_id, "pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)
    return Lock(path, fd)


def is_held(folder: str | Path) -> bool:
    """Whether a live process holds ``folder``'s lock (this process included)."""
    path = Path(folder) / LOCK_NAME
    if not path.is_file():
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def holds_lock(pid: int, folder: str | Path) -> bool:
    """Whether process ``pid`` has ``folder``'s lock file open: the process that trains there always does (the
    trainer, or torchrun, keeps the lock it was handed for the whole run). A process that merely shares the pid
    and start time written in a status file does not."""
    import psutil

    try:
        target = os.stat(Path(folder) / LOCK_NAME)
        for opened in psutil.Process(pid).open_files():
            try:
                found = os.stat(opened.path)
            except OSError:
                continue
            if (found.st_dev, found.st_ino) == (target.st_dev, target.st_ino):
                return True
    except (OSError, psutil.Error, ValueError, OverflowError):
        return False
    return False


def handover_env(locks: list[Lock]) -> dict[str, str]:
    """What a child process needs to know it holds ``locks`` (pass their fds with ``pass_fds``)."""
    fds = [lock.fd for lock in locks if lock.fd is not None]
    for fd in fds:
        os.set_inheritable(fd, True)
    return {HELD_LOCKS_ENV: os.pathsep.join(str(fd) for fd in fds)}


# --- output folders -------------------------------------------------------------------------------------------

def marker_run(folder: Path) -> str | None:
    """The run id that claimed ``folder``, or None when it is not an lf-assistant output folder."""
    marker = Path(folder) / OUTPUT_MARKER
    if not marker.is_file():
        return None
    return str(read_json_dict(marker).get("run_id") or "unknown")


def foreign_entries(folder: Path) -> list[str]:
    if not Path(folder).is_dir():
        return []
    return sorted(p.name for p in Path(folder).iterdir() if p.name not in OWN_FILES)


def recorded_entries(folder: Path) -> set[str]:
    """The entries the run named in ``folder``'s marker wrote there (an old marker without the list: none)."""
    written = read_json_dict(Path(folder) / OUTPUT_MARKER).get("written")
    return {name for name in written if isinstance(name, str)} if isinstance(written, list) else set()


def _ours(name: str, recorded: set[str]) -> bool:
    return name in recorded or any(fnmatch.fnmatchcase(name, pattern) for pattern in SCRATCH_GLOBS)


def _listing(entries: list[str]) -> str:
    return ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")


def output_dir_problem(folder: str | Path, run_id: str | None, *, overwrite: bool, resume: bool) -> str | None:
    """Why ``run_id`` may not write into ``folder`` (None when it may). Read-only: validate calls it too."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        return f"output_dir {folder} is a file, not a folder. Choose a folder path."
    entries = foreign_entries(folder)
    if not entries:
        return None
    owner = marker_run(folder)
    if owner is None:
        return (f"output_dir {folder} holds files lf-assistant did not write ({_listing(entries)}). It never writes "
                "into or clears such a folder: choose an empty or new output_dir.")
    if owner == run_id or resume:
        return None
    if overwrite:
        recorded = recorded_entries(folder)
        others = [name for name in entries if not _ours(name, recorded)]
        if not others:
            return None
        return (f"output_dir {folder} holds the results of run {owner} and files that run did not write "
                f"({_listing(others)}). overwrite_output_dir replaces only what a run wrote: move those files out, "
                "or choose another output_dir.")
    return (f"output_dir {folder} holds the results of run {owner}. Set overwrite_output_dir: true to replace "
            "them, resume_from_checkpoint: auto to continue from its newest checkpoint, or choose another "
            "output_dir.")


def claim_output_dir(folder: str | Path, run_id: str, *, overwrite: bool, resume: bool) -> None:
    """Make ``folder`` this run's output folder, as its training starts (the caller holds its lock).
    ``overwrite`` first removes what an earlier run wrote there, and only that (``output_dir_problem`` refuses a
    folder that holds anything else)."""
    folder = Path(folder)
    problem = output_dir_problem(folder, run_id, overwrite=overwrite, resume=resume)
    if problem:
        raise EngineError(problem)
    owner, earlier = marker_run(folder), recorded_entries(folder)
    if overwrite and not resume and owner not in (None, run_id):
        for name in foreign_entries(folder):
            path = folder / name
            if not _ours(name, earlier):
                continue  # put there since the check above: never removed
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    # A run continued here (resumed, or resuming from another's checkpoints) keeps the list of what was written
    kept = earlier if owner == run_id or resume else set()
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / OUTPUT_MARKER, json.dumps({"run_id": run_id, "claimed_at": time.time(),
                                                          "written": sorted(kept)}))


def record_outputs(folder: str | Path, run_id: str, names) -> None:
    """Add ``names`` (top-level entries of ``folder``) to what run ``run_id`` wrote there; the main process only."""
    folder = Path(folder)
    data = read_json_dict(folder / OUTPUT_MARKER)
    recorded = recorded_entries(folder) if data.get("run_id") == run_id else set()
    if set(names) <= recorded:
        return
    write_text_atomic(folder / OUTPUT_MARKER, json.dumps({**data, "run_id": run_id,
                                                          "written": sorted(recorded | set(names))}))


@contextlib.contextmanager
def recording_outputs(folder: str | Path, run_id: str, *, enabled: bool = True):
    """Record the top-level entries that appear in ``folder`` while the block runs (also when it fails part-way)
    as written by ``run_id``: the final model's files, whose names the saving library chooses."""
    if not enabled:
        yield
        return
    before = set(foreign_entries(Path(folder)))
    try:
        yield
    finally:
        added = set(foreign_entries(Path(folder))) - before
        if added:
            record_outputs(folder, run_id, added)
