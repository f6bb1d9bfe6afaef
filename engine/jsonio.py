"""Small files read safely (missing or damaged ones give {}) and written atomically (never half a file)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from typing import Any

from engine.filemodes import mode_for_replacement
from engine.messages import Message

MAX_DEPTH = 64
"""Nesting limit for JSON read from disk: real rows and records nest 3-5 levels (a row's messages, their parts)."""


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when lists/dicts nest more than `limit` levels (checked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            items = item.values()
        elif isinstance(item, (list, tuple)):
            items = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in items if isinstance(child, (dict, list, tuple)))
    return False


def loads_json(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """json.loads for text from disk or from a data field: nesting deeper than `max_depth` (or too deep for the
    parser) is a json.JSONDecodeError like any other broken JSON, with the message "nested more than N levels
    deep", never a RecursionError, and never a value deep enough to overflow code that walks it afterwards. An
    integer past Python's 4300-digit limit is a json.JSONDecodeError too."""
    try:
        value = json.loads(text)
    except RecursionError:
        value = None
    except json.JSONDecodeError:
        raise
    except ValueError:  # Python's int-from-str limit
        raise json.JSONDecodeError("a number is too long to read (more than 4300 digits)", text, 0) from None
    else:
        if not too_deep(value, max_depth):
            return value
    raise json.JSONDecodeError(f"nested more than {max_depth} levels deep", text, 0) from None


# The JSON parser's own words (CPython's json) and this project's, by how they start: a code each, so a front end
# in another language can say them in its own words.
_PARSER_WORDS = (
    ("Expecting value", "expecting_value"), ("Expecting property name", "expecting_key"),
    ("Expecting ':'", "expecting_colon"), ("Expecting ',' or ']'", "expecting_row_separator"),
    ("Expecting ','", "expecting_comma"), ("Unterminated string", "unterminated_string"),
    ("Invalid control character", "control_character"), ("Invalid \\uXXXX", "bad_unicode_escape"),
    ("Invalid \\escape", "bad_escape"), ("Extra data after the closing ]", "after_closing"),
    ("Extra data", "extra_data"), ("nested more than", "too_deep"), ("a number is too long", "number_too_long"),
)


def json_problem(exc: ValueError, *, line: bool = True) -> Message:
    """What the parser found and where, as a message: "Expecting value at line 3, column 5" (``line``: with the
    line; else the column alone, for a file read line by line)."""
    if not isinstance(exc, json.JSONDecodeError):  # Python's int-from-str limit, raised past loads_json
        what = Message("json.number_too_long", "a number is too long to read (more than 4300 digits)")
        return Message("json.problem", what.text, {"what": what})
    said = exc.msg.removesuffix(" at")  # "Unterminated string starting at" + " at line 3"
    code = next((code for start, code in _PARSER_WORDS if said.startswith(start)), "other")
    depth = said.split()[2] if code == "too_deep" else None
    what = Message(f"json.{code}", said, {"depth": depth} if depth else {})
    if code == "too_deep":  # found by the depth check, not at a place in the text
        return Message("json.problem", said, {"what": what})
    if line:
        return Message("json.at_line", f"{said} at line {exc.lineno}, column {exc.colno}",
                       {"what": what, "line": exc.lineno, "column": exc.colno})
    return Message("json.at_column", f"{said} at column {exc.colno}", {"what": what, "column": exc.colno})


def read_json_dict(path: str | Path) -> dict:
    """The file's JSON object, or {} when it is missing, unreadable, invalid, too deep or not an object."""
    try:
        data = loads_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


MAX_RECORD_BYTES = 1 << 20
"""A record lf-assistant writes beside a model or into a run folder is under a few KB; a far bigger one is not ours."""

_KINDS = {str: "text", bool: "true or false", int: "a whole number", float: "a number", list: "a list",
          dict: "an object", type(None): "null"}


def kind_words(value: Any) -> str:
    """What a JSON value is, in words: "text", "a list", "a number" ..."""
    return _KINDS.get(type(value), type(value).__name__)


def fits(value: Any, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # a bool is an int to isinstance; never to a record
        return bool in kinds
    return isinstance(value, kinds) and not (isinstance(value, float) and value != value)  # NaN is no value


def read_record(path: str | Path, fields: dict[str, type | tuple[type, ...]], *, fix: str | Message,
                error: type[Exception] = ValueError, max_bytes: int = MAX_RECORD_BYTES,
                what: str = "the record lf-assistant writes there") -> dict | None:
    """A JSON object lf-assistant wrote (a record beside a model, in a run folder), checked before it is trusted:
    None when there is no such file; `error` naming the file (and the field) and ending with `fix` when it cannot be
    read, is larger than `max_bytes`, is not JSON, nests too deep, is not an object, or a listed field has another
    type (null counts as the field being absent). Fields not listed are kept as they are. `what` names the file
    in the messages about size and encoding (a file another program writes: "a model's config.json")."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return None

    def refused(code: str, text: str, **values: Any) -> Exception:
        """`error` with the sentence; an engine error also carries it as ``record.<code>`` with its values, the
        caller's fix and `what` as phrases a front end translates by their English text (code ``words``)."""
        if not _takes_message(error):
            return error(text)
        said = Message(f"record.{code}", text, {"path": str(path), "what": Message("words", what), **values,
                                                 "fix": fix if isinstance(fix, Message) else Message("words", fix)})
        return error(text, message=said)

    try:
        with open(path, "rb") as stream:
            raw = stream.read(max_bytes + 1)
        if len(raw) > max_bytes:
            raise refused("too_large", f"{path} is larger than {max_bytes >> 20} MB, far larger than {what}. {fix}",
                          limit=max_bytes >> 20)
        data = loads_json(raw.decode("utf-8"))
    except OSError as exc:
        reason = str(exc.strerror or exc)
        raise refused("unreadable", f"{path} cannot be read ({reason}). {fix}", error=reason) from None
    except UnicodeDecodeError:
        raise refused("not_utf8", f"{path} is not UTF-8 text, so not {what}. {fix}") from None
    except json.JSONDecodeError as exc:
        problem = json_problem(exc)
        raise refused("not_json", f"{path} is not valid JSON ({problem.text}). {fix}",
                      problem=problem) from None
    if not isinstance(data, dict):
        raise refused("not_object", f"{path} must hold a JSON object, not {kind_words(data)}. {fix}",
                      kind=Message("words", kind_words(data)))
    for name, kinds in fields.items():
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        value = data.get(name)
        if value is not None and not fits(value, kinds):
            options = list(dict.fromkeys(_KINDS.get(kind, kind.__name__) for kind in kinds))
            raise refused("field_type", f"{path}: the field {name!r} must be {' or '.join(options)}, not "
                          f"{kind_words(value)}. {fix}", name=repr(name),
                          wanted=[Message("words", option) for option in options],
                          kind=Message("words", kind_words(value)))
    return data


def _takes_message(error: type[Exception]) -> bool:
    from engine.errors import EngineError

    return issubclass(error, EngineError)


_ANNOTATION_KINDS: dict[str, type | tuple[type, ...]] = {"str": str, "bool": bool, "int": int,
                                                         "float": (int, float), "dict": dict, "list": list,
                                                         "Any": object}


def fits_annotation(value: Any, annotation: str) -> bool:
    """Whether a JSON value fits a dataclass field's annotation, as a string under postponed evaluation
    ("str | None", "list[dict]", "dict[str, float]" ...); true is no number here. An unknown name fits anything."""
    for option in (part.strip() for part in annotation.split("|")):
        if option == "None":
            if value is None:
                return True
            continue
        outer, _, inner = option.partition("[")
        inner = inner[:-1]
        kinds = _ANNOTATION_KINDS.get(outer, object)
        if isinstance(value, bool) and outer not in ("bool", "Any"):
            continue  # true is an int to isinstance, never a count or a name here
        if not isinstance(value, kinds):
            continue
        if outer == "list" and inner and not all(fits_annotation(item, inner) for item in value):
            continue
        if outer == "dict" and inner:
            item_type = inner.split(",", 1)[1].strip()
            if not all(isinstance(key, str) and fits_annotation(item, item_type) for key, item in value.items()):
                continue
        return True
    return False


def write_text_atomic(path: str | Path, text: str, *, mode: int | None = None) -> None:
    """Write through a temp file in the same folder, then os.replace: readers see the old file or the new one.

    The file gets `mode` when given, else the mode of the file it replaces, else 0666 less the umask (as open()
    would give it; the temp file itself starts at 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    final_mode = mode if mode is not None else mode_for_replacement(path)
    handle, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(handle, final_mode)
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


def copy_file_new(source: str | Path, target: str | Path) -> None:
    """Copy `source` to `target`, which must not exist: through a temp file in target's folder, then a hard link,
    so a reader (or a second copy racing this one) sees no file or the whole file, and an existing file is never
    replaced (FileExistsError). Where the file system has no hard links, os.replace after a last check."""
    import shutil

    target = Path(target)
    handle, temp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.close(handle)
        shutil.copyfile(source, temp_name)
        apply_umask(temp_name)
        with open(temp_name, "rb") as stream:
            os.fsync(stream.fileno())
        try:
            os.link(temp_name, target)
        except FileExistsError:
            raise
        except OSError:  # no hard links here
            if os.path.lexists(target):
                raise FileExistsError(f"{target} exists") from None
            os.replace(temp_name, target)
    finally:
        Path(temp_name).unlink(missing_ok=True)


def current_umask() -> int:
    """The process umask (read by setting and restoring it; there is no read-only call)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def apply_umask(path: str | Path, *, directory: bool = False) -> None:
    """Give a file or folder made by mkstemp/mkdtemp (always 0600/0700) the mode a plain create would have."""
    os.chmod(path, (0o777 if directory else 0o666) & ~current_umask())
