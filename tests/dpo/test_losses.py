"""Preference losses on the tiny demo model, checked against the formulas computed directly, token by token."""

import copy
import math
from pathlib import Path

import pytest
import torch

from engine.data import PreferenceCollator, encode_preference, get_template, load_examples
from engine.errors import ConfigError
from engine.training.loss import shift_labels
from engine.training.session import frozen_copy
from engine.training.preference import (PairLogps, PreferenceSettings, log1mexp, logits_to_keep, metric_sums,
                                        needs_reference, pair_logps, preference_loss, reference_logps_fn,
                                        sequence_logps)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(demo_model_dir):
    """Base model, a LoRA policy with non-zero adapters, and a padded batch of 3 real pairs from dpo_demo."""
    from types import SimpleNamespace

    from engine.methods import lora
    from engine.models.loading import load_model, load_tokenizer

    tokenizer = load_tokenizer(str(demo_model_dir))
    template = get_template("qwen", tokenizer)
    examples = load_examples("dpo_demo", REPO / "data", max_samples=3, ranking=True)
    pairs = list(encode_preference(examples, tokenizer, template, cutoff_len=64))
    base = frozen_copy(load_model(str(demo_model_dir), dtype="float32", device="cpu"))
    settings = SimpleNamespace(adapter_name_or_path=None, lora_rank=4, lora_alpha_value=8, lora_dropout=0.0,
                               lora_target="all")
    policy = lora.prepare(copy.deepcopy(base), settings)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    policy.eval()
    batch = PreferenceCollator(pad_token_id=tokenizer.pad_token_id)(pairs)
    return SimpleNamespace(base=base, policy=policy, pairs=pairs, batch=batch, lora=lora, settings=settings)


