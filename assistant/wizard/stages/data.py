"""Stage 1: the data — registered datasets from a dataset folder, or the user's own files brought in safely.

Custom files are checked first (every problem with its row), optionally converted into a new file, copied into
the dataset folder and registered in dataset_info.json (atomically). A templated dataset ({{name}}, {{author}},
any {{var}}) is filled into a copy registered under a new name. The user's files are never modified.

Each training stage takes one kind of rows (engine.data.kinds: pairs for dpo and rm, kto-labelled answers for kto,
raw text for pt, conversations for sft); only datasets of that kind are listed. Preference training takes custom
files whose every row has a chosen and a rejected answer, non-empty and different (the engine's check says which
rows do not).

The project's own data/ (and the demo data shipped with lf-assistant) is never written to: the first dataset the
wizard writes (a filled copy, a file brought in) goes to a working copy, ./lf_data, which then serves as the
dataset folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assistant.i18n import t, t_error, t_message
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
    kind: str = "conversations"
    """What the rows are (engine.data.kinds): pairs, kto, text or conversations."""


BUNDLED_DATA = resource_dir("data")


WORKING_COPY = "lf_data"
"""Where the wizard's own datasets go when the dataset folder is the project's (a copy of it, made once)."""


def default_dir(configured: str = "data") -> str:
    """The dataset folder to start from: the working copy ./lf_data once the wizard made one, else ./data when it
    holds dataset_info.json, else the demo data shipped with lf-assistant (so a run started outside a checkout
    still finds datasets)."""
    if (Path(WORKING_COPY) / "dataset_info.json").is_file() and _is_bundled(Path(configured)):
        return WORKING_COPY
    local = Path(configured)
    if (local / "dataset_info.json").is_file() or not (BUNDLED_DATA / "dataset_info.json").is_file():
        return configured
    return WORKING_COPY if (Path(WORKING_COPY) / "dataset_info.json").is_file() else str(BUNDLED_DATA)


def _is_bundled(folder: Path) -> bool:
    try:
        return folder.resolve() == BUNDLED_DATA.resolve()
    except OSError:
        return False


def writable_dir(dataset_dir: Path) -> tuple[Path, str | None]:
    """The folder a new dataset is written to, and a note when it is not `dataset_dir`: the project's own data/
    (tracked by git, or inside the installed package) gets a working copy ./lf_data, made once, so that it stays
    as shipped."""
    dataset_dir = Path(dataset_dir).resolve()
    if not _is_bundled(dataset_dir):
        return dataset_dir, None
    copy = Path(WORKING_COPY).resolve()
    if not (copy / "dataset_info.json").is_file():
        _make_working_copy(dataset_dir, copy)
    return copy, t("data.working_copy", folder=WORKING_COPY, source=str(dataset_dir))


def _make_working_copy(source: Path, copy: Path) -> None:
    """Copy `source` into a staging folder beside `copy`, then rename it into place: a killed copy leaves no
    half folder that would later pass for the working copy. A folder of that name that is not empty is the user's
    and is refused, never written into."""
    from engine.errors import ConfigError

    if copy.exists() and (not copy.is_dir() or any(copy.iterdir())):
        raise ConfigError(t("data.working_copy_taken", folder=str(copy)))
    copy.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{copy.name}.", dir=copy.parent))
    try:
        shutil.copytree(source, staging / "data", ignore=shutil.ignore_patterns("README*"))
        os.replace(staging / "data", copy)  # POSIX: onto a missing or empty folder
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def find_dir(text: str) -> Outcome:
    """The dataset folder the user named (it must hold dataset_info.json); refusals say where it looked."""
    from engine.data.registry import find_dataset_dir
    from engine.errors import EngineError

    try:
        folder = find_dataset_dir(text or "data")
    except EngineError as exc:
        return refused(t_error(exc), code="no_dataset_dir")
    return Outcome(None, notes=[str(folder)])


def list_datasets(dataset_dir: Path, *, kind: str = "conversations", ranking: bool | None = None) -> list[DatasetRow]:
    """Every entry of dataset_info.json, with whether it can be trained on here: available when it holds rows of
    `kind` (engine.data.kinds: pairs, kto, text, conversations) and they are on this machine. `ranking=True` is
    kind "pairs" (the CLI's --pairs)."""
    from engine.data.formats import require_supported
    from engine.data.kinds import dataset_kind
    from engine.data.registry import dataset_file_path, entry_problem, load_dataset_info
    from engine.errors import EngineError

    kind = "pairs" if ranking else kind
    rows = []
    for name, spec in load_dataset_info(Path(dataset_dir)).items():
        available, note, holds = spec.is_local, "", dataset_kind(spec)
        if not spec.is_local:
            note = t("data.hub_only")
        else:
            try:
                located = dataset_file_path(spec, Path(dataset_dir), must_exist=False)
            except EngineError:
                available, note = False, t("data.file_outside")
            else:
                if not located.exists():
                    available, note = False, t("data.file_missing")
        if holds != kind:
            available, note = False, t(f"data.holds_{holds}")
        try:
            require_supported(spec)
        except EngineError:
            available, note = False, t("data.multimodal")
        problem = entry_problem(spec)
        if problem and available:  # a columns/tags object that names too little: listed, with why
            available, note = False, problem.split(": ", 1)[-1]
        rows.append(DatasetRow(name, spec.file_name, spec.formatting, spec.ranking, available, note, holds))
    return rows


def shown_rows(listing: list[DatasetRow], *, kind: str = "conversations") -> tuple[list[DatasetRow], list[str]]:
    """(rows to list, names hidden): only datasets of the stage's kind are listed; the screen names the others."""
    return [row for row in listing if row.kind == kind], [row.name for row in listing if row.kind != kind]


def recommended(listing: list[DatasetRow], names: list[str] | tuple) -> list[str]:
    """The skill's recommended datasets that this folder lists as available (preselected on the screen)."""
    available = {row.name for row in listing if row.available}
    return [name for name in names if name in available]


def count_rows(dataset_dir: Path, name: str) -> tuple[int, float]:
    """(rows, mean characters per row) of a registered local dataset."""
    import json

    from engine.data.loader import read_dataset_records
    from engine.data.registry import get_dataset_spec

    records = read_dataset_records(get_dataset_spec(name, Path(dataset_dir)), Path(dataset_dir))
    chars = sum(len(json.dumps(r, ensure_ascii=False)) for r in records)
    return len(records), (chars / len(records) if records else 0.0)


def preview(dataset_dir: Path, name: str, limit: int = 3) -> list[dict[str, Any]]:
    """The first rows as training reads them: normalized to messages (the assistant turns are what training
    learns; a KTO row also carries whether its answer is desirable), or {"text": ...} for pre-training text."""
    from engine.data.formats import convert_record, convert_text
    from engine.data.kinds import dataset_kind
    from engine.data.loader import read_dataset_records
    from engine.data.registry import get_dataset_spec

    spec = get_dataset_spec(name, Path(dataset_dir))
    records = read_dataset_records(spec, Path(dataset_dir))
    if dataset_kind(spec) == "text":
        return [{"text": convert_text(record, spec, index)} for index, record in enumerate(records[:limit])]
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
                                 dataset_chars={n: counts[n][1] for n in names if n in counts},
                                 mixed_in=[]))  # what is chosen here is the user's own choice


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


