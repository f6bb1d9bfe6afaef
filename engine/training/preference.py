"""Preference training pieces: pair batches, answer log-probabilities, and the DPO / ORPO / SimPO losses.

The formulas follow the peers (TRL's DPOTrainer/CPOTrainer and LLaMA-Factory's DPO workflow), so a config that
trains there means the same here:

- ``sigmoid`` (DPO): ``-log σ(β·[(π_c - ref_c) - (π_r - ref_r)])`` on SUMMED answer log-probs, with robust-DPO label
  smoothing ``ε``: ``(1-ε)·that + ε·(-log σ(-β·[...]))``. Rewards are ``β·(π - ref)``.
- ``orpo``: ``-avg_c + β·(-log σ(log odds_c - log odds_r))`` on MEAN per-token log-probs, ``odds = p / (1 - p)``.
  Reference-free; rewards are ``β·avg``.
- ``simpo``: ``-log σ(β·(avg_c - avg_r) - γ)`` on MEAN per-token log-probs. Reference-free; rewards are ``β·avg``.
- ``hinge``: ``relu(1 - β·[(π_c - ref_c) - (π_r - ref_r)])`` on summed log-probs; rewards as DPO.
- ``ipo``: ``([(π_c - ref_c) - (π_r - ref_r)] - 1/(2β))²`` on MEAN per-token log-probs; rewards ``β·(π - ref)``.

``pref_ftx`` adds ``ftx·(-avg_c)``, an SFT loss on the chosen answer, to any of them.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from engine.errors import ConfigError
from engine.training.loss import base_causal_lm, model_inputs, shift_labels

IGNORE_INDEX = -100


# --- batches (engine.data.collator.PreferenceCollator puts the N chosen rows first, then the N rejected) -----------

LF_DIVIDES_BY_ZERO = (" LLaMA-Factory's {what} divides their log-probability by their length of 0 there (NaN); here "
                      "they add nothing to the gradient.")


def divides_by_answer_length(pref_loss: str, pref_ftx: float) -> bool:
    """Whether LLaMA-Factory divides an answer's log-probability by its token count: the ipo, orpo and simpo losses,
    and the SFT term pref_ftx adds. An answer truncation left empty gives 0/0 (NaN) there; here, nothing."""
    return pref_loss in ("ipo", "orpo", "simpo") or pref_ftx > 1e-6


# --- log-probabilities -----------------------------------------------------------------------------------------------

@dataclass
class PairLogps:
    """Per pair: the summed log-probability of each answer's labelled tokens, and how many tokens that is."""

    chosen: torch.Tensor
    rejected: torch.Tensor
    chosen_tokens: torch.Tensor
    rejected_tokens: torch.Tensor

    @property
    def chosen_mean(self) -> torch.Tensor:
        return self.chosen / self.chosen_tokens.clamp(min=1)

    @property
    def rejected_mean(self) -> torch.Tensor:
        return self.rejected / self.rejected_tokens.clamp(min=1)


def sequence_logps(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of log p(target) over labelled positions, labelled-token count) per row, for targets already aligned
    with the logits (position t scores target t).

    cross_entropy(reduction="none") gives -log p(label) without materialising a second vocab-sized tensor.
    """
    token_nll = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX,
                                reduction="none").view(targets.shape)
    return -token_nll.sum(dim=-1), (targets != IGNORE_INDEX).sum(dim=-1)


def row_logps(model, batch: dict[str, torch.Tensor], sequence_sum=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of a padded batch: the summed log-probability of its labelled tokens and their count.

    Only the positions from the earliest labelled token on get logits (``logits_to_keep``): the shared prompt is
    never scored, and its vocab-wide logits are the largest tensor of the step (2 x 2048 prompt tokens x 151k
    Qwen3 vocab in fp32 is 2.5 GB). A sequence-parallel slice (it carries ``shift_labels``) scores its own
    positions, and ``sequence_sum`` adds the slices of each row up across the ranks that share it.
    """
    if "shift_labels" in batch:
        logps, tokens = sequence_logps(model(**model_inputs(batch), use_cache=False).logits, batch["shift_labels"])
        return (sequence_sum(logps), sequence_sum(tokens)) if sequence_sum else (logps, tokens)
    labels = batch["labels"]
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    keep = logits_to_keep(labels) if accepts_logits_to_keep(model) else 0
    if keep:
        inputs["logits_to_keep"] = keep
        labels = labels[:, -keep:]  # logits now start one position before the first answer token
    return sequence_logps(model(**inputs, use_cache=False).logits, shift_labels(labels))


