"""File modes that follow the user's umask.

`tempfile.mkstemp` creates files 0600 and `mkdtemp` folders 0700 whatever the umask says. Every atomic writer
here goes through one of them, so without a chmod a run folder, an export or a rewritten dataset_info.json would
become private to its owner: a shared project folder, a serving container or a non-root Docker volume could no
longer read them. Files and folders made with plain open()/mkdir() already follow the umask.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def current_umask() -> int:
    """The process umask, read without changing it where /proc tells it (os.umask is a set-and-restore)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """What open() would give a new file: 0666 less the umask."""
    return 0o666 & ~current_umask()


def new_dir_mode() -> int:
    """What mkdir() would give a new folder: 0777 less the umask."""
    return 0o777 & ~current_umask()


def mode_for_replacement(path: Path) -> int:
    """The mode a file written over `path` should get: the existing file's, else a new file's."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return new_file_mode()


def follow_umask(root: Path) -> None:
    """chmod `root` (a file, or a folder and everything inside it) to the modes plain open()/mkdir() give.

    For trees this process just created in a temporary place (mkdtemp, mkstemp, libraries that write 0600)."""
    root = Path(root)
    file_mode, dir_mode = new_file_mode(), new_dir_mode()
    if not root.is_dir():
        os.chmod(root, file_mode)
        return
    for folder, _dirs, files in os.walk(root):
        os.chmod(folder, dir_mode)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                executable = os.stat(path).st_mode & 0o111
                os.chmod(path, dir_mode if executable else file_mode)