def filled_name(dataset_dir: Path, name: str, suffix: str) -> str:
    """The name ``fill_template`` will register the filled copy under (the first free one), for the question."""
    from engine.data.registry import dataset_file_path, get_dataset_spec, load_dataset_info
    from engine.errors import EngineError

    folder = Path(dataset_dir).resolve()
    if _is_bundled(folder) and (Path(WORKING_COPY) / "dataset_info.json").is_file():
        folder = Path(WORKING_COPY).resolve()  # where fill_template writes it
    try:
        source = dataset_file_path(get_dataset_spec(name, folder), folder)
        return _free_name(folder, source, f"{name}{suffix}", load_dataset_info(folder))[0]
    except (EngineError, ValueError):
        return f"{name}{suffix}"


def fill_template(state: WizardState, dataset_dir: Path, name: str, values: dict[str, str], suffix: str) -> Outcome:
    """Write <name><suffix> with every {{var}} replaced, register it, and train on it instead of `name`. An earlier
    filled copy with the very same rows is used again rather than copied once more (each new wizard filled
    another identity_custom_N); any other file is never written over."""
    empty = [var for var, value in values.items() if not str(value).strip()]
    if empty:
        return refused(t("data.empty_values", names=", ".join(empty)))
    from engine.data.registry import dataset_file_path, get_dataset_spec, load_dataset_info, register_dataset
    from engine.errors import EngineError

    try:
        dataset_dir, moved = writable_dir(dataset_dir)
        spec = get_dataset_spec(name, dataset_dir)
        source = dataset_file_path(spec, dataset_dir)
        with tempfile.TemporaryDirectory(prefix="lfa-fill-") as scratch:
            filled = _filled_rows(source, values, Path(scratch))
            found = _same_copy(dataset_dir, filled, f"{name}{suffix}", spec)
            new_name, target = found or _write_copy(dataset_dir, source, filled, f"{name}{suffix}")
        if found is None:
            entry = dict(spec.to_dict(), file_name=target.relative_to(dataset_dir).as_posix())
            register_dataset(dataset_dir, new_name, entry)
    except (EngineError, OSError, ValueError) as exc:
        return refused(t_error(exc))
    datasets = [new_name if n == name else n for n in state.datasets]
    rows = {(new_name if k == name else k): v for k, v in state.dataset_rows.items()}
    chars = {(new_name if k == name else k): v for k, v in state.dataset_chars.items()}
    record = dict(state.filled, **{new_name: {"from": name, "values": dict(values), "file": str(target)}})
    note = t("data.filled_again" if found else "data.filled", name=new_name, path=str(target))
    return Outcome(state.replace(datasets=datasets, dataset_rows=rows, dataset_chars=chars, filled=record,
                                 dataset_dir=str(dataset_dir)), notes=([moved] if moved else []) + [note])