def pair_logps(model, batch: dict[str, torch.Tensor], sequence_sum=None) -> PairLogps:
    """Run ``model`` on a PreferenceCollator batch (chosen rows, then rejected) and split the log-probs in two."""
    logps, tokens = row_logps(model, batch, sequence_sum)
    half = logps.shape[0] // 2
    return PairLogps(logps[:half], logps[half:], tokens[:half], tokens[half:])


def reference_logps_fn(model, frozen_copy, pref_loss: str) -> Callable[..., PairLogps] | None:
    """How the reference log-probs are computed: None (reference-free losses), the frozen copy, or the policy
    with its adapter disabled (peft's ``disable_adapter()`` context, so the base weights are shared)."""
    if not needs_reference(pref_loss):
        return None

    def reference(batch: dict, sequence_sum=None) -> PairLogps:
        with torch.no_grad():
            if frozen_copy is not None:
                return pair_logps(frozen_copy, batch, sequence_sum)
            with model.disable_adapter():
                return pair_logps(model, batch, sequence_sum)

    return reference


def logits_to_keep(labels: torch.Tensor) -> int:
    """How many final positions need logits: from the one predicting the earliest labelled token to the end."""
    labelled = (labels != IGNORE_INDEX).any(dim=0).nonzero()
    if labelled.numel() == 0:
        return 0
    return labels.shape[1] - max(int(labelled[0]) - 1, 0)


def accepts_logits_to_keep(model) -> bool:
    """Whether the causal LM's forward takes ``logits_to_keep`` (transformers' own models do; custom code may not)."""
    inner = base_causal_lm(model)
    kind = type(inner)
    if kind not in _ACCEPTS_KEEP:
        _ACCEPTS_KEEP[kind] = "logits_to_keep" in inspect.signature(inner.forward).parameters
    return _ACCEPTS_KEEP[kind]


_ACCEPTS_KEEP: dict[type, bool] = {}


# --- losses ----------------------------------------------------------------------------------------------------------

@dataclass
class PreferenceOutput:
    """Per-pair losses (to be averaged by the caller) and the rewards and log-probs the peers log."""

    losses: torch.Tensor
    chosen_rewards: torch.Tensor
    rejected_rewards: torch.Tensor
    chosen_logps: torch.Tensor
    rejected_logps: torch.Tensor


def dpo_sigmoid_loss(policy: PairLogps, reference: PairLogps, beta: float,
                     label_smoothing: float = 0.0) -> PreferenceOutput:
    """DPO (Rafailov et al. 2023) with robust-DPO label smoothing, on summed answer log-probs."""
    chosen_ratio = policy.chosen - reference.chosen
    rejected_ratio = policy.rejected - reference.rejected
    logits = beta * (chosen_ratio - rejected_ratio)
    losses = -F.logsigmoid(logits) * (1 - label_smoothing) - F.logsigmoid(-logits) * label_smoothing
    return PreferenceOutput(losses, beta * chosen_ratio.detach(), beta * rejected_ratio.detach(),
                            policy.chosen.detach(), policy.rejected.detach())


def hinge_loss(policy: PairLogps, reference: PairLogps, beta: float) -> PreferenceOutput:
    """SLiC-style hinge on the DPO log-ratio margin (summed log-probs): ``relu(1 - β·[...])``."""
    chosen_ratio = policy.chosen - reference.chosen
    rejected_ratio = policy.rejected - reference.rejected
    losses = torch.relu(1 - beta * (chosen_ratio - rejected_ratio))
    return PreferenceOutput(losses, beta * chosen_ratio.detach(), beta * rejected_ratio.detach(),
                            policy.chosen.detach(), policy.rejected.detach())


