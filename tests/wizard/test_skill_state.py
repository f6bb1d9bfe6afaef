"""The skill file, the wizard state on disk, and the interface strings."""

import json
import re

import pytest
import yaml

from assistant import i18n
from assistant.tui.screens import SCREENS
from assistant.wizard.skill import SKILLS_DIR, parse_skill
from assistant.wizard.state import load_state, new_state, rename_for_model, save_state
from engine.errors import ConfigError


def test_every_stage_has_a_screen_and_every_label_exists(skill):
    assert skill.stage_ids[0] == "flow" and skill.stage_ids[-1] == "summary"
    for stage in skill.stages:
        assert stage.id in SCREENS
        for lang in i18n.LANGUAGES:
            assert f"stage.{stage.id}.title" in i18n.CATALOGS[lang]
            for question in stage.questions:
                assert f"q.{question.id}.prompt" in i18n.CATALOGS[lang]
                for choice in question.choices:
                    assert f"q.{question.id}.{choice}" in i18n.CATALOGS[lang], (lang, question.id, choice)
    for line in skill.board:
        assert f"board.{line}" in i18n.CATALOGS["zh"]


def test_every_way_a_model_is_had_reads_in_each_language():
    """The model stage says how the recommended model is had in the UI's language, not the engine's English."""
    import typing

    from engine.models.availability import How

    for lang in i18n.LANGUAGES:
        for how in set(typing.get_args(How)) - {"none"}:
            text = i18n.CATALOGS[lang][f"model.how.{how}"]
            assert "{detail}" not in text, (lang, how)


def test_screen_headers_number_stages_as_the_board_does():
    from assistant.tui.widgets.board import board_text
    from assistant.wizard.skill import load_skill

    for name in ("sft", "dpo", "kto", "pt", "rm"):
        skill = load_skill(name)
        board = board_text(skill.board_marks("flow", [], {}), run_id="r", device="CPU", fetch=None).plain
        for stage in skill.stages:
            number = skill.stage_number(stage.id)
            if stage.board is None:
                assert number is None
                continue
            assert f"{number}. {i18n.t('board.' + stage.board)}" in board, (name, stage.id)
    sft = load_skill("sft")
    assert sft.stage_number("gpu") == sft.stage_number("model") == 2  # the Device screen is part of the model line
    assert sft.stage_number("loss") == sft.stage_number("train") == 4
    assert sft.stage_number("export") == len(sft.board) - 1 == 6


def test_sft_only_skips_validation_and_export_but_keeps_them_on_the_board(skill):
    answers = {"scope": "sft", "execution": "run_here", "method": "lora"}
    assert skill.next_stage("loss", answers) == "summary"
    marks = dict(skill.board_marks("config", ["flow", "data", "model", "gpu"], answers))
    assert marks == {"flow": "done", "data": "done", "model": "done", "config": "current", "train": "todo",
                     "validate": "skipped", "export": "skipped"}
    # writing configs for elsewhere: no loss view, but validation and export still write their YAMLs
    answers = {"scope": "full", "execution": "write_only", "method": "full"}
    assert skill.next_stage("train", answers) == "validate"


def test_malformed_skill_is_refused_with_the_stage_named():
    data = yaml.safe_load((SKILLS_DIR / "sft" / "skill.yaml").read_text(encoding="utf-8"))
    data["stages"][0]["questions"][0]["default"] = "everything"
    with pytest.raises(ConfigError, match="stage flow question workflow"):
        parse_skill(data)
    data = yaml.safe_load((SKILLS_DIR / "sft" / "skill.yaml").read_text(encoding="utf-8"))
    data["stages"][1]["board"] = "nowhere"
    with pytest.raises(ConfigError, match="stage data"):
        parse_skill(data)


def test_state_round_trips_and_is_written_atomically(workspace):
    state = new_state(lang="zh").replace(scope="full", method="qlora", datasets=["identity"], edits={"lora_rank": 16})
    path = save_state(state, "lf_runs")
    assert path.resolve() == workspace / "lf_runs" / state.run_id / "state.json"
    assert not list(path.parent.glob(".*tmp"))
    loaded = load_state(path.parent)
    assert loaded == state.replace(updated_at=loaded.updated_at)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["from_a_newer_version"] = 1
    path.write_text(json.dumps(data), encoding="utf-8")
    assert load_state(path.parent).edits == {"lora_rank": 16}
    with pytest.raises(ConfigError, match="does not exist"):
        load_state(workspace / "nowhere")


def test_a_state_file_cannot_send_the_wizard_elsewhere(workspace):
    """state.json is read from disk: a run id other than its folder's (a copied folder, or an edited path) and a
    device index that is not a number are refused before anything is written or shown as a command."""
    import shutil

    state = new_state().replace(device={"platform": "cuda", "indices": [0], "mode": "single", "reason": "free"})
    save_state(state, "lf_runs")
    folder = workspace / "lf_runs" / state.run_id
    assert load_state(folder).run_id == state.run_id
    copy = workspace / "lf_runs" / "copied"
    shutil.copytree(folder, copy)
    with pytest.raises(ConfigError, match="not its own folder 'copied'"):
        load_state(copy)
    data = json.loads((folder / "state.json").read_text())
    for device in ({"platform": "cuda", "indices": ["0;touch /tmp/pwn;"]}, {"platform": "$(id)", "indices": []},
                   ["cuda"], {"platform": ["cuda"], "indices": [0]}):
        (folder / "state.json").write_text(json.dumps({**data, "device": device}))
        said = "the answer 'device' must be an object or null, not a list" if isinstance(device, list) else \
            "not one this wizard makes"
        with pytest.raises(ConfigError, match=said):
            load_state(folder)