def _filled_rows(source: Path, values: dict[str, str], scratch: Path) -> Path:
    """The filled rows, written into `scratch` (a file of the source's kind), to compare and then to publish."""
    from engine.data import fill_placeholders

    return fill_placeholders(source, values, scratch / f"filled{source.suffix}")


def _same_copy(dataset_dir: Path, filled: Path, base: str, spec) -> tuple[str, Path] | None:
    """(name, file) of a copy registered as <base> or <base>_N with the same entry as `spec` and exactly the bytes
    of `filled`, or None."""
    import re

    from engine.data.registry import dataset_file_path, get_dataset_spec, load_dataset_info
    from engine.errors import EngineError

    def entry(of) -> dict:
        return {key: value for key, value in of.to_dict().items() if key != "file_name"}

    wanted = filled.read_bytes()
    for name in load_dataset_info(dataset_dir):
        if not re.fullmatch(rf"{re.escape(base)}(_\d+)?", name):
            continue
        try:
            registered = get_dataset_spec(name, dataset_dir)
            path = dataset_file_path(registered, dataset_dir)
            if entry(registered) == entry(spec) and path.is_file() and path.stat().st_size == len(wanted) \
                    and path.read_bytes() == wanted:
                return name, path
        except (EngineError, OSError):  # an entry that cannot be read is no copy to use
            continue
    return None


def _write_copy(dataset_dir: Path, source: Path, filled: Path, base: str) -> tuple[str, Path]:
    """Publish `filled` under the first free <base>, <base>_2, ... (whole or absent, never over a file that
    appeared meanwhile)."""
    from engine.data.registry import load_dataset_info
    from engine.jsonio import copy_file_new

    for _attempt in range(100):
        name, target = _free_name(dataset_dir, source, base, load_dataset_info(dataset_dir))
        try:
            copy_file_new(filled, target)
        except FileExistsError:  # another wizard took that name a moment ago: the next one
            continue
        return name, target
    raise ValueError(f"no free name for {base} in {dataset_dir}")


# ------------------------------------------------------------------------------------------------ custom files
KTO_COLUMNS = ("label", "kto_tag")
"""Names a file's desirable/undesirable label goes by (LLaMA-Factory's kto_en_demo uses "label")."""


