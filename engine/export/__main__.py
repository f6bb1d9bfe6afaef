"""`python -m engine.export EXPORT.yaml [key=value ...]`: export, printing `progress i/n <step>` lines.

On success prints `exported to <dir>`; exit code 0, or 2 with the reason on stderr (`error: ...`), followed, where
the reason has a code with values (engine.messages), by `error_message: <its JSON>` for a front end in another
language.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    from engine.errors import EngineError
    from engine.export.config import load_export_config

    parser = argparse.ArgumentParser(prog="python -m engine.export", description="Merge / export a fine-tuned model.")
    parser.add_argument("config", help="export YAML (LLaMA-Factory's merge_lora keys)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. export_dir=models/x-merged")
    args = parser.parse_args(argv)
    try:
        config = load_export_config(args.config, *args.overrides)
        from engine.export.run import export_model

        result = export_model(config, on_progress=lambda i, n, text: print(f"progress {i}/{n} {text}", flush=True))
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if exc.message is not None:
            print(f"error_message: {json.dumps(exc.message.to_dict())}", file=sys.stderr)
        return 2
    for check in result.checks:
        print(f"check {'passed' if check.passed else 'FAILED'}: {check.name} ({check.detail})", flush=True)
    for note in result.notes:
        print(f"note: {note}", flush=True)
    print(f"exported to {result.export_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
