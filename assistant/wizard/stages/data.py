"""Stage 1: the data — registered datasets from a dataset folder, or the user's own files brought in safely.

Custom files are checked first (every problem with its row), optionally converted into a new file, copied into
the dataset folder and registered in dataset_info.json (atomically). A templated dataset ({{name}}, {{author}},
any {{var}}) is filled into a copy registered under a new name. The user's files are never modified.

Preference training (`ranking` mode) takes only pairs: registered datasets with "ranking": true, and custom files
whose every row has a chosen and a rejected answer, non-empty and different.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assistant.i18n import t
from assistant.wizard.stages import Outcome, refused
from assistant.wizard.state import WizardState
from engine.resources import resource_dir

STAGE = "data"


@dataclass
class DatasetRow:
    """One registered dataset as the list shows it."""

    name: str
    file_name: str | None
    formatting: str
    ranking: bool
    available: bool
    """The rows are on this machine (a local file that exists); hub-only entries are listed but not selectable."""
    note: str = ""


BUNDLED_DATA = resource_dir("data")


def default_dir(configured: str = "data") -> str:
    """The dataset folder to start from: ./data when it holds dataset_info.json, else the demo data shipped
    with lf-assistant (so a run started outside a checkout still finds datasets)."""
    local = Path(configured)
    if (local / "dataset_info.json").is_file() or not (BUNDLED_DATA / "dataset_info.json").is_file():
        return configured
    return str(BUNDLED_DATA)


def find_dir(text: str) -> Outcome:
    """The dataset folder the user named (it must hold dataset_info.json); refusals say where it looked."""
    from engine.data.registry import find_dataset_dir
    from engine.errors import EngineError

    try:
        folder = find_dataset_dir(text or "data")
    except EngineError as exc:
        return refused(str(exc), code="no_dataset_dir")
    return Outcome(None, notes=[str(folder)])


def list_datasets(dataset_dir: Path, *, ranking: bool = False) -> list[DatasetRow]:
    """Every entry of dataset_info.json, with whether it can be trained on here: SFT takes the entries without
    "ranking", preference training (ranking=True) only those with it."""
    from engine.data.registry import dataset_file_path, load_dataset_info
    from engine.errors import EngineError

    rows = []
    for name, spec in load_dataset_info(Path(dataset_dir)).items():
        available, note = spec.is_local, ""
        if not spec.is_local:
            note = t("data.hub_only")
        else:
            try:
                dataset_file_path(spec, Path(dataset_dir))
            except EngineError:
                available, note = False, t("data.file_missing")
        if spec.ranking != ranking:
            available, note = False, t("data.preference" if spec.ranking else "data.not_pairs")
        rows.append(DatasetRow(name, spec.file_name, spec.formatting, spec.ranking, available, note))
    return rows


def shown_rows(listing: list[DatasetRow], *, ranking: bool) -> tuple[list[DatasetRow], list[str]]:
    """(rows to list, names hidden): preference training hides SFT datasets, which it cannot use at all; SFT
    lists preference datasets greyed out with the reason (the user may have meant the other workflow)."""
    if not ranking:
        return listing, []
    return [row for row in listing if row.ranking], [row.name for row in listing if not row.ranking]


def count_rows(dataset_dir: Path, name: str) -> tuple[int, float]:
    """(rows, mean characters per row) of a registered local dataset."""
    import json

    from engine.data.loader import read_records
    from engine.data.registry import dataset_file_path, get_dataset_spec

    spec = get_dataset_spec(name, Path(dataset_dir))
    records = read_records(dataset_file_path(spec, Path(dataset_dir)))
    chars = sum(len(json.dumps(r, ensure_ascii=False)) for r in records)
    return len(records), (chars / len(records) if records else 0.0)


def preview(dataset_dir: Path, name: str, limit: int = 3) -> list[dict[str, Any]]:
    """The first rows, normalized to messages; the assistant turns are what training learns."""
    from engine.data.formats import convert_record
    from engine.data.loader import read_records
    from engine.data.registry import dataset_file_path, get_dataset_spec

    spec = get_dataset_spec(name, Path(dataset_dir))
    records = read_records(dataset_file_path(spec, Path(dataset_dir)))
    return [convert_record(record, spec, index) for index, record in enumerate(records[:limit])]


def choose(state: WizardState, dataset_dir: Path, names: list[str], listing: list[DatasetRow],
           counts: dict[str, tuple[int, float]]) -> Outcome:
    """Train on these registered datasets (at least one; each available for SFT)."""
    if not names:
        return refused(t("data.none_selected"))
    by_name = {row.name: row for row in listing}
    problems = [t("data.not_available", name=n, note=by_name[n].note if n in by_name else t("data.unknown"))
                for n in names if n not in by_name or not by_name[n].available]
    if problems:
        return refused(*problems)
    return Outcome(state.replace(dataset_dir=str(Path(dataset_dir).resolve()), datasets=list(names),
                                 dataset_rows={n: counts[n][0] for n in names if n in counts},
                                 dataset_chars={n: counts[n][1] for n in names if n in counts}))


# ----------------------------------------------------------------------------------------- templated datasets
def placeholders(dataset_dir: Path, name: str) -> list[str]:
    """The {{var}} names a registered dataset's file contains, in order of first appearance."""
    from engine.data import find_placeholders
    from engine.data.registry import dataset_file_path, get_dataset_spec

    spec = get_dataset_spec(name, Path(dataset_dir))
    return list(find_placeholders(dataset_file_path(spec, Path(dataset_dir))))