def check_custom(path_text: str, *, kind: str = "conversations",
                 ranking: bool | None = None) -> tuple[Path | None, Any, list[str]]:
    """(path, the engine's CheckReport, problems as lines) for one file the user named, read as rows of `kind`
    (the stage's: pairs, kto, text or conversations; `ranking=True` is pairs). Pairs are read as pairs whatever
    the file looks like, so each row without both answers is listed."""
    from engine.data import check_file
    from engine.errors import EngineError

    kind = "pairs" if ranking else kind
    path = Path(path_text.strip()).expanduser()
    if not path.exists():
        return None, None, [t("data.no_such_file", path=str(path))]
    try:
        if kind == "text":
            return path, *check_text(path)
        report = check_file(path)
        if kind == "pairs":
            return path, *check_pairs(path, report)
        if kind == "kto":
            return path, *check_kto(path, report)
    except EngineError as exc:
        return path, None, [t_error(exc)]
    return path, report, [describe_problem(p) for p in report.problems]


def check_pairs(path: Path, report: Any) -> tuple[Any, list[str]]:
    """(report, problems) of a file read as preference pairs: the engine's checks under a ranking entry (missing,
    empty or identical chosen/rejected answers, with row numbers). A file that is not pairs at all gets one line
    that says so first: SFT rows have nothing to prefer."""
    from engine.data.check import check_file, spec_for
    from engine.data.files import read_rows

    if report.format == "unknown" or report.ranking:
        return report, [describe_problem(p) for p in report.problems]
    report = check_file(path, spec=spec_for(read_rows(path).rows, report.format, True, path.stem))
    report.ranking = False  # the file is not pairs; the row problems below say where
    return report, [t("data.not_pairs_file", rows=report.rows)] + [describe_problem(p) for p in report.problems]


def check_kto(path: Path, report: Any) -> tuple[Any, list[str]]:
    """(report, problems) of a file read as KTO rows: conversations whose last answer is labelled desirable or
    not (a `label` or `kto_tag` column of true/false); the engine's row check under that entry."""
    from engine.data.check import check_file, spec_for
    from engine.data.files import read_rows

    if report.format == "unknown":
        return report, [describe_problem(p) for p in report.problems]
    rows = read_rows(path).rows
    keys = {key for row in rows[:200] if isinstance(row, dict) for key in row}
    column = next((name for name in KTO_COLUMNS if name in keys), None)
    if column is None or report.ranking:
        report.format = "unknown"  # not KTO rows: nothing to add
        return report, [t("data.not_kto_file", rows=report.rows, columns=", ".join(KTO_COLUMNS))]
    spec = spec_for(rows, report.format, False, path.stem)
    spec.columns["kto_tag"] = column
    report = check_file(path, spec=spec)
    return report, [describe_problem(p) for p in report.problems]


def check_text(path: Path) -> tuple[Any, list[str]]:
    """(report, problems) of a file read as pre-training text: a .txt file (one text per line), or rows with a
    non-empty `text` field."""
    from engine.data.check import check_text_file

    report = check_text_file(path)
    if len([p for p in report.errors if p.field == "text"]) == report.rows:
        report.format = "unknown"
        return report, [t("data.not_text_file", rows=report.rows)]
    return report, [describe_problem(p) for p in report.problems]


def describe_problem(problem: Any) -> str:
    """`row 7 (line 41) output: ...` — where, which field, what to do."""
    where = []
    if problem.row is not None:
        where.append(t("data.row", row=problem.row) + (f" ({t('data.line', line=problem.line)})" if problem.line else ""))
    if problem.field:
        where.append(problem.field)
    prefix = " ".join(where)
    level = "" if problem.level == "error" else t("data.warning") + " "
    said = t_message(getattr(problem, "coded", None), problem.message)  # the engine's words where it has no code
    return f"{level}{prefix}: {said}" if prefix else f"{level}{said}"


