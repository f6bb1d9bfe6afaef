"""The wizard stays headless, and the TUI never imports torch (it starts fast and never trains in-process)."""

import subprocess
import sys

WIZARD = ["assistant.wizard.build", "assistant.wizard.resume", "assistant.wizard.review", "assistant.wizard.adapt",
          "engine.measurement",
          *[f"assistant.wizard.stages.{name}" for name in
            ("flow", "data", "model", "gpu", "config", "preflight", "train", "validate", "export", "summary")]]


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_wizard_imports_neither_textual_nor_torch():
    modules = _modules_after("\n".join(f"import {name}" for name in WIZARD))
    assert not {m for m in modules if m.split(".")[0] in ("textual", "torch", "transformers")}


def test_every_screen_imports_without_torch():
    code = ("from assistant.tui.app import WizardApp\nfrom assistant.tui.screens import SCREENS, screen_class\n"
            "[screen_class(s) for s in SCREENS]\nimport assistant.tui.screens.review")
    modules = _modules_after(code)
    assert "textual" in modules and "torch" not in modules and "transformers" not in modules