def _free_name(dataset_dir: Path, source: Path, base: str, registered: dict) -> tuple[str, Path]:
    """<base>, <base>_2, ...: the first name whose file does not exist and that is not registered yet (an
    earlier filled copy is never overwritten)."""
    for number in range(1, 1000):
        name = base if number == 1 else f"{base}_{number}"
        target = source.with_name(f"{name}{source.suffix}") if source.stem != name else source
        if not target.exists() and name not in registered:
            return name, target
    raise ValueError(f"no free name for {base} in {dataset_dir}")


def fill_template(state: WizardState, dataset_dir: Path, name: str, values: dict[str, str], suffix: str) -> Outcome:
    """Write <name><suffix> with every {{var}} replaced, register it, and train on it instead of `name`."""
    empty = [var for var, value in values.items() if not str(value).strip()]
    if empty:
        return refused(t("data.empty_values", names=", ".join(empty)))
    from engine.data import fill_placeholders
    from engine.data.registry import dataset_file_path, get_dataset_spec, load_dataset_info, register_dataset
    from engine.errors import EngineError

    dataset_dir = Path(dataset_dir).resolve()
    try:
        spec = get_dataset_spec(name, dataset_dir)
        source = dataset_file_path(spec, dataset_dir)
        new_name, target = _free_name(dataset_dir, source, f"{name}{suffix}", load_dataset_info(dataset_dir))
        fill_placeholders(source, values, target)
        entry = dict(spec.to_dict(), file_name=target.relative_to(dataset_dir).as_posix())
        register_dataset(dataset_dir, new_name, entry)
    except EngineError as exc:
        return refused(str(exc))
    datasets = [new_name if n == name else n for n in state.datasets]
    rows = {(new_name if k == name else k): v for k, v in state.dataset_rows.items()}
    chars = {(new_name if k == name else k): v for k, v in state.dataset_chars.items()}
    filled = dict(state.filled, **{new_name: {"from": name, "values": dict(values), "file": str(target)}})
    return Outcome(state.replace(datasets=datasets, dataset_rows=rows, dataset_chars=chars, filled=filled),
                   notes=[t("data.filled", name=new_name, path=str(target))])


# ------------------------------------------------------------------------------------------------ custom files
def check_custom(path_text: str, *, ranking: bool = False) -> tuple[Path | None, Any, list[str]]:
    """(path, the engine's CheckReport, problems as lines) for one file the user named. With ranking, the file
    is read as preference pairs whatever it looks like, so each row without both answers is listed."""
    from engine.data import check_file
    from engine.errors import EngineError

    path = Path(path_text.strip()).expanduser()
    if not path.exists():
        return None, None, [t("data.no_such_file", path=str(path))]
    try:
        report = check_file(path)
        if ranking:
            return path, *check_pairs(path, report)
    except EngineError as exc:
        return path, None, [str(exc)]
    return path, report, [describe_problem(p) for p in report.problems]