def direct_logps(model, ids: list[int], labels: list[int]) -> tuple[float, int]:
    """Sum of log p(token) over the labelled tokens, one sequence alone (no padding), in float64."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].double()
    log_probs = torch.log_softmax(logits, dim=-1)
    total, count = 0.0, 0
    for t in range(len(ids) - 1):
        if labels[t + 1] != -100:
            total += float(log_probs[t, labels[t + 1]])
            count += 1
    return total, count


def direct_pairs(model, pairs) -> list[dict]:
    rows = []
    for pair in pairs:
        c, nc = direct_logps(model, pair["chosen_input_ids"], pair["chosen_labels"])
        r, nr = direct_logps(model, pair["rejected_input_ids"], pair["rejected_labels"])
        rows.append({"c": c, "r": r, "nc": nc, "nr": nr})
    return rows


def log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))


def test_padded_pair_logps_match_each_sequence_alone(tiny):
    with torch.no_grad():
        got = pair_logps(tiny.policy, tiny.batch)
    want = direct_pairs(tiny.policy, tiny.pairs)
    assert got.chosen.tolist() == pytest.approx([w["c"] for w in want], rel=1e-5)
    assert got.rejected.tolist() == pytest.approx([w["r"] for w in want], rel=1e-5)
    assert got.chosen_tokens.tolist() == [w["nc"] for w in want]
    assert got.rejected_tokens.tolist() == [w["nr"] for w in want]
    assert min(w["nc"] for w in want) > 0 and tiny.batch["input_ids"].shape[0] == 2 * len(tiny.pairs)


def test_scoring_only_the_answer_positions_changes_nothing(tiny):
    labels = tiny.batch["labels"]
    keep = logits_to_keep(labels)
    first = int((labels != -100).any(dim=0).nonzero()[0])
    assert keep == labels.shape[1] - first + 1 and keep < labels.shape[1]  # the prompt is skipped
    with torch.no_grad():
        full_logits = tiny.policy(input_ids=tiny.batch["input_ids"], attention_mask=tiny.batch["attention_mask"]).logits
        full, counts = sequence_logps(full_logits, shift_labels(labels))
        got = pair_logps(tiny.policy, tiny.batch)
    assert torch.allclose(torch.cat([got.chosen, got.rejected]), full, rtol=1e-5)
    assert torch.equal(torch.cat([got.chosen_tokens, got.rejected_tokens]), counts)
    assert logits_to_keep(torch.full((2, 5), -100)) == 0


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_dpo_sigmoid_matches_the_formula(tiny, smoothing):
    """The reference is the same model with its adapter disabled; the direct check uses the separate base model."""
    beta = 0.3
    settings = PreferenceSettings("sigmoid", pref_beta=beta, dpo_label_smoothing=smoothing)
    reference = reference_logps_fn(tiny.policy, None, "sigmoid")
    with torch.no_grad():
        out = preference_loss(settings, pair_logps(tiny.policy, tiny.batch), reference(tiny.batch))
    pol, ref = direct_pairs(tiny.policy, tiny.pairs), direct_pairs(tiny.base, tiny.pairs)
    losses, margins = [], []
    for p, r in zip(pol, ref):
        z = beta * ((p["c"] - r["c"]) - (p["r"] - r["r"]))
        losses.append(-(1 - smoothing) * log_sigmoid(z) - smoothing * log_sigmoid(-z))
        margins.append(z)
    assert out.losses.tolist() == pytest.approx(losses, rel=1e-4, abs=5e-5)
    assert (out.chosen_rewards - out.rejected_rewards).tolist() == pytest.approx(margins, rel=1e-4, abs=5e-5)
    assert out.chosen_rewards.tolist() == pytest.approx([beta * (p["c"] - r["c"]) for p, r in zip(pol, ref)],
                                                        rel=1e-4, abs=5e-5)
    sums = metric_sums(out)
    assert sums["rewards/accuracies"] == sum(m > 0 for m in margins)
    assert sums["logps/rejected"] == pytest.approx(sum(p["r"] for p in pol), rel=1e-5)
    assert len(set(round(x, 4) for x in losses)) > 1  # a real, non-degenerate batch


def test_fresh_lora_equals_its_reference(tiny):
    """LoRA's B starts at zero, so at step 0 policy == reference: loss log 2, rewards 0."""
    fresh = tiny.lora.prepare(copy.deepcopy(tiny.base), tiny.settings)
    with torch.no_grad():
        out = preference_loss(PreferenceSettings(), pair_logps(fresh, tiny.batch),
                              reference_logps_fn(fresh, None, "sigmoid")(tiny.batch))
    assert out.losses.tolist() == pytest.approx([math.log(2)] * len(tiny.pairs), abs=1e-6)
    assert out.chosen_rewards.abs().max() < 1e-6 and metric_sums(out)["rewards/accuracies"] == 0


def test_frozen_copy_reference_is_the_base(tiny):
    reference = reference_logps_fn(tiny.policy, tiny.base, "sigmoid")
    got = reference(tiny.batch)
    assert got.chosen.tolist() == pytest.approx([w["c"] for w in direct_pairs(tiny.base, tiny.pairs)], rel=1e-5)
    assert not got.chosen.requires_grad
    assert reference_logps_fn(tiny.policy, None, "orpo") is None and reference_logps_fn(tiny.policy, None, "simpo") is None


def test_orpo_matches_the_formula(tiny):
    beta = 0.25
    with torch.no_grad():
        out = preference_loss(PreferenceSettings("orpo", pref_beta=beta), pair_logps(tiny.policy, tiny.batch))
    want = []
    for p in direct_pairs(tiny.policy, tiny.pairs):
        c, r = p["c"] / p["nc"], p["r"] / p["nr"]
        log_odds = (c - math.log(1 - math.exp(c))) - (r - math.log(1 - math.exp(r)))
        want.append(-c - beta * log_sigmoid(log_odds))
    assert out.losses.tolist() == pytest.approx(want, rel=1e-4)


