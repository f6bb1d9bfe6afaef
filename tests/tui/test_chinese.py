"""The zh interface at 80x24 shows no English sentence where the engine supplies the words: the config stage's
LLaMA-Factory defaults under the diff, the pre-flight's proposal and the parameter help of the edit dialog, and
the model stage's reason a model cannot be used. Where its lines break, a number stays with its unit."""

import re

import pytest
from pilot_helpers import SIZE, make_app, messages, on_screen, shown_lines, wait_until

# Three plain English words in a row (key names such as learning_rate and values such as cosine stand alone).
ENGLISH = re.compile(r"(?<![\w<./-])[A-Za-z']{2,}(?: [A-Za-z']{2,}){2,}(?![\w>/-])")


@pytest.fixture(autouse=True)
def preflight_with_a_proposal(monkeypatch):
    """The measured micro-batch of 2 did not fit and 1 does: a proposal, as the engine's pre-flight gives it."""
    import engine.api
    from engine.measurement import Measurement
    from engine.recipes.measure import fit_micro_batch, one_device_note, peak_too_high, proposal_reason

    def measure_steps(config, **_kwargs):
        asked, accum = config["per_device_train_batch_size"], config["gradient_accumulation_steps"]

        def attempt(micro, accum):
            if micro > 1:
                raise peak_too_high(int(15 * 2**30), 16 * 2**30)

        micro, accum, _, first = fit_micro_batch(attempt, asked, accum)
        reason, note = (proposal_reason(first, micro, accum) if first else None), one_device_note("ddp")
        return Measurement(device="cpu", micro_batch=micro, grad_accum=accum, steps_timed=3, step_s=0.4,
                           tokens_per_s=900.0, startup_s=6.0, peak_bytes=700 * 2**20, limit_bytes=16 * 2**30,
                           total_steps=20, predicted_s=14.0, fits=True,
                           proposal={"per_device_train_batch_size": micro, "gradient_accumulation_steps": accum}
                           if first else None, reason=reason.text if reason else "", notes=[note.text],
                           reason_message=reason.to_dict() if reason else None, note_messages=[note.to_dict()])

    monkeypatch.setattr(engine.api, "measure_steps", measure_steps)


def text_of(app, selector: str) -> str:
    from textual.widgets import Static

    return str(app.screen.query_one(selector, Static).render())


async def to_config(pilot, app):
    await pilot.press("ctrl+n")
    await wait_until(pilot, lambda: on_screen(app, "DataScreen") and app.screen.counts, what="data listed")
    datasets = app.screen.query_one("#datasets")
    datasets.deselect_all()
    datasets.select("alpaca_demo")
    await pilot.press("ctrl+n")
    await wait_until(pilot, lambda: on_screen(app, "ModelScreen") and app.state.model_path, what="model")
    await pilot.press("ctrl+n")
    await wait_until(pilot, lambda: on_screen(app, "GpuScreen") and app.device_report is not None, what="device")
    await pilot.press("ctrl+n")
    await wait_until(pilot, lambda: on_screen(app, "ConfigScreen") and app.screen.built is not None, what="config")


async def test_config_stage_reads_in_chinese(workspace):
    app = make_app(workspace, lang="zh")
    async with app.run_test(size=SIZE) as pilot:
        await to_config(pilot, app)
        await wait_until(pilot, lambda: app.state.fit and "放不下" in text_of(app, "#preflight"),
                         what="the pre-flight's proposal")
        preflight = text_of(app, "#preflight")
        assert "微批次 4 放不下" in preflight and not ENGLISH.findall(preflight), preflight
        await pilot.press("d")
        await pilot.pause(0.2)
        diff = text_of(app, "#diff")
        block = diff[diff.index("与 LLaMA-Factory 默认值不同"):]
        assert "per_device_eval_batch_size" in block and not ENGLISH.findall(block), ENGLISH.findall(block)
        # the pre-flight's fit in the diff gives its reason in Chinese too
        fitted = diff[diff.index("gradient_accumulation_steps:"):]
        assert fitted.splitlines()[1].strip().startswith("预检：微批次 4 放不下")
        await pilot.press("d", "e")
        await wait_until(pilot, lambda: on_screen(app, "EditValue"), what="the edit dialog")
        await pilot.press(*"learning_rate", "enter")
        await wait_until(pilot, lambda: on_screen(app, "EditValue") and app.screen.key == "learning_rate",
                         what="learning_rate's dialog")
        assert app.screen.help_text == "峰值学习率。"
        assert "峰值学习率" in "".join(str(s.render()) for s in app.screen.query(".note"))


async def test_model_stage_says_in_chinese_why_a_model_cannot_be_used(workspace):
    from textual.widgets import Input

    app = make_app(workspace, lang="zh")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "DataScreen") and app.screen.counts, what="data listed")
        app.screen.query_one("#datasets").deselect_all()
        app.screen.query_one("#datasets").select("alpaca_demo")
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "ModelScreen") and app.state.model_path, what="model")
        app.screen.query_one("#model-input", Input).value = "acme/mystery-7b"
        app.screen.query_one("#model-input", Input).focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: "无法判断" in messages(app), what="the refusal")
        said = re.sub(r"`[^`]*`", "", messages(app))  # commands stay commands
        assert "'acme/mystery-7b'" in said and not ENGLISH.findall(said), ENGLISH.findall(said)


# A line that ends in a number, and one that starts with a unit (the CJK ones the catalog writes after a number).
ENDS_IN_NUMBER = re.compile(r"\d$")
STARTS_WITH_UNIT = re.compile(r"\s*(?:行|个|步|秒|条|轮|次|对|倍|分钟|token|[KMG]i?B)")


async def test_a_number_stays_with_its_unit_where_a_line_breaks(workspace):
    app = make_app(workspace, lang="zh")
    async with app.run_test(size=SIZE) as pilot:
        await to_config(pilot, app)
        await wait_until(pilot, lambda: "token/s" in text_of(app, "#preflight"), what="the pre-flight")
        await pilot.press("d")
        await pilot.pause(0.2)
        assert re.search(r"6 ?行不参与训练", text_of(app, "#diff"))  # the held-out rows' reason: a number, then 行
        for selector in ("#diff", "#preflight", "#advice"):
            lines = shown_lines(app.screen.query_one(selector))
            for above, below in zip(lines, lines[1:]):
                assert not (ENDS_IN_NUMBER.search(above) and STARTS_WITH_UNIT.match(below)), (selector, above, below)
