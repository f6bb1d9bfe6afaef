"""Chat over pipes: the tuned model (and its base beside it) loaded once, answering one JSON line per request.

    python -m engine.inference.pipe --infer INFER.yaml [--base] [--completion]

A front end that must not import torch (the TUI) starts this process and talks to it:
- stdout, once both models are loaded: {"ready": true, "template": NAME, "base": true|false}
- stdin, per turn: {"messages": [{"role": "user", "content": ...}, ...]} (the whole conversation so far), or
  {"text": ...} with --completion (plain text continued without a template, for a pre-training run);
- stdout, per turn: {"tuned": TEXT, "base": TEXT | null, "time_s": S}, or {"error": MESSAGE} for a bad request.
The process ends at the end of stdin. Generation follows the inference config (max_new_tokens, sampling).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from engine.errors import EngineError


def _answer(model, request: dict, completion: bool) -> str:
    if completion:
        text = request.get("text")
        if not isinstance(text, str) or not text:
            raise EngineError("a completion request needs {\"text\": ...}")
        return model.complete_batch([text], batch_size=1)[0].text
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise EngineError("a chat request needs {\"messages\": [...]} ending with a user message")
    return model.chat(messages)


def serve(config, *, base: bool, completion: bool, lines=sys.stdin, out=sys.stdout) -> None:
    from engine.inference.chat_model import ChatModel
    from engine.inference.source import plan_model
    from engine.inference.validate import base_plan

    tuned_plan = plan_model(config.model_name_or_path, config.adapters(), config.template,
                            finetuning_type=config.finetuning_type)
    comparison = base_plan(tuned_plan) if base else None
    tuned = ChatModel(config, plan=tuned_plan)
    reference = ChatModel(config, plan=comparison) if comparison is not None else None

    def send(payload: dict) -> None:
        out.write(json.dumps(payload, ensure_ascii=False) + "\n")
        out.flush()

    send({"ready": True, "template": tuned.template_name, "base": reference is not None})
    for line in lines:
        if not line.strip():
            continue
        began = time.perf_counter()
        try:
            request = json.loads(line)
            answer = _answer(tuned, request, completion)
            other = _answer(reference, request, completion) if reference is not None else None
        except (ValueError, EngineError) as exc:
            send({"error": str(exc)})
            continue
        send({"tuned": answer, "base": other, "time_s": round(time.perf_counter() - began, 3)})


def main(argv: list[str] | None = None) -> int:
    from engine.inference.config import load_infer_config

    parser = argparse.ArgumentParser(description="Answer chat requests (JSON lines on stdin) with a tuned model.")
    parser.add_argument("--infer", required=True, help="inference YAML")
    parser.add_argument("--base", action="store_true", help="also answer with the base model")
    parser.add_argument("--completion", action="store_true", help="continue plain text (no chat template)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the inference config")
    args = parser.parse_args(argv)
    try:
        serve(load_infer_config(args.infer, *args.overrides), base=args.base, completion=args.completion)
    except EngineError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
