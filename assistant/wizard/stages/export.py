"""Stage 7: export — merge a LoRA/QLoRA adapter into its full-precision base, or re-save a full model.

For Full (and Freeze) training nothing is merged: the output folder is already a whole model, and the screen
never calls it a merge. Merging into a quantized base is refused: the result is a broken model (LLaMA-Factory
#5171); merge into the full-precision base and quantize afterwards.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from assistant.i18n import t, t_message
from assistant.wizard.skill import Skill
from assistant.wizard.stages import Outcome, refused
from assistant.wizard.state import WizardState
from engine.methods import is_adapter

STAGE = "export"
EXPORT_FILE = "export.yaml"
EXPORTED = re.compile(r"exported to (.+)$")
ERROR_MESSAGE = "error_message: "
"""How the export process gives its error as a code with values, on the line after its ``error:`` lines."""
PROGRESS = re.compile(r"progress\s+(\d+)\s*/\s*(\d+)")


def merges(method: str | None) -> bool:
    """True when export merges an adapter (LoRA/QLoRA); False when it re-saves a whole model."""
    return is_adapter(method)


def default_dir(state: WizardState, skill: Skill, train_config: dict) -> str:
    """models/<base>-merged for LoRA/QLoRA, models/<base>-sft for Full/Freeze (absolute); -2, -3, ... after it
    when an earlier export holds that folder."""
    suffix = skill.stage(STAGE).settings["suffix"].get(state.method or "lora", "-sft")
    base = Path(str(train_config["model_name_or_path"]).rstrip("/")).name
    folder = (Path.cwd() / "models" / f"{base}{suffix}").resolve()
    for number in range(2, 1000):  # an earlier run's export is never the suggestion: the next free name is
        if not (folder.is_file() or (folder.is_dir() and any(folder.iterdir()))):
            break
        folder = folder.with_name(f"{base}{suffix}-{number}")
    return str(folder)


def quantized_base_problem(state: WizardState, train_config: dict) -> str | None:
    """A sentence when the adapter would be merged into a quantized base (config.json quantization_config)."""
    if not merges(state.method):
        return None
    base = Path(str(train_config["model_name_or_path"]))
    try:
        config = json.loads((base / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    if config.get("quantization_config"):
        method = config["quantization_config"].get("quant_method", "quantized")
        return t("export.quantized_base", base=base.name, method=method)
    return None


def export_config(state: WizardState, train_config: dict, export_dir: str, skill: Skill) -> dict:
    """export.yaml's content from the engine: the training template, no quantization, the chosen device."""
    from engine.export import make_export_config

    on_gpu = bool(state.device) and state.device.get("platform") != "cpu"
    return dict(make_export_config(state.output_dir or train_config["output_dir"], method=state.method or "lora",
                                   base_model=train_config["model_name_or_path"],
                                   template=train_config["template"], export_dir=export_dir,
                                   export_size=skill.stage(STAGE).settings.get("export_size", 5),
                                   export_device="auto" if on_gpu else "cpu",
                                   trust_remote_code=bool(train_config.get("trust_remote_code"))))


def check_export(state: WizardState, config: dict, template: str, train_config: dict) -> list[str]:
    problems = []
    quantized = quantized_base_problem(state, train_config)
    if quantized:
        problems.append(quantized)
    if config.get("quantization_bit"):
        problems.append(t("export.no_quantization"))
    if config.get("template") != template:
        problems.append(t("validate.template_mismatch", infer=config.get("template"), train=template))
    if merges(state.method) != bool(config.get("adapter_name_or_path")):
        problems.append(t("validate.adapter_mismatch", method=state.method))
    from engine.errors import EngineError
    from engine.export import check_export_config, load_export_config

    try:
        problems += check_export_config(load_export_config(config))
    except EngineError as exc:
        problems.append(str(exc))
    return problems


def set_export_dir(state: WizardState, text: str) -> Outcome:
    """The export folder: must not be the base model, the training output or a non-empty folder."""
    text = (text or "").strip()
    if not text:
        return refused(t("export.empty_dir"))
    target = Path(text).expanduser().resolve()
    protected = {Path(p).resolve() for p in (state.model_path, state.output_dir) if p}
    if target in protected:
        return refused(t("export.same_dir", path=str(target)))
    if target.is_file() or (target.is_dir() and any(target.iterdir())):
        return refused(t("export.not_empty", path=str(target)))
    return Outcome(state.replace(export_dir=str(target)))


def export_command(run_folder: Path) -> list[str]:
    return [sys.executable, "-m", "engine.export", str(Path(run_folder) / EXPORT_FILE)]


def result_lines(lines: list[str], export_dir: str | Path | None) -> list[str]:
    """The export's checks and notes as it printed them (``check passed: NAME (DETAIL)``, ``note: ...``), in the
    interface language from the record it wrote (lfa_export.json): the checks where it has them all, each note it
    holds with the same words."""
    from engine.jsonio import read_json_dict

    printed = [line for line in lines if line.startswith(("check", "note"))]
    record = read_json_dict(Path(export_dir) / "lfa_export.json") if export_dir else {}
    notes = [_note_line(line, record.get("note_messages")) for line in printed if line.startswith("note")]
    checks = record.get("checks")
    if not isinstance(checks, list) or len(checks) != sum(line.startswith("check") for line in printed) \
            or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in checks):
        return [line for line in printed if line.startswith("check")] + notes
    said = [t("export.check", state=t("export.check_passed" if c.get("passed") is True else "export.check_failed"),
              name=t_message(c.get("name_message"), c["name"]),
              detail=t_message(c.get("detail_message"), str(c.get("detail", "")))) for c in checks]
    return said + notes


def _note_line(line: str, coded: object) -> str:
    """A ``note: ...`` line in the interface language, from the recorded note with the same English words."""
    words = line.removeprefix("note:").strip()
    note = next((n for n in coded if isinstance(n, dict) and n.get("text") == words), None) \
        if isinstance(coded, list) else None
    return t("export.note", note=t_message(note)) if note else line


def failure_lines(lines: list[str]) -> list[str]:
    """Why the export process failed: its error in the interface language where it gave one as a code with values
    (the checks that failed, each with its figures), else its ``error`` lines as printed, else its last lines."""
    coded = next((line.removeprefix(ERROR_MESSAGE) for line in lines if line.startswith(ERROR_MESSAGE)), None)
    try:
        said = t_message(json.loads(coded)) if coded else ""
    except ValueError:
        said = ""
    if said:
        return [said]
    return [line for line in lines if line.startswith("error") and not line.startswith(ERROR_MESSAGE)] or lines[-3:]


def parse_line(line: str) -> tuple[str, object] | None:
    """('progress', (i, n)) as step i of n begins, or ('exported', path), from a line the export process printed."""
    done = EXPORTED.search(line.strip())
    if done:
        return "exported", done.group(1).strip()
    match = PROGRESS.search(line)
    return ("progress", (int(match.group(1)), int(match.group(2)))) if match else None
