"""What every command shares: engine errors become one clear message and exit code 2, never a traceback."""

from __future__ import annotations

import functools

import typer
import typer.core


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


def fail_on_engine_error(function):
    """Wrap a command so EngineError (and a missing optional module) prints a message and exits non-zero."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        from engine.errors import EngineError

        try:
            return function(*args, **kwargs)
        except EngineError as exc:
            print_error(str(exc))
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            print_error("interrupted")
            raise typer.Exit(130) from None

    return wrapper


def print_error(message: str) -> None:
    from rich.console import Console

    console = Console(stderr=True, highlight=False)
    lines = message.splitlines() or [""]
    console.print(f"[bold red]error:[/] {lines[0]}", markup=True, soft_wrap=True)
    for line in lines[1:]:
        console.print(f"  {line}", markup=False, soft_wrap=True)