def test_simpo_matches_the_formula(tiny):
    beta, gamma = 2.0, 0.7
    with torch.no_grad():
        out = preference_loss(PreferenceSettings("simpo", pref_beta=beta, simpo_gamma=gamma),
                              pair_logps(tiny.policy, tiny.batch))
    rows = direct_pairs(tiny.policy, tiny.pairs)
    want = [-log_sigmoid(beta * (p["c"] / p["nc"] - p["r"] / p["nr"]) - gamma) for p in rows]
    assert out.losses.tolist() == pytest.approx(want, rel=1e-4)
    assert out.chosen_rewards.tolist() == pytest.approx([beta * p["c"] / p["nc"] for p in rows], rel=1e-4)


@pytest.mark.parametrize("loss", ["sigmoid", "orpo", "simpo"])
def test_pref_ftx_adds_sft_on_the_chosen_answer(loss):
    policy = PairLogps(torch.tensor([-12.0, -30.0]), torch.tensor([-15.0, -20.0]), torch.tensor([4, 10]),
                       torch.tensor([5, 8]))
    reference = PairLogps(torch.tensor([-13.0, -29.0]), torch.tensor([-14.0, -21.0]), policy.chosen_tokens,
                          policy.rejected_tokens)
    plain = preference_loss(PreferenceSettings(loss), policy, reference).losses
    mixed = preference_loss(PreferenceSettings(loss, pref_ftx=0.5), policy, reference).losses
    assert (mixed - plain).tolist() == pytest.approx([0.5 * 3.0, 0.5 * 3.0])


@pytest.mark.parametrize("loss", ["sigmoid", "hinge", "ipo", "orpo", "simpo"])
def test_a_pair_truncation_left_empty_keeps_every_gradient_finite(loss):
    # Pairs that train nothing are kept, as LLaMA-Factory keeps them; an empty answer (0 tokens, log-prob 0) must
    # leave the other pairs' gradients finite, with or without pref_ftx (ORPO's odds of it are infinite).
    chosen = torch.tensor([-12.0, 0.0, -9.0], requires_grad=True)
    rejected = torch.tensor([-15.0, 0.0, 0.0], requires_grad=True)
    policy = PairLogps(chosen, rejected, torch.tensor([4, 0, 3]), torch.tensor([5, 0, 0]))
    reference = PairLogps(torch.tensor([-13.0, 0.0, -8.0]), torch.tensor([-14.0, 0.0, 0.0]), policy.chosen_tokens,
                          policy.rejected_tokens)
    for ftx in (0.0, 0.5):
        out = preference_loss(PreferenceSettings(loss, pref_ftx=ftx), policy, reference)
        chosen.grad = rejected.grad = None
        out.losses.sum().backward()
        assert torch.isfinite(out.losses).all() and torch.isfinite(chosen.grad).all()
        assert torch.isfinite(rejected.grad).all() and chosen.grad[0] != 0


def test_log1mexp_is_accurate_near_zero_and_far_below():
    x = torch.tensor([-1e-7, -1e-3, -0.5, -0.7, -2.0, -40.0], dtype=torch.float64)
    want = [math.log(-math.expm1(v)) for v in x.tolist()]
    assert log1mexp(x).tolist() == pytest.approx(want, rel=1e-12)
    assert torch.isfinite(log1mexp(torch.tensor([-1e-6], dtype=torch.float32))).all()


def test_gradient_flows_only_through_the_policy(tiny):
    policy = tiny.lora.prepare(copy.deepcopy(tiny.base), tiny.settings)
    out = preference_loss(PreferenceSettings(), pair_logps(policy, tiny.batch),
                          reference_logps_fn(policy, None, "sigmoid")(tiny.batch))
    out.losses.mean().backward()
    grads = {n: p.grad for n, p in policy.named_parameters() if p.requires_grad}
    assert grads and all("lora_" in n for n in grads)
    assert any(g is not None and g.abs().sum() > 0 for n, g in grads.items() if "lora_B" in n)


def test_unknown_loss_is_refused_with_the_valid_names():
    with pytest.raises(ConfigError, match="sigmoid, hinge, ipo, orpo, simpo"):
        needs_reference("kto_pair")
