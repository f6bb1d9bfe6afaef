"""What every command shares: errors become one clear message and a failing exit code, never a traceback, and
every value that came from the user or from a file is printed as text, never as rich markup or terminal control.

Rules for printing (each command follows them):
- a value inside a rich markup string goes through `safe()`: `[bold]` in a path or `dataset=[/x]` stays text, and
  an escape sequence from a data row is shown as \\x1b instead of reaching the terminal;
- text printed with markup=False, typer.echo or into a rich Text goes through `plain()`.
"""

from __future__ import annotations

import functools
import os

import typer
import typer.core

from assistant.formatting import safe  # noqa: F401 - the CLI modules take it from here

EXIT_USER_ERROR = 2
EXIT_INTERNAL = 3
DEBUG_VARIABLE = "LFA_DEBUG"


def plain(value: object, *, keep_layout: bool = True) -> str:
    """`value` as text to print without markup: control characters (escape sequences) shown escaped."""
    from engine.data.text import escape_control

    return escape_control(str(value), keep_layout=keep_layout)


def _cli_exits() -> tuple[type[BaseException], ...]:
    """The exceptions typer and click use to end a command on purpose (exit codes, usage errors)."""
    import click
    import typer.exceptions

    return (typer.exceptions.Exit, typer.exceptions.Abort, typer.exceptions.TyperException,
            click.exceptions.Exit, click.exceptions.Abort, click.ClickException)


_CLI_EXITS = _cli_exits()

def _hide_flag_types() -> None:
    """`--help` shows no `<bool>` after a flag: a flag takes no value, so naming a type misleads (typer >= 0.20
    prints one for every option). Values of other options keep their type (<path>, <int>)."""
    option = typer.core.TyperOption
    shown = getattr(option, "display_type_rich", None)
    if shown is None or getattr(shown, "hides_flags", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag else shown(self, ctx)

    display_type_rich.hides_flags = True
    option.display_type_rich = display_type_rich


_hide_flag_types()


def checked_language(value: str | None) -> str | None:
    """--lang's callback: a language the interface offers (en, zh, or a locale name such as zh_CN), else a usage
    error, where an unknown one fell back to English without a word."""
    if value is None:
        return None
    from assistant.i18n import LANGUAGES, normalize

    if normalize(value) is None:
        raise typer.BadParameter(f"{plain(value)!r} is not an interface language; use {' or '.join(LANGUAGES)}.")
    return value


def fail_on_engine_error(function):
    """Wrap a command: EngineError prints its message (exit 2); a file-system error names the file (exit 2); any
    other exception is a bug, printed as one line (exit 3) unless LFA_DEBUG=1 asks for the traceback."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        from engine.errors import EngineError

        try:
            return function(*args, **kwargs)
        except _CLI_EXITS:
            raise
        except EngineError as exc:
            print_error(str(exc))
            raise typer.Exit(EXIT_USER_ERROR) from None
        except KeyboardInterrupt:
            print_error("interrupted")
            raise typer.Exit(130) from None
        except OSError as exc:
            if os.environ.get(DEBUG_VARIABLE):
                raise
            print_error(_os_error_message(exc))
            raise typer.Exit(EXIT_USER_ERROR) from None
        except Exception as exc:  # noqa: BLE001 - the last line of defence: a message, never a traceback
            if os.environ.get(DEBUG_VARIABLE):
                raise
            source = model_code_file(exc)
            if source is not None:  # trust_remote_code: the model folder's own code failed, not ours
                print_error(f"The model's own code ({source}) raised {type(exc).__name__}: {str(exc)[:500]}\nIt "
                            "runs because trust_remote_code is true: the fault is in that code or in what it was "
                            f"given. Run again with {DEBUG_VARIABLE}=1 for the traceback.")
                raise typer.Exit(EXIT_USER_ERROR) from None
            print_error(f"unexpected {type(exc).__name__}: {str(exc)[:500]}\nThis is a bug in lf-assistant; run "
                        f"again with {DEBUG_VARIABLE}=1 for the traceback and report it.")
            raise typer.Exit(EXIT_INTERNAL) from None

    return wrapper


def model_code_file(exc: BaseException) -> str | None:
    """The innermost file of a model's own code (transformers imports it as ``transformers_modules``) that the
    exception passed through, or None when no such code was involved."""
    import traceback

    found = None
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        filename = frame.f_code.co_filename
        if "transformers_modules" in filename.replace("\\", "/").split("/"):
            found = filename
    return found


def _os_error_message(exc: OSError) -> str:
    names = " -> ".join(str(name) for name in (exc.filename, exc.filename2) if name)
    where = f"{names}: " if names else ""
    if isinstance(exc, NotADirectoryError) and exc.filename2 is None:
        # a parent of the path is a file: the OS words ("Not a directory") do not say which part or what to do
        return f"{where}one of its parent folders is a file. Give a path whose folders are folders."
    return f"{where}{exc.strerror or exc}. Check the path, its permissions and the free disk space."


def print_error(message: str) -> None:
    from rich.console import Console

    console = Console(stderr=True, highlight=False)
    lines = message.splitlines() or [""]
    console.print(f"[bold red]error:[/] {safe(lines[0])}", markup=True, soft_wrap=True)
    for line in lines[1:]:
        console.print(f"  {plain(line)}", markup=False, soft_wrap=True)
