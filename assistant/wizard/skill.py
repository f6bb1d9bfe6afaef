"""The declarative workflow (`skills/<name>/skill.yaml`): stages, questions, defaults and guards.

The wizard and the screens ask this module what comes next and which stages apply; the order of the stages is
never written into a screen. The YAML is read with `yaml.safe_load` and checked field by field, so a typo in a
skill file is reported with the stage and key rather than surfacing as a KeyError mid-run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml

from engine.errors import ConfigError
from engine.resources import resource_dir

SKILLS_DIR = resource_dir("skills")

Mark = Literal["done", "current", "todo", "skipped"]
# The workflow chosen at the start (question `workflow` of stage 0) -> the skill that runs it. Preference training
# in all three flavours shares one skill; the flavour becomes pref_loss (skills/dpo/skill.yaml says how).
WORKFLOW_SKILLS: dict[str, str] = {"sft": "sft", "dpo": "dpo", "orpo": "dpo", "simpo": "dpo", "pt": "pt", "rm": "rm",
                                   "kto": "kto"}
TRAINING_STAGES = ("sft", "dpo", "pt", "rm", "kto")
MARK_TEXT: dict[str, str] = {"done": "[x]", "current": "[~]", "todo": "[ ]", "skipped": "[-]"}


@dataclass(frozen=True)
class Question:
    """One question of a stage: an id (its answer's key in the wizard state), the choices and the default."""

    id: str
    choices: tuple[str, ...]
    default: str
    note: str | None = None
    """An i18n key for a line shown under the choices (what this skill wants the user to know here)."""


@dataclass(frozen=True)
class Stage:
    """One stage (one screen). `when` maps answer keys to the values under which the stage applies."""

    id: str
    board: str | None
    questions: tuple[Question, ...] = ()
    when: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    title: str | None = None
    """An i18n key for the screen title when this skill names the stage differently (else stage.<id>.title)."""

    @property
    def title_key(self) -> str:
        return self.title or f"stage.{self.id}.title"

    def question(self, question_id: str) -> Question:
        for question in self.questions:
            if question.id == question_id:
                return question
        raise KeyError(f"stage {self.id} has no question {question_id!r}")


@dataclass(frozen=True)
class Skill:
    """A whole workflow: the board lines and the stages in order."""

    name: str
    board: tuple[str, ...]
    stages: tuple[Stage, ...]
    training_stage: str = "sft"
    """The engine's `stage` this workflow trains; the run's config is written as <training_stage>.yaml."""
    workflows: tuple[str, ...] = ("sft",)
    """The answers to stage 0's `workflow` question this skill runs."""

    @property
    def config_file(self) -> str:
        return f"{self.training_stage}.yaml"

    @property
    def stage_ids(self) -> list[str]:
        return [stage.id for stage in self.stages]

    def stage(self, stage_id: str) -> Stage:
        for stage in self.stages:
            if stage.id == stage_id:
                return stage
        raise KeyError(f"skill {self.name} has no stage {stage_id!r}; stages: {', '.join(self.stage_ids)}")

    def applies(self, stage_id: str, answers: Mapping[str, Any]) -> bool:
        """Whether a stage applies under these answers (an unanswered guard key counts as applying)."""
        for key, allowed in self.stage(stage_id).when.items():
            value = answers.get(key)
            if value is not None and value not in allowed:
                return False
        return True

    def next_stage(self, stage_id: str, answers: Mapping[str, Any]) -> str | None:
        """The first applicable stage after `stage_id`, or None at the end."""
        ids = self.stage_ids
        for candidate in ids[ids.index(stage_id) + 1:]:
            if self.applies(candidate, answers):
                return candidate
        return None

    def previous_stage(self, stage_id: str, answers: Mapping[str, Any]) -> str | None:
        ids = self.stage_ids
        for candidate in reversed(ids[:ids.index(stage_id)]):
            if self.applies(candidate, answers):
                return candidate
        return None

    def stage_number(self, stage_id: str) -> int | None:
        """The number of the board line a stage belongs to (the screen header shows it, so the two agree)."""
        line = self.stage(stage_id).board
        return self.board.index(line) if line in self.board else None

    def board_marks(self, current: str, done: set[str] | list[str], answers: Mapping[str, Any]) -> list[tuple[str, Mark]]:
        """(board line, mark) for every line: skipped when none of its stages apply, current when the current stage
        belongs to it, done when all applicable ones are done."""
        done = set(done)
        marks: list[tuple[str, Mark]] = []
        for line in self.board:
            stages = [s.id for s in self.stages if s.board == line and self.applies(s.id, answers)]
            if not stages:
                marks.append((line, "skipped"))
            elif current in stages:  # also when it was done before and the user came back to it (Esc)
                marks.append((line, "current"))
            elif all(s in done for s in stages):
                marks.append((line, "done"))
            else:
                marks.append((line, "todo"))
        return marks


def _fail(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}. Fix the skill file (see skills/sft/skill.yaml for the shape).")


def _question(raw: Any, where: str) -> Question:
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
        raise _fail(where, "a question needs an id")
    choices = raw.get("choices")
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
        raise _fail(f"{where} question {raw['id']}", "choices must be a non-empty list of names")
    default = raw.get("default", choices[0])
    if default not in choices:
        raise _fail(f"{where} question {raw['id']}", f"default {default!r} is not one of {choices}")
    note = raw.get("note")
    if note is not None and not isinstance(note, str):
        raise _fail(f"{where} question {raw['id']}", "note must be an i18n key")
    return Question(raw["id"], tuple(choices), default, note)


def _stage(raw: Any, board: tuple[str, ...], index: int) -> Stage:
    where = f"stage #{index + 1}"
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
        raise _fail(where, "each stage needs an id")
    where = f"stage {raw['id']}"
    unknown = set(raw) - {"id", "board", "questions", "when", "settings", "title"}
    if unknown:
        raise _fail(where, f"unknown keys {sorted(unknown)}")
    line = raw.get("board")
    if line is not None and line not in board:
        raise _fail(where, f"board line {line!r} is not one of {list(board)}")
    when = raw.get("when") or {}
    if not isinstance(when, dict) or not all(isinstance(v, list) for v in when.values()):
        raise _fail(where, "when must map answer keys to lists of values")
    settings = raw.get("settings") or {}
    if not isinstance(settings, dict):
        raise _fail(where, "settings must be a mapping")
    questions = tuple(_question(q, where) for q in raw.get("questions") or [])
    title = raw.get("title")
    if title is not None and not isinstance(title, str):
        raise _fail(where, "title must be an i18n key")
    return Stage(raw["id"], line, questions, {k: tuple(v) for k, v in when.items()}, settings, title)


def parse_skill(data: Any, source: str = "skill") -> Skill:
    """A Skill from the parsed YAML; ConfigError naming the stage and key for anything malformed."""
    if not isinstance(data, dict):
        raise _fail(source, "the file must hold a mapping")
    board = data.get("board")
    if not isinstance(board, list) or not all(isinstance(b, str) for b in board):
        raise _fail(source, "board must be a list of line names")
    raw_stages = data.get("stages")
    if not isinstance(raw_stages, list) or not raw_stages:
        raise _fail(source, "stages must be a non-empty list")
    stages = tuple(_stage(raw, tuple(board), i) for i, raw in enumerate(raw_stages))
    ids = [s.id for s in stages]
    if len(set(ids)) != len(ids):
        raise _fail(source, f"stage ids repeat: {ids}")
    question_ids = [q.id for s in stages for q in s.questions]
    if len(set(question_ids)) != len(question_ids):
        raise _fail(source, f"question ids repeat: {question_ids}")
    training_stage = data.get("training_stage", "sft")
    if training_stage not in TRAINING_STAGES:
        raise _fail(source, f"training_stage {training_stage!r} is not one of {', '.join(TRAINING_STAGES)}")
    workflows = data.get("workflows", ["sft"])
    if not isinstance(workflows, list) or not all(w in WORKFLOW_SKILLS for w in workflows):
        raise _fail(source, f"workflows must be a list of {', '.join(WORKFLOW_SKILLS)}")
    return Skill(str(data.get("name", source)), tuple(board), stages, training_stage, tuple(workflows))


def extend(base: dict, child: dict) -> dict:
    """A skill declared as its differences from another (`extends: sft`): top-level keys replace the base's; each
    stage named in the child replaces the base stage's keys it gives, with `settings` merged key by key; stages
    listed under `drop_stages` are left out. Unless the child declares stage 0's questions, its `workflow`
    question defaults to the child's first workflow."""
    merged = {key: value for key, value in base.items() if key != "stages"}
    merged.update({key: value for key, value in child.items() if key not in ("stages", "extends", "drop_stages")})
    overrides = {stage["id"]: stage for stage in child.get("stages") or [] if isinstance(stage, dict)}
    dropped = set(child.get("drop_stages") or [])
    stages = []
    for stage in base.get("stages") or []:
        if stage.get("id") in dropped:
            continue
        own = overrides.get(stage.get("id"), {})
        new = dict(stage, **{key: value for key, value in own.items() if key != "settings"})
        new["settings"] = {**(stage.get("settings") or {}), **(own.get("settings") or {})}
        stages.append(new)
    merged["stages"] = stages
    flow = next((stage for stage in stages if stage["id"] == "flow"), None)
    if flow is not None and "questions" not in overrides.get("flow", {}) and child.get("workflows"):
        flow["questions"] = [dict(q, default=child["workflows"][0]) if q.get("id") == "workflow" else q
                             for q in flow.get("questions") or []]
    return merged


_CACHE: dict[Path, Skill] = {}


def load_skill(name: str = "sft", *, skills_dir: Path | None = None) -> Skill:
    """Load and check skills/<name>/skill.yaml (cached per path)."""
    path = (skills_dir or SKILLS_DIR) / name / "skill.yaml"
    if path not in _CACHE:
        if not path.is_file():
            raise ConfigError(f"Skill file {path} is missing. Reinstall lf-assistant from a source checkout.")
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and isinstance(data.get("extends"), str):
            base_path = (skills_dir or SKILLS_DIR) / data["extends"] / "skill.yaml"
            if not base_path.is_file() or data["extends"] == name:
                raise _fail(str(path), f"extends {data['extends']!r}, which is not a skill here")
            data = extend(yaml.safe_load(base_path.read_text(encoding="utf-8")), data)
        _CACHE[path] = parse_skill(data, str(path))
    return _CACHE[path]


def skill_for(workflow: str | None, *, skills_dir: Path | None = None) -> Skill:
    """The skill that runs a workflow (None: SFT, the flow before the question existed)."""
    name = WORKFLOW_SKILLS.get(workflow or "sft")
    if name is None:
        raise ConfigError(f"Unknown workflow {workflow!r}; known: {', '.join(WORKFLOW_SKILLS)}.")
    return load_skill(name, skills_dir=skills_dir)
