"""Putting a finished export in place without losing anything that was there.

The export is written into a fresh folder this process creates beside export_dir (`.lfa-export-XXXXXXXX`, a
unique name from mkdtemp), checked there, and only then swapped in:

- export_dir absent: one rename.
- export_dir an earlier export of ours (its lfa_export.json lists the files it wrote): files the user added
  since are KEPT: each is hard-linked into the new folder (same file, no copy), then the two folders are exchanged
  in one step (renameat2 RENAME_EXCHANGE; where the file system cannot, two renames a moment apart). Then the old
  folder loses only what the earlier export wrote and the links made here; anything else is left where it is.
  If a user file cannot be linked (another file system, a name the new export also writes), the export is refused
  and names the files, before anything changed.
- export_dir holding anything else: refused (see `check_target`), nothing changed.

Nothing outside the folders this process created is ever deleted. A killed export leaves the old export_dir
intact and, at worst, its own `.lfa-export-*` folder beside it.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

from engine.errors import ConfigError
from engine.filemodes import follow_umask, new_dir_mode
from engine.jsonio import write_text_atomic

RECORD = "lfa_export.json"
STAGING_PREFIX = ".lfa-export-"
# What exports written before the record listed its files always contained (weights come from the record).
_LEGACY_NAMES = {RECORD, "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "chat_template.jinja", "Modelfile", "vocab.json", "merges.txt",
                 "tokenizer.model", "added_tokens.json", "model.safetensors.index.json",
                 "pytorch_model.bin.index.json"}


def make_staging(target: Path) -> Path:
    """A new, empty folder beside `target` with a unique name, made by and for this export."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=target.parent))
    os.chmod(staging, new_dir_mode())
    return staging


def check_target(target: Path) -> None:
    """Refuse an export_dir that is a file, or a non-empty folder that is not an earlier export of ours."""
    if target.exists() and not target.is_dir():
        raise ConfigError(f"export_dir {target} is a file. Choose a folder path (new, empty, or an earlier export).")
    if target.is_dir() and any(target.iterdir()) and not _read_record(target):
        raise ConfigError(f"export_dir {target} already holds files that are not an earlier export; nothing was "
                          "changed. Choose an empty or new folder (an earlier lf-assistant export there is "
                          "replaced, keeping files you added to it).")


def files_of(folder: Path) -> list[str]:
    """Every file (and symlink) under `folder`, as sorted relative POSIX paths."""
    found = []
    for root, dirs, names in os.walk(folder):
        links = [name for name in dirs if os.path.islink(os.path.join(root, name))]  # not followed by walk
        for name in names + links:
            found.append((Path(root) / name).relative_to(folder).as_posix())
    return sorted(found)


def _read_record(folder: Path) -> dict:
    """The folder's lfa_export.json when it is one an export wrote (an operation and its weight files), else {}."""
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(record, dict) or record.get("operation") not in ("merge", "re-save") or \
            not isinstance(record.get("weight_files"), list):
        return {}
    return record


def written_by_export(folder: Path) -> set[str]:
    """The files an earlier export in `folder` wrote, from its record."""
    record = _read_record(folder)
    if not record:
        return set()
    if isinstance(record.get("files"), list):
        return {str(name) for name in record["files"]} | {RECORD}
    weights = record.get("weight_files") if isinstance(record.get("weight_files"), list) else []
    return _LEGACY_NAMES | {str(name) for name in weights}


def user_files(target: Path) -> list[str]:
    """Files in an earlier export folder that the export did not write: the user's."""
    ours = written_by_export(target)
    return [name for name in files_of(target) if name not in ours]


def install(staging: Path, target: Path) -> list[str]:
    """Swap the checked export in `staging` into `target`; returns notes. See the module docstring.

    Until the swap, any failure removes `staging` (new files, and links to kept ones) and leaves `target` as it
    was. After the swap `staging` holds the earlier export, and only its own files are ever removed from it."""
    try:
        kept = _prepare(staging, target)
        if kept is None:
            os.rename(staging, target)
            return []
        _exchange(staging, target)
    except BaseException:
        discard(staging)
        raise
    try:
        leftovers = _remove_old_export(staging, target, kept)
    except OSError as exc:
        leftovers = [f"(not tidied: {exc.strerror or exc})"]
    notes = [f"kept {len(kept)} file(s) you added to {target}: {', '.join(kept[:5])}"] if kept else []
    if leftovers:
        notes.append(f"{staging} still holds {', '.join(leftovers[:5])} (not written by an export); it was left "
                     "as it is.")
    return notes


def _prepare(staging: Path, target: Path) -> list[str] | None:
    """Record the files, set the modes, link the user's files in; None when there is no earlier export."""
    files = files_of(staging)
    record_path = staging / RECORD
    record = json.loads(record_path.read_text(encoding="utf-8")) if record_path.is_file() else {}
    record["files"] = sorted(set(files) | {RECORD})
    write_text_atomic(record_path, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    follow_umask(staging)  # mkdtemp made the folder 0700; an export is read by runtimes running as other users
    if not target.exists():
        return None
    check_target(target)
    return _link_user_files(target, staging, set(record["files"]))


def _link_user_files(target: Path, staging: Path, new_files: set[str]) -> list[str]:
    kept = user_files(target)
    clashes = [name for name in kept if name in new_files]
    if clashes:
        raise ConfigError(f"{target} holds files you added whose names the new export also writes: "
                          f"{', '.join(clashes[:5])}. Move them elsewhere (nothing was changed).")
    failed = []
    for name in kept:
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(target / name, staging / name, follow_symlinks=False)
        except OSError:
            failed.append(name)
    if failed:
        raise ConfigError(f"{target} holds files you added ({', '.join(failed[:5])}) that cannot be carried into "
                          "the new export on this file system. Move them elsewhere, or export to a new folder "
                          "(nothing was changed).")
    return kept


def _exchange(staging: Path, target: Path) -> None:
    """Make `staging` the new `target` and the old target live at `staging`, in one step where possible."""
    if _rename_exchange(staging, target):
        return
    holder = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX + "old-", dir=target.parent))
    os.rename(target, holder)  # replaces the empty folder just made
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(holder, target)
        raise
    os.rename(holder, staging)


def _rename_exchange(first: Path, second: Path) -> bool:
    """renameat2(RENAME_EXCHANGE): True when done, False when this system or file system cannot."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    result = renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), str(second))


def _remove_old_export(old: Path, target: Path, kept: list[str]) -> list[str]:
    """Delete from `old` what the earlier export wrote and the links made for kept files; list what remains."""
    ours = written_by_export(old)
    for name in files_of(old):
        path = old / name
        linked = name in kept and _same_file(path, target / name)
        if name in ours or linked:
            path.unlink()
    for root, dirs, _files in os.walk(old, topdown=False):
        for folder in dirs:
            try:
                (Path(root) / folder).rmdir()
            except OSError:
                pass  # not empty: it holds something that is not ours
    remaining = files_of(old)
    if not remaining:
        old.rmdir()
    return remaining


def _same_file(first: Path, second: Path) -> bool:
    try:
        a, b = os.lstat(first), os.lstat(second)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def discard(staging: Path) -> None:
    """Remove a staging folder this export created (it holds only new files and links to kept ones)."""
    shutil.rmtree(staging, ignore_errors=True)
