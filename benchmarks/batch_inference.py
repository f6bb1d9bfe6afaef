"""Batched (left-padded) generation vs. one prompt at a time, same model, same prompts, greedy.

    python benchmarks/batch_inference.py [--model DIR] [--adapter DIR] [--template NAME] [--prompts 16]
                                         [--max-new-tokens 64] [--batch-size 16]

Without --model it uses the offline demo model (built on first use). Prints both timings, tokens per second and
the speedup, and checks that both ways produced the same answers (greedy decoding must not depend on batching).
"""

from __future__ import annotations

import argparse
import os
import time

TOPICS = ["tea", "rivers", "Python lists", "the moon", "bicycles", "bread", "music", "winter", "maps", "bees",
          "chess", "rain", "libraries", "coffee", "mountains", "trains", "gardens", "clocks", "birds", "paper"]


def prompts(count: int) -> list[list[dict]]:
    """Prompts of varied lengths, as real validation sets have (so padding is part of the cost)."""
    return [[{"role": "user", "content": f"Tell me {'a little ' * (i % 4)}about {TOPICS[i % len(TOPICS)]}."}]
            for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model folder (default: the demo model)")
    parser.add_argument("--adapter", help="LoRA adapter folder")
    parser.add_argument("--template", default=None, help="chat template (default: the one training recorded)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from engine.inference import load_infer_config
    from engine.inference.chat_model import ChatModel

    model_dir = args.model
    if not model_dir:
        from engine.models.demo import build_demo_model

        model_dir = str(build_demo_model())
    config = load_infer_config({"model_name_or_path": model_dir, "adapter_name_or_path": args.adapter,
                                "template": args.template, "do_sample": False,
                                "max_new_tokens": args.max_new_tokens})
    model = ChatModel(config)
    conversations = prompts(args.prompts)
    model.batch_chat(conversations[:2], batch_size=2)  # warm-up: first calls pay one-off allocation costs

    began = time.perf_counter()
    single = [model.generate_batch([c], batch_size=1)[0] for c in conversations]
    single_s = time.perf_counter() - began
    began = time.perf_counter()
    batched = model.generate_batch(conversations, batch_size=args.batch_size)
    batched_s = time.perf_counter() - began

    tokens = sum(g.new_tokens for g in batched)
    same = sum(a.text == b.text for a, b in zip(single, batched))
    print(f"model {model_dir} | template {model.template_name} | {len(conversations)} prompts | "
          f"max_new_tokens {args.max_new_tokens} | batch size {args.batch_size}")
    print(f"one at a time : {single_s:8.2f} s  {sum(g.new_tokens for g in single) / single_s:9.1f} tokens/s")
    print(f"batched       : {batched_s:8.2f} s  {tokens / batched_s:9.1f} tokens/s")
    print(f"speedup       : {single_s / batched_s:8.2f}x   identical answers: {same}/{len(conversations)}")
    model.close()


if __name__ == "__main__":
    main()
