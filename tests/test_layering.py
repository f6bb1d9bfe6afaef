"""Layering is checked, not hoped for: the import-linter contracts in .importlinter hold (the engine never reaches
the front ends, recipes never import the public API, the engine's layers and packages import no cycle, and the
front ends use only the engine's public modules)."""

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_import_contracts_hold():
    linter = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert linter, "import-linter is a dev dependency: pip install -e '.[dev]'"
    done = subprocess.run([linter, "--config", str(REPO / ".importlinter")], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:]
    assert "5 kept, 0 broken" in done.stdout
