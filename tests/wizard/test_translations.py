"""Text the engine writes reads in the interface language: the config stage's parameter help and the
LLaMA-Factory defaults under its diff are Chinese in zh, and in English exactly the engine's words."""

import re

import pytest

from assistant import i18n

# Three plain English words in a row: a sentence left untranslated (key names such as learning_rate, values
# such as `cosine` and names such as LLaMA-Factory stand alone in Chinese text and do not match).
ENGLISH = re.compile(r"(?<![\w<./-])[A-Za-z']{2,}(?:[,;]? [A-Za-z']{2,}){2,}(?![\w>/-])")


def english_left(text: str) -> list[str]:
    return ENGLISH.findall(text)


@pytest.fixture()
def zh():
    i18n.set_language("zh")
    yield
    i18n.set_language("en")


def test_the_detector_finds_english_sentences_and_passes_chinese_ones():
    assert english_left("one sample per device fits every GPU")
    assert not english_left("每个设备 1 个样本；内存允许时再调大它（或 gradient_accumulation_steps）")
    assert not english_left("Hugging Face / ModelScope 的缓存，LLaMA-Factory 的 LoRA+")


def test_parameter_help_is_chinese_in_zh_and_the_engines_in_english(zh):
    import dataclasses

    from assistant.wizard.stages import config as config_stage
    from engine.config.train import TrainConfig

    engine_help = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(TrainConfig)
                   if not f.metadata.get("internal")}
    helps = config_stage.params()
    assert set(helps) == set(engine_help)
    for name, info in helps.items():
        assert info.help and info.help != engine_help[name], name
        assert not english_left(info.help), (name, english_left(info.help))
    i18n.set_language("en")
    assert {name: info.help for name, info in config_stage.params().items()} == engine_help


def test_every_parameter_and_lf_default_has_chinese_and_no_stale_key():
    """The zh-only keys (i18n.ENGINE_ENGLISH) follow the engine: one per parameter and per default difference."""
    import dataclasses

    from engine.config.lf_defaults import DEFAULT_DIFFERENCES
    from engine.config.train import TrainConfig

    zh = i18n.CATALOGS["zh"]
    fields = {f.name for f in dataclasses.fields(TrainConfig) if not f.metadata.get("internal")}
    assert {key.removeprefix("param.") for key in zh if key.startswith("param.")} == fields
    rows = {row.key: row for row in DEFAULT_DIFFERENCES}
    for key in (k.removeprefix("lf_default.") for k in zh if k.startswith("lf_default.")):
        name, _, side = key.partition(".")
        assert name in rows and side in ("", "default", "ours"), key
        if side:
            assert isinstance(getattr(rows[name], "lf_default" if side == "default" else "ours"), str), key
    assert set(rows) <= {k.removeprefix("lf_default.") for k in zh}
    assert not any(key.startswith(i18n.ENGINE_ENGLISH) for key in i18n.CATALOGS["en"])


def _lf_rows(folder):
    """The defaults block for an example that sets none of the keys: every row of the table."""
    from assistant.wizard import build
    from engine.config.lf_defaults import DEFAULT_DIFFERENCES

    example = folder / "example.yaml"
    example.write_text("model_name_or_path: Qwen/Qwen3-0.6B\n", encoding="utf-8")
    config = {row.key: row.ours for row in DEFAULT_DIFFERENCES}
    return build._lf_default_rows(example, config, [])


def test_lf_defaults_block_is_chinese_in_zh_and_unchanged_in_english(zh, tmp_path):
    from engine.config.lf_defaults import DEFAULT_DIFFERENCES

    rows = _lf_rows(tmp_path)
    assert len(rows) == len(DEFAULT_DIFFERENCES)
    for row in rows:
        for text in (row.reason, str(row.default), str(row.new)):
            assert not english_left(text), (row.parameter, english_left(text))
    words = {row.parameter: row for row in rows}
    assert words["gradient_checkpointing"].new == "关闭"
    i18n.set_language("en")
    engine = {row.key: row for row in DEFAULT_DIFFERENCES}
    for row in _lf_rows(tmp_path):
        assert (row.default, row.new, row.reason) == (engine[row.parameter].lf_default, engine[row.parameter].ours,
                                                     engine[row.parameter].reason)