def check_pairs(path: Path, report: Any) -> tuple[Any, list[str]]:
    """(report, problems) of a file read as preference pairs: the engine's row checks under a ranking entry
    (missing or empty chosen/rejected answers, with row numbers), plus rows whose two answers are the same.

    A file that is not pairs at all gets one line that says so first: SFT rows have nothing to prefer."""
    from engine.data.check import check_file, spec_for
    from engine.data.files import read_rows

    if report.format == "unknown":
        return report, [describe_problem(p) for p in report.problems]
    read = read_rows(path)
    lead = [] if report.ranking else [t("data.not_pairs_file", rows=report.rows)]
    if not report.ranking:
        report = check_file(path, spec=spec_for(read.rows, report.format, True, path.stem))
        report.ranking = False  # the file is not pairs; the row problems below say where
    same = same_answer_problems(read.rows, read.lines, report.spec)
    report.problems = sorted([*report.problems, *same], key=lambda p: (p.row is not None, p.row or 0))
    return report, lead + [describe_problem(p) for p in report.problems]


def same_answer_problems(rows: list[Any], lines: list[int | None], spec: Any) -> list[Any]:
    """One error per row whose chosen and rejected answers read the same: such a pair teaches nothing (its
    gradient is zero) and only dilutes the others."""
    from engine.data.check import Problem
    from engine.data.formats import RowError, convert_record

    problems = []
    for index, row in enumerate(rows):
        try:
            example = convert_record(row, spec, index)
        except RowError:
            continue  # already reported by the engine's row check
        if " ".join(example["chosen"].split()) == " ".join(example["rejected"].split()):
            problems.append(Problem(index + 1, f"{spec.column('chosen')}/{spec.column('rejected')}",
                                    t("data.same_answers"), line=lines[index]))
    return problems


def describe_problem(problem: Any) -> str:
    """`row 7 (line 41) output: ...` — where, which field, what to do."""
    where = []
    if problem.row is not None:
        where.append(t("data.row", row=problem.row) + (f" ({t('data.line', line=problem.line)})" if problem.line else ""))
    if problem.field:
        where.append(problem.field)
    prefix = " ".join(where)
    level = "" if problem.level == "error" else t("data.warning") + " "
    return f"{level}{prefix}: {problem.message}" if prefix else f"{level}{problem.message}"


def onboard(state: WizardState, dataset_dir: Path, source: Path, name: str, *, convert: bool,
            ranking: bool = False) -> Outcome:
    """Bring `source` into the dataset folder (see `bring_in`) and record it in the state."""
    record, problems = bring_in(dataset_dir, source, name, convert=convert, ranking=ranking)
    if record is None:
        return refused(*problems)
    return Outcome(state.replace(onboarded=[*state.onboarded, record]))


def bring_in(dataset_dir: Path, source: Path, name: str, *, convert: bool,
             ranking: bool = False) -> tuple[dict | None, list[str]]:
    """Copy (or convert) `source` into the dataset folder as <name>.json(l) and register it; the source stays.
    With ranking, the copy must be preference pairs throughout, and is registered with "ranking": true and its
    chosen/rejected columns. (record {source, name, file, converted}, []) or (None, problems)."""
    from engine.data import check_file, convert_file
    from engine.data.registry import register_dataset
    from engine.errors import EngineError

    name = (name or "").strip()
    if not name or "," in name or "/" in name:
        return None, [t("data.bad_name", name=name)]
    dataset_dir = Path(dataset_dir).resolve()
    suffix = ".json" if convert else source.suffix.lower()
    target = dataset_dir / f"{name}{suffix}"
    if target.exists() and target.resolve() != source.resolve():
        return None, [t("data.target_exists", path=str(target))]
    try:
        if convert:
            convert_file(source, target)
        elif target.resolve() != source.resolve():
            shutil.copyfile(source, target)
        report = check_file(target)
        problems = _onboard_problems(target, report, ranking)
        if problems:
            if target.resolve() != source.resolve():
                target.unlink(missing_ok=True)  # a copy that cannot be registered is not left behind
            return None, problems
        entry = report.suggested_entry() or {"file_name": target.name}
        register_dataset(dataset_dir, name, dict(entry, file_name=target.name))
    except EngineError as exc:
        return None, [str(exc)]
    return {"source": str(source), "name": name, "file": str(target), "converted": convert}, []


def _onboard_problems(target: Path, report: Any, ranking: bool) -> list[str]:
    """Why the copy cannot be registered for this workflow (the first ten problems), or nothing."""
    if ranking:
        report, problems = check_pairs(target, report)
        return problems[:10] if problems and (not report.ranking or not report.ok) else []
    if report.ranking:
        return [t("data.pairs_for_sft")]
    return [describe_problem(p) for p in report.errors[:10]]
