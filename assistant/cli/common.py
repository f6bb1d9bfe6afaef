"""What every command shares: engine errors become one clear message and exit code 2, never a traceback."""

from __future__ import annotations

import functools

import typer



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

    from rich.markup import escape

    console = Console(stderr=True, highlight=False)
    lines = message.splitlines() or [""]
    # The message may quote user input; escaped, a "[/x]" in it is shown instead of breaking the markup.
    console.print(f"[bold red]error:[/] {escape(lines[0])}", markup=True, soft_wrap=True)
    for line in lines[1:]:
        console.print(f"  {line}", markup=False, soft_wrap=True)
