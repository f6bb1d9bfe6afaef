"""Which Python files `trust_remote_code: true` would run from a model folder.

Consent to run a folder's code should be consent to named files. transformers imports the modules that
config.json / tokenizer_config.json name in `auto_map` ("modeling_x.XForCausalLM" -> modeling_x.py), and each
of those imports its siblings (`from .configuration_x import ...`). This follows both, reading the files with
`ast` (never importing them), so `lf-assistant models check` and the run log can list every file before any runs.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.jsonio import read_json_dict

_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_CONFIG_FILES = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json")


@dataclass
class RemoteCode:
    """The code a folder would run: local files, and references to code in other repositories."""

    files: list[str] = field(default_factory=list)
    """Python files in the folder, relative to it, in the order found."""
    elsewhere: list[str] = field(default_factory=list)
    """auto_map entries such as "org/repo--modeling.Cls": code that would be fetched from another repository."""
    missing: list[str] = field(default_factory=list)
    """Modules named by auto_map that are not in the folder."""

    def describe(self) -> str:
        parts = [", ".join(self.files) if self.files else "no local .py files"]
        if self.elsewhere:
            parts.append(f"code from other repositories: {', '.join(self.elsewhere)}")
        if self.missing:
            parts.append(f"named but absent: {', '.join(self.missing)}")
        return "; ".join(parts)


def remote_code_files(folder: Path) -> RemoteCode:
    """Every Python file in `folder` that loading it with trust_remote_code would execute (see module doc)."""
    folder = Path(folder)
    found = RemoteCode()
    queue = [module for name in _CONFIG_FILES for module in _auto_map_modules(folder / name, found)]
    seen: set[str] = set()
    while queue:
        module = queue.pop(0)
        if not _MODULE.fullmatch(module):
            found.missing.append(module[:100])  # not a module name: nothing inside the folder can match it
            continue
        relative = module.replace(".", "/") + ".py"
        if relative in seen:
            continue
        seen.add(relative)
        path = folder / relative
        if not path.is_file():
            if module not in found.missing:
                found.missing.append(module)
            continue
        found.files.append(relative)
        queue.extend(_local_imports(path, folder, module))
    return found


def _auto_map_modules(config_path: Path, found: RemoteCode) -> list[str]:
    auto_map = read_json_dict(config_path).get("auto_map")
    if not isinstance(auto_map, dict):
        return []
    references = []
    for value in auto_map.values():
        references.extend(value if isinstance(value, list) else [value])
    modules = []
    for reference in references:
        if not isinstance(reference, str) or "." not in reference:
            continue
        if "--" in reference:
            found.elsewhere.append(reference[:200])
            continue
        modules.append(reference.rsplit(".", 1)[0])
    return modules


def _local_imports(path: Path, folder: Path, module: str) -> list[str]:
    """Modules of the folder that `path` imports (relative imports, and absolute ones naming a sibling file)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError, RecursionError, OSError):
        return []
    package = module.rsplit(".", 1)[0] if "." in module else ""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = _resolve(node, package)
            if base is None:
                continue
            names.append(base)
            names.extend(f"{base}.{alias.name}" if base else alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return [name for name in names if name and (folder / (name.replace(".", "/") + ".py")).is_file()]


def _resolve(node: ast.ImportFrom, package: str) -> str | None:
    if node.level == 0:
        return node.module
    parts = package.split(".") if package else []
    if node.level - 1 > len(parts):
        return None
    parts = parts[:len(parts) - (node.level - 1)]
    if node.module:
        parts.append(node.module)
    return ".".join(parts)