def ipo_loss(policy: PairLogps, reference: PairLogps, beta: float) -> PreferenceOutput:
    """IPO (Azar et al. 2023): the log-ratio margin regressed onto 1/(2β), on MEAN per-token log-probs."""
    chosen_ratio = policy.chosen_mean - reference.chosen_mean
    rejected_ratio = policy.rejected_mean - reference.rejected_mean
    losses = (chosen_ratio - rejected_ratio - 1 / (2 * beta)) ** 2
    return PreferenceOutput(losses, beta * chosen_ratio.detach(), beta * rejected_ratio.detach(),
                            policy.chosen_mean.detach(), policy.rejected_mean.detach())


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x < 0, accurate both near 0 and far below it (Mächler 2012)."""
    return torch.where(x > -0.6931471805599453, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def orpo_loss(policy: PairLogps, beta: float) -> PreferenceOutput:
    """ORPO (Hong et al. 2024): SFT on the chosen answer plus β·odds-ratio loss, on mean per-token log-probs.

    An answer truncation left empty has no odds (its mean log-prob is 0: p = 1): its pair's odds-ratio term is 0,
    computed on a stand-in value, since an infinite one would turn the gradient NaN even where it is not chosen."""
    chosen, rejected = policy.chosen_mean, policy.rejected_mean
    has_odds = (policy.chosen_tokens > 0) & (policy.rejected_tokens > 0)
    stand_in = torch.full_like(chosen, -1.0)
    odds_chosen, odds_rejected = torch.where(has_odds, chosen, stand_in), torch.where(has_odds, rejected, stand_in)
    log_odds = (odds_chosen - odds_rejected) - (log1mexp(odds_chosen) - log1mexp(odds_rejected))
    losses = -chosen + beta * torch.where(has_odds, -F.logsigmoid(log_odds), torch.zeros_like(log_odds))
    return PreferenceOutput(losses, beta * chosen.detach(), beta * rejected.detach(), chosen.detach(),
                            rejected.detach())


def simpo_loss(policy: PairLogps, beta: float, gamma: float) -> PreferenceOutput:
    """SimPO (Meng et al. 2024): length-normalised reward margin against a target margin γ, no reference."""
    chosen, rejected = policy.chosen_mean, policy.rejected_mean
    losses = -F.logsigmoid(beta * (chosen - rejected) - gamma)
    return PreferenceOutput(losses, beta * chosen.detach(), beta * rejected.detach(), chosen.detach(),
                            rejected.detach())


@dataclass(frozen=True)
class PreferenceSettings:
    """The config keys the losses read (LLaMA-Factory names)."""

    pref_loss: str = "sigmoid"
    pref_beta: float = 0.1
    pref_ftx: float = 0.0
    simpo_gamma: float = 0.5
    dpo_label_smoothing: float = 0.0

    @classmethod
    def from_config(cls, config) -> "PreferenceSettings":
        return cls(config.pref_loss, config.pref_beta, config.pref_ftx, config.simpo_gamma,
                   config.dpo_label_smoothing)


LossFn = Callable[[PairLogps, PairLogps | None, PreferenceSettings], PreferenceOutput]
PREFERENCE_LOSSES: dict[str, LossFn] = {
    "sigmoid": lambda policy, ref, s: dpo_sigmoid_loss(policy, ref, s.pref_beta, s.dpo_label_smoothing),
    "hinge": lambda policy, ref, s: hinge_loss(policy, ref, s.pref_beta),
    "ipo": lambda policy, ref, s: ipo_loss(policy, ref, s.pref_beta),
    "orpo": lambda policy, ref, s: orpo_loss(policy, s.pref_beta),
    "simpo": lambda policy, ref, s: simpo_loss(policy, s.pref_beta, s.simpo_gamma),
}
# ORPO and SimPO are reference-free: no reference forward pass, no frozen copy.
NEEDS_REFERENCE: dict[str, bool] = {"sigmoid": True, "hinge": True, "ipo": True, "orpo": False, "simpo": False}


def needs_reference(pref_loss: str) -> bool:
    if pref_loss not in NEEDS_REFERENCE:
        raise ConfigError(f"pref_loss {pref_loss!r} is unknown. Valid: {', '.join(PREFERENCE_LOSSES)}.")
    return NEEDS_REFERENCE[pref_loss]


def preference_loss(settings: PreferenceSettings, policy: PairLogps,
                    reference: PairLogps | None = None) -> PreferenceOutput:
    """The configured loss per pair, plus ``pref_ftx`` times the SFT loss on the chosen answer."""
    if needs_reference(settings.pref_loss) and reference is None:
        raise ValueError(f"pref_loss {settings.pref_loss} needs the reference model's log-probs")
    out = PREFERENCE_LOSSES[settings.pref_loss](policy, reference, settings)
    if settings.pref_ftx > 1e-6:
        out.losses = out.losses + settings.pref_ftx * -policy.chosen_mean
    return out


def metric_sums(out: PreferenceOutput) -> dict[str, float]:
    """Per-batch SUMS of the logged metrics; divide by the pair count of the window to get the peers' means."""
    chosen, rejected = out.chosen_rewards.float(), out.rejected_rewards.float()
    return {
        "rewards/chosen": float(chosen.sum()),
        "rewards/rejected": float(rejected.sum()),
        "rewards/accuracies": float((chosen > rejected).float().sum()),
        "rewards/margins": float((chosen - rejected).sum()),
        "logps/chosen": float(out.chosen_logps.float().sum()),
        "logps/rejected": float(out.rejected_logps.float().sum()),
    }