@pytest.mark.parametrize("change, said", [
    ({"done": 5}, "the answer 'done' must be a list of text items, not a whole number"),
    ({"stage": ["flow"]}, "the answer 'stage' must be text, not a list"),
    ({"launched": "yes"}, "the answer 'launched' must be true or false, not text"),
    ({"dataset_rows": {"a": "many"}}, "the answer 'dataset_rows' must be an object of whole number values, not an "
                                      "object holding text"),
    ({"onboarded": ["a.json"]}, "the answer 'onboarded' must be a list of object items, not a list holding text"),
    ({"updated_at": True}, "the answer 'updated_at' must be a number, not true or false"),
    ({"run_id": 5}, "is not a wizard state"),
], ids=["done", "stage", "launched", "rows", "onboarded", "updated", "run-id"])
def test_a_state_file_with_an_answer_of_the_wrong_type_is_refused_naming_it(change, said, workspace):
    """A damaged state.json once resumed with the wrong value in place (a list as the stage, "yes" as launched) and
    failed later with a TypeError or AttributeError."""
    state = new_state()
    save_state(state, "lf_runs")
    folder = workspace / "lf_runs" / state.run_id
    data = json.loads((folder / "state.json").read_text())
    (folder / "state.json").write_text(json.dumps({**data, **change}))
    with pytest.raises(ConfigError, match=re.escape(said)) as refused:
        load_state(folder)
    assert str(folder / "state.json") in str(refused.value) and "Start a new run" in str(refused.value)


@pytest.mark.parametrize("text, said", [
    ("[" * 100_000 + "]" * 100_000, "is not valid JSON (nested more than 64 levels deep)"),
    ('{"run_id": ' + "9" * 5000 + "}", "is not valid JSON"),
    ("[1]", "must hold a JSON object, not a list"),
], ids=["deep", "huge-number", "list"])
def test_a_state_file_that_is_not_a_state_is_refused_naming_it(text, said, workspace):
    state = new_state()
    save_state(state, "lf_runs")
    folder = workspace / "lf_runs" / state.run_id
    (folder / "state.json").write_bytes(text.encode())
    with pytest.raises(ConfigError, match=re.escape(said)) as refused:
        load_state(folder)
    assert str(folder / "state.json") in str(refused.value) and "Start a new run" in str(refused.value)


def test_draft_run_is_renamed_after_the_model_keeping_its_stamp(workspace):
    state = new_state()
    save_state(state, "lf_runs")
    stamp = state.run_id.split("_", 2)[-1]
    renamed = rename_for_model(state.replace(model="Qwen/Qwen3-0.6B", method="lora"), "lf_runs")
    assert renamed.run_id == f"qwen3-0.6b_lora_{stamp}"
    assert (workspace / "lf_runs" / renamed.run_id / "state.json").is_file()
    assert load_state(workspace / "lf_runs" / renamed.run_id).run_id == renamed.run_id  # the id moved with it
    assert not (workspace / "lf_runs" / state.run_id).exists()
    # back at stage 0 with another model and method: the id follows them, keeping the stamp
    again = rename_for_model(renamed.replace(model="other/Llama-3", method="qlora"), "lf_runs")
    assert again.run_id == f"llama-3_qlora_{stamp}" and (workspace / "lf_runs" / again.run_id).is_dir()
    assert not (workspace / "lf_runs" / renamed.run_id).exists()
    # once the engine wrote into the folder (a config), the id is fixed
    (workspace / "lf_runs" / again.run_id / "status.json").write_text("{}")
    assert rename_for_model(again.replace(model="Qwen/Qwen3-0.6B"), "lf_runs").run_id == again.run_id


def test_catalogs_have_the_same_keys_and_placeholders():
    en, zh = i18n.CATALOGS["en"], i18n.CATALOGS["zh"]
    zh = {key: text for key, text in zh.items() if not key.startswith(i18n.ENGINE_ENGLISH)}  # English: the engine's
    assert set(en) == set(zh), sorted(set(en) ^ set(zh))
    fields = re.compile(r"\{(\w+)")
    for key, text in en.items():
        assert set(fields.findall(text)) == set(fields.findall(zh[key])), key


def test_language_comes_from_flag_then_env_then_config_then_locale(monkeypatch, tmp_path):
    for key in ("LFA_LANG", "LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert i18n.detect_language() == "zh"
    (tmp_path / "lf-assistant").mkdir()
    (tmp_path / "lf-assistant" / "config.yaml").write_text("lang: en\n", encoding="utf-8")
    assert i18n.detect_language() == "en"
    monkeypatch.setenv("LFA_LANG", "zh")
    assert i18n.detect_language() == "zh"
    assert i18n.detect_language("en") == "en"
    try:
        i18n.set_language("zh")
        assert i18n.t("board.data") != i18n.CATALOGS["en"]["board.data"]
        assert "lf-assistant --resume abc" in i18n.t("app.resume_hint", command="lf-assistant", run_id="abc")
    finally:
        i18n.set_language("en")
