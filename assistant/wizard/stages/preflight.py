"""The measured pre-flight of stage 3: which config was measured, what it found, and how that reads.

The screen asks engine.api.measure_steps (a child process: a few real optimizer steps on the chosen device, the
longest micro-batches first) before the config is confirmed. A result belongs to the config it measured (`key`):
an edit that changes the work per step asks again, one that does not (logging, saving, the output folder) keeps
it. When the configured micro-batch does not fit, the measurement's proposal becomes `state.fit`, which the build
applies with its reason (assistant/wizard/adapt.py) — and the stored result is keyed to that new config, since
the proposal is exactly what was measured.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from assistant.formatting import fmt_age, fmt_duration
from assistant.i18n import t, t_message
from assistant.wizard.state import WizardState

# Keys that change nothing a step computes: editing them keeps the measurement.
UNMEASURED = ("logging_steps", "save_steps", "save_total_limit", "save_strategy", "plot_loss", "output_dir",
              "report_to", "overwrite_output_dir", "eval_steps", "eval_strategy", "run_name", "save_only_model")


def failure_text(exc) -> str:
    """What the config stage says when the pre-flight failed with EngineError `exc`, in the interface language: the
    measurement's own errors name the pre-flight already; any other is said to have stopped it."""
    text = t_message(exc.message, str(exc))
    if exc.message is not None and exc.message.code.startswith("measure."):
        return text
    return t("preflight.failed", error=text)


def measure_key(config: dict[str, Any]) -> str:
    data = {key: value for key, value in config.items() if key not in UNMEASURED}
    return hashlib.sha1(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def waiting_for(state: WizardState) -> str | None:
    """Why the pre-flight cannot run yet (the model is still being fetched, or failed to be), or None."""
    fetch = state.download.get("state")
    if fetch == "running":
        return t("preflight.waiting_model")
    if fetch == "failed" or not state.model_path:
        return t("preflight.no_model")
    return None


def current(state: WizardState, config: dict[str, Any]):
    """The stored measurement of this config (engine.measurement.Measurement), or None."""
    from engine.measurement import Measurement

    stored = state.measured or {}
    if stored.get("key") != measure_key(config) or not stored.get("result"):
        return None
    return Measurement.from_dict(stored["result"])


def record(state: WizardState, config: dict[str, Any], measurement) -> WizardState:
    """Keep the result; a proposal becomes the fit the build applies, and the result is keyed to its config."""
    result = measurement.to_dict()
    if not measurement.proposal:
        return state.replace(measured={"key": measure_key(config), "result": result})
    fit = dict(measurement.proposal, reason=measurement.reason, reason_message=measurement.reason_message)
    return state.replace(fit=fit, measured={"key": measure_key(dict(config, **measurement.proposal)),
                                            "result": result})


def gib(value: float | None) -> str:
    return "?" if value is None else f"{value / 2**30:.1f} GiB"


def reason_words(measurement) -> str:
    """Why the proposal (or why nothing fits), in the interface language."""
    return t_message(measurement.reason_message, measurement.reason)


def note_words(measurement) -> list[str]:
    """The measurement's notes in the interface language (the engine's English for one stored without codes)."""
    coded = measurement.note_messages if len(measurement.note_messages) == len(measurement.notes) else []
    return [t_message(coded[i], note) if coded else note for i, note in enumerate(measurement.notes)]


# A measurement younger than this is the one just taken: its age would only be noise.
FRESH_S = 60.0


def age_words(measurement, now: float | None = None) -> str:
    """When the measurement was taken ("measured 3 h ago"), "" for one just taken; one stored before the time was
    kept says so."""
    import time

    if measurement.measured_at is None:
        return t("preflight.age_unknown")
    age = (now if now is not None else time.time()) - measurement.measured_at
    return t("preflight.age", ago=fmt_age(age)) if age >= FRESH_S else ""


def describe(measurement, now: float | None = None) -> list[tuple[str, str]]:
    """(level, line) pairs: level "" for facts, "warning" for what needs attention. A stored measurement shown
    again says how old it is."""
    m = measurement
    notes = note_words(m)
    age = age_words(m, now)
    if not m.fits:
        return [("warning", " ".join(part for part in (t("preflight.no_fit", why=reason_words(m)), age) if part)),
                *(("warning", note) for note in notes)]
    result = t("preflight.result", device=m.device.split(":")[0].upper(), step=f"{m.step_s:.2f}",
               tps=f"{m.tokens_per_s:,.0f}", peak=gib(m.peak_bytes), free=gib(m.limit_bytes))
    lines = [("", " ".join(part for part in (result, age) if part)),
             ("", t("preflight.prediction", total=fmt_duration(m.predicted_s), steps=m.total_steps,
                    startup=fmt_duration(m.startup_s)))]
    if m.proposal:
        lines.append(("warning", t("preflight.proposal", why=reason_words(m))))
    lines += [("warning", note) for note in notes]
    return lines
