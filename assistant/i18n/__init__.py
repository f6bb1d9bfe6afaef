"""Interface strings in English and Chinese; screens and the wizard only ever call `t(key, **values)`.

The language comes from, in order: the --lang flag, $LFA_LANG, the user config file
(`$XDG_CONFIG_HOME/lf-assistant/config.yaml`, key `lang`), the locale ($LC_ALL, $LC_MESSAGES, $LANG: zh* -> zh),
else English. A key missing in Chinese falls back to English; a key missing everywhere shows as the key itself,
so a gap is visible without crashing the screen (a test keeps both catalogs complete). Text the engine writes is
translated by its code: `t_or` for a name or a fixed sentence (ENGINE_ENGLISH), `t_message` for a sentence with
values (engine.messages).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from assistant.i18n.en import STRINGS as EN
from assistant.i18n.zh import STRINGS as ZH

CATALOGS: dict[str, dict[str, str]] = {"en": EN, "zh": ZH}
ENGINE_ENGLISH: tuple[str, ...] = ("param.", "lf_default.", "engine.", "words.")
"""Key prefixes only the other languages' catalogs hold: in English the engine's own words show (a training
parameter's help, engine.config.lf_defaults, a sentence of engine.messages), through `t_or` and `t_message`, so
there is one English text to keep."""
LANGUAGES: tuple[str, ...] = tuple(CATALOGS)
_current = "en"
# In Chinese a number and its unit are written together (6行, 第3步, 0.7GiB): the screen breaks lines only at spaces,
# and a CJK run has none, so a space between them was where "6" ended one line and "行…" began the next. A Latin unit
# is joined only where Chinese text follows it: an English sentence of the engine's inside stays as it wrote it.
_NUMBER_AND_UNIT = re.compile(r"(?<=\d) (?=(?:行|列|号|个|步|秒|条|轮|次|对|倍|项|层|张|位|分钟|小时|线程)|"
                              r"(?:[KMGT]i?B|token/s)(?:[^\x00-\x7f]|$))|(?<=第) (?=\d)")
# A nested sentence that ends with its own full stop, inside a sentence that ends with one too: keep one mark.
_DOUBLE_STOP = re.compile(r"(?<=[。？！])。")


def _set_type(text: str) -> str:
    """`text` as the current language writes it: in Chinese, numbers kept with their units, and one full stop
    where a nested sentence's own met the outer one's."""
    return _DOUBLE_STOP.sub("", _NUMBER_AND_UNIT.sub("", text)) if _current == "zh" else text


def normalize(lang: str | None) -> str | None:
    """'zh_CN.UTF-8' -> 'zh', 'en-US' -> 'en'; None for anything not offered."""
    if not lang:
        return None
    code = lang.strip().lower().replace("-", "_").split(".")[0].split("_")[0]
    return code if code in CATALOGS else None


def _config_lang() -> str | None:
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    path = base / "lf-assistant" / "config.yaml"
    if not path.is_file():
        return None
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return None
    return data.get("lang") if isinstance(data, dict) else None


def detect_language(flag: str | None = None) -> str:
    """The interface language: flag, $LFA_LANG, config file, locale, else en."""
    for candidate in (flag, os.environ.get("LFA_LANG"), _config_lang()):
        if normalize(candidate):
            return normalize(candidate)
    for key in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(key)
        if value:  # the first locale variable that is set decides, as POSIX does
            return normalize(value) or "en"
    return "en"


def set_language(lang: str | None) -> str:
    """Switch the language for every later `t` call; returns the language in effect."""
    global _current
    _current = normalize(lang) or "en"
    return _current


def current_language() -> str:
    return _current


def t_or(key: str, fallback: str, /) -> str:
    """The string for `key` when the catalogs have one, else `fallback`: names (metrics, states, rules) that the
    catalogs may or may not translate."""
    return t(key) if key in CATALOGS[_current] or key in EN else fallback


def t_message(message: object, fallback: str = "", /) -> str:
    """A sentence the engine gave as a code with its values (engine.messages.Message, or its dict): the catalog's
    ``engine.<code>`` filled with the values (a nested message rendered the same way, a list of them joined, one
    per line in a field named ``lines``), else the engine's English text, else ``fallback`` (no message, or one
    stored before it had a code). Code ``words``: a phrase of a fixed table, the catalog's ``words.<English>``."""
    if hasattr(message, "to_dict"):
        message = message.to_dict()
    if not isinstance(message, dict) or not isinstance(message.get("code"), str):
        return fallback
    english = message.get("text") if isinstance(message.get("text"), str) else fallback
    if message["code"] == "words":  # a phrase of a fixed table of the engine's, translated by its English text
        return _set_type(CATALOGS[_current].get(f"words.{english}") or english)
    key = f"engine.{message['code']}"
    text = CATALOGS[_current].get(key) or EN.get(key)
    if not text:
        return english
    fields = message.get("fields") if isinstance(message.get("fields"), dict) else {}
    values = {name: "\n".join(str(_field_words(item)) for item in value) if name == "lines" and
              isinstance(value, list) else _field_words(value) for name, value in fields.items()}
    try:
        return _set_type(text.format(**values))
    except (KeyError, IndexError, ValueError, AttributeError):
        return english


def t_error(exc: BaseException) -> str:
    """An engine error in the interface language: its message's code through the catalog, else its English text."""
    return t_message(getattr(exc, "message", None), str(exc))


def _field_words(value: object) -> object:
    """A message's field as the sentence shows it: a nested message rendered, a list of them joined with the
    language's separator (none after an item that ends its sentence with a full-width mark: 。 ？ ！), a plain value
    as it is."""
    if isinstance(value, dict):
        return t_message(value, str(value.get("text", "")))
    if isinstance(value, list):
        words = [str(_field_words(item)) for item in value]
        return "".join(word if last or word.endswith(("。", "？", "！")) else word + t("list.separator")
                       for last, word in zip([False] * (len(words) - 1) + [True], words))
    return value


def t(key: str, /, **values: object) -> str:
    """The string for `key` in the current language, formatted with `values`."""
    text = CATALOGS[_current].get(key) or EN.get(key) or key
    if not values:
        return _set_type(text)
    try:
        return _set_type(text.format(**values))
    except (KeyError, IndexError, ValueError):
        return _set_type(text)