def onboard(state: WizardState, dataset_dir: Path, source: Path, name: str, *, convert: bool,
            kind: str = "conversations", ranking: bool | None = None) -> Outcome:
    """Bring `source` into the dataset folder (see `bring_in`; the project's own data/ gets a working copy first)
    and record it in the state. The notes say what a conversion changed (rows left out, renamed fields)."""
    from engine.errors import EngineError

    try:
        folder, moved = writable_dir(dataset_dir)
    except (EngineError, OSError) as exc:
        return refused(t_error(exc))
    record, problems = bring_in(folder, source, name, convert=convert, kind="pairs" if ranking else kind)
    if record is None:
        return refused(*problems)
    notes = ([moved] if moved else []) + list(record.get("notes", []))
    return Outcome(state.replace(onboarded=[*state.onboarded, record], dataset_dir=str(folder)), notes=notes)


def bring_in(dataset_dir: Path, source: Path, name: str, *, convert: bool, kind: str = "conversations",
             ranking: bool | None = None) -> tuple[dict | None, list[str]]:
    """Copy (or convert) `source` into the dataset folder as <name>.json(l) and register it; the source stays.
    The copy must hold rows of `kind` throughout (pairs are registered with "ranking": true and their
    chosen/rejected columns, KTO rows with their kto_tag column, text with its text column).
    (record {source, name, file, converted, notes}, []) or (None, problems)."""
    from engine.data import convert_file
    from engine.data.registry import register_dataset
    from engine.errors import EngineError
    from engine.jsonio import copy_file_new

    kind = "pairs" if ranking else kind
    name = (name or "").strip()
    if _bad_dataset_name(name):
        return None, [t("data.bad_name", name=name)]
    convert = convert and kind in ("pairs", "conversations")  # the repairs know alpaca and sharegpt rows only
    dataset_dir = Path(dataset_dir).resolve()
    target = dataset_dir / f"{name}{'.json' if convert else source.suffix.lower()}"
    if target.exists() and target.resolve() != source.resolve():
        return None, [t("data.target_exists", path=str(target))]
    notes: list[str] = []
    try:
        if convert:
            notes = [t_message(note) for note in convert_file(source, target).note_messages
                     if note.code != "data.wrote"]  # in the interface language; the copy's path shows apart
        elif target.resolve() != source.resolve():
            copy_file_new(source, target)  # whole or absent, even when killed; never over another file
        entry, problems = _entry_for(target, kind)
        if problems:
            if target.resolve() != source.resolve():
                target.unlink(missing_ok=True)  # a copy that cannot be registered is not left behind
            return None, problems
        register_dataset(dataset_dir, name, dict(entry, file_name=target.name))
    except FileExistsError:
        return None, [t("data.target_exists", path=str(target))]
    except (EngineError, OSError) as exc:
        return None, [t_error(exc)]
    return {"source": str(source), "name": name, "file": str(target), "converted": convert, "notes": notes}, []


def _bad_dataset_name(name: str) -> bool:
    """Whether `name` cannot name a dataset: it becomes the copy's file name, one entry of a comma-separated
    `dataset:` list and text on the screen, so no separators, no hidden or option-like start, no control
    characters (an escape sequence would rewrite the terminal), and short enough for a file name."""
    return (not name or any(char in name for char in ",/\\") or name[0] in ".-" or len(name.encode()) > 200
            or not name.isprintable())


def _entry_for(target: Path, kind: str) -> tuple[dict, list[str]]:
    """(the dataset_info.json entry, []) for a copy that holds rows of `kind`; (_, the first ten problems) else."""
    _path, report, problems = check_custom(str(target), kind=kind)
    if report is None:
        return {}, problems[:10]
    if kind == "text":
        return {"columns": {"prompt": "text"}}, [p for p in problems if not p.startswith(t("data.warning"))][:10]
    if not fits_kind(report, kind):
        return {}, (problems[:10] if kind != "conversations" else [t("data.pairs_for_sft")])
    if kind in ("pairs", "kto"):
        return (report.suggested_entry() or {}), ([] if report.ok else problems[:10])
    return (report.suggested_entry() or {}), [describe_problem(p) for p in report.errors[:10]]


def fits_kind(report: Any, kind: str) -> bool:
    """Whether a checked file holds rows of `kind` at all (its row problems aside)."""
    if report is None or report.format == "unknown":
        return False
    if (report.format == "text") != (kind == "text"):
        return False
    return bool(report.ranking) == (kind == "pairs")
