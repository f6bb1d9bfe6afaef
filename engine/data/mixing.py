"""How several datasets become one: ``mix_strategy`` and ``interleave_probs``, as LLaMA-Factory merges them.

``concat`` appends the datasets in the order given. The interleave strategies are ``datasets.interleave_datasets``
itself (LLaMA-Factory calls it with the training seed), run on row indices, so the same rows are drawn, repeated or
left out as there: ``interleave_under`` stops when the first dataset runs out, ``interleave_over`` when the last
one does (the shorter ones repeat), ``interleave_once`` draws every row once. Without ``interleave_probs`` the
datasets alternate; with them, each next row comes from a dataset drawn with those probabilities.
"""

from __future__ import annotations

import math

STOPPING = {"interleave_under": "first_exhausted", "interleave_over": "all_exhausted",
            "interleave_once": "all_exhausted_without_replacement"}
MIX_STRATEGIES: tuple[str, ...] = ("concat", *STOPPING)


def parse_probs(value) -> list[float] | None:
    """interleave_probs as floats ("0.7,0.3", or a YAML list); None when not set."""
    if value is None or value == "":
        return None
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return [float(item) for item in items if str(item).strip()]


def mix_problems(strategy: str, probs_value, dataset_count: int, eval_count: int) -> list[str]:
    """LLaMA-Factory's rules: probabilities only with interleaving, one per dataset (and per eval dataset), and
    (datasets' rule) they sum to 1."""
    try:
        probs = parse_probs(probs_value)
    except ValueError:
        return [f"interleave_probs {str(probs_value)[:60]!r} must be numbers separated by commas (e.g. 0.7,0.3)."]
    if probs is None:
        return []
    if strategy == "concat":
        return ["interleave_probs only applies to interleaved mixing: set mix_strategy: interleave_under, "
                "interleave_over or interleave_once (or remove interleave_probs)."]
    problems = []
    if dataset_count and len(probs) != dataset_count:
        problems.append(f"interleave_probs has {len(probs)} values for {dataset_count} dataset(s): give one per "
                        "dataset, in the same order.")
    if eval_count and len(probs) != eval_count:
        problems.append(f"interleave_probs has {len(probs)} values for {eval_count} eval dataset(s); "
                        "LLaMA-Factory mixes eval_dataset with the same probabilities, so the counts must match.")
    if any(p < 0 or not math.isfinite(p) for p in probs) or abs(sum(probs) - 1.0) > 1e-8:
        problems.append(f"interleave_probs must be non-negative and sum to 1 (they sum to {sum(probs):g}).")
    return problems


def mix_order(lengths: list[int], strategy: str, probs: list[float] | None, seed: int) -> list[tuple[int, int]]:
    """(dataset index, row index) of every row of the mixed dataset, in order."""
    if len(lengths) == 1 or strategy == "concat":
        return [(d, row) for d, length in enumerate(lengths) for row in range(length)]
    from datasets import Dataset, interleave_datasets

    parts = [Dataset.from_dict({"source": [d] * length, "row": list(range(length))})
             for d, length in enumerate(lengths)]
    mixed = interleave_datasets(parts, probabilities=probs, seed=seed, stopping_strategy=STOPPING[strategy])
    return list(zip(mixed["source"], mixed["row"]))


def mix(parts: list[list], strategy: str, probs_value, seed: int) -> list:
    """The datasets' rows mixed as LLaMA-Factory mixes them (see the module docstring)."""
    order = mix_order([len(part) for part in parts], strategy, parse_probs(probs_value), seed)
    return [parts[d][row] for d, row in order]
