"""Preference training (skills/dpo): the workflow choice, pairs-only data, the DPO config and its health hints."""

import json

import pytest

from assistant.wizard import build
from assistant.wizard.skill import WORKFLOW_SKILLS, load_skill, skill_for
from assistant.wizard.stages import config as config_stage
from assistant.wizard.stages import data, flow, model, train
from assistant.wizard.state import new_state, rename_for_model, save_state
from engine.api import load_config, validate


@pytest.fixture()
def dpo():
    return load_skill("dpo")


def _answers(workflow="dpo", method="lora"):
    return {"workflow": workflow, "scope": "full", "execution": "run_here", "method": method}


@pytest.fixture()
def dpo_ready(workspace, dpo, demo_model_dir):
    """LoRA DPO on the demo model with dpo_demo, on the CPU: answered up to the config stage."""
    return _ready(workspace, dpo, demo_model_dir, _answers())


def _ready(workspace, skill, model_dir, answers):
    state = flow.apply(new_state(), skill, answers).state
    listing = data.list_datasets(workspace / "data", kind="pairs")
    counts = {"dpo_demo": data.count_rows(workspace / "data", "dpo_demo")}
    outcome = data.choose(state, workspace / "data", ["dpo_demo"], listing, counts)
    assert outcome.ok, outcome.problems
    outcome = model.resolve(outcome.state, skill, str(model_dir))
    assert outcome.ok, outcome.problems
    return outcome.state.replace(device={"platform": "cpu", "indices": [], "mode": "cpu", "reason": "test"})


def test_the_workflow_picks_the_skill_and_both_skills_share_the_stages(skill, dpo):
    assert {name: skill_for(name).name for name in WORKFLOW_SKILLS} == {
        "sft": "sft", "dpo": "dpo", "orpo": "dpo", "simpo": "dpo", "pt": "pt", "rm": "rm", "kto": "kto"}
    assert skill_for(None).name == "sft"
    assert skill.stage_ids == dpo.stage_ids and skill.board == dpo.board
    assert (skill.config_file, dpo.config_file) == ("sft.yaml", "dpo.yaml")
    assert dpo.stage("data").settings["recommended"] == ["dpo_demo"]
    assert dpo.stage("data").title_key == "stage.data.title_pref"
    # both skills ask the workflow first, with their own default
    assert skill.stage("flow").questions[0].default == "sft" and dpo.stage("flow").questions[0].default == "dpo"
    state = flow.apply(new_state(), dpo, _answers("simpo")).state
    assert state.answers()["workflow"] == "simpo"


def test_switching_workflow_after_choosing_data_asks_for_the_data_again(workspace, skill):
    listing = data.list_datasets(workspace / "data")
    state = flow.apply(new_state(), skill, _answers("sft")).state
    state = data.choose(state, workspace / "data", ["alpaca_demo"], listing, {}).state.replace(done=["flow", "data"])
    outcome = flow.apply(state, skill_for("dpo"), _answers("dpo"))
    assert outcome.state.datasets == [] and "data" not in outcome.state.done
    assert any("choose the data again" in note for note in outcome.notes)


def test_only_pairs_are_listed_and_sft_data_is_refused(workspace):
    rows = data.list_datasets(workspace / "data", kind="pairs")
    shown, hidden = data.shown_rows(rows, kind="pairs")
    assert [row.name for row in shown] == ["dpo_demo", "rm_demo"] and shown[0].available
    assert "alpaca_demo" in hidden and "identity" in hidden
    refused = data.choose(new_state(), workspace / "data", ["alpaca_demo"], rows, {})
    assert not refused.ok and "alpaca_demo" in refused.problems[0] and "SFT" in refused.problems[0]
    # SFT lists only conversations: pairs, KTO rows and raw text are hidden (the screen names them)
    sft_rows, sft_hidden = data.shown_rows(data.list_datasets(workspace / "data"), kind="conversations")
    assert [r.name for r in sft_rows] == ["identity", "alpaca_demo", "sharegpt_demo"]
    assert sft_hidden == ["dpo_demo", "kto_demo", "pt_demo", "rm_demo"]
    assert data.recommended(sft_rows, ["identity", "nowhere"]) == ["identity"]
    preview = data.preview(workspace / "data", "dpo_demo", 1)[0]
    assert preview["chosen"] != preview["rejected"]


def _write(path, rows):
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")
    return path


def test_custom_pairs_list_every_bad_row_and_good_pairs_register_as_ranking(workspace):
    bad = _write(workspace / "pairs.jsonl", [
        {"instruction": "2+2?", "chosen": "4", "rejected": "5"},
        {"instruction": "3+3?", "chosen": "6"},
        {"instruction": "4+4?", "chosen": " ", "rejected": "9"},
        {"instruction": "5+5?", "chosen": "10", "rejected": " 10 "},
        {"instruction": "6+6?", "chosen": "12", "rejected": "13"},
    ])
    original = bad.read_text(encoding="utf-8")
    _path, report, problems = data.check_custom(str(bad), ranking=True)
    assert report.ranking and not report.ok
    # each bad row once: the engine's check is the only one (row 4 differs only in whitespace)
    assert [line.split(" (")[0] for line in problems] == ["row 2", "row 3", "row 4"], problems
    assert "rejected" in problems[0] and "empty" in problems[1] and "identical" in problems[2]
    refused = data.onboard(new_state(), workspace / "data", bad, "pairs", convert=False, ranking=True)
    assert not refused.ok and not (workspace / "data" / "pairs.jsonl").exists()
    assert bad.read_text(encoding="utf-8") == original
    good = _write(workspace / "good.jsonl", [{"instruction": f"{i}+1?", "chosen": str(i + 1), "rejected": str(i)}
                                             for i in range(4)])
    assert data.check_custom(str(good), ranking=True)[2] == []
    outcome = data.onboard(new_state(), workspace / "data", good, "good_pairs", convert=False, ranking=True)
    assert outcome.ok, outcome.problems
    entry = json.loads((workspace / "data" / "dataset_info.json").read_text())["good_pairs"]
    assert entry["ranking"] is True and entry["columns"]["chosen"] == "chosen"
    assert entry["columns"]["rejected"] == "rejected"
    # and SFT refuses the same pairs: they have no single answer to learn
    refused = data.onboard(new_state(), workspace / "data", good, "good_sft", convert=False)
    assert not refused.ok and "DPO" in refused.problems[0]


def test_an_sft_file_is_not_preference_data_and_says_which_rows(workspace):
    sft = _write(workspace / "sft.jsonl", [{"instruction": f"q{i}", "output": f"a{i}"} for i in range(3)])
    _path, report, problems = data.check_custom(str(sft), ranking=True)
    assert not report.ranking
    assert problems[0].startswith("Not preference data: 3 rows")
    assert [line.split(" (")[0] for line in problems[1:]] == ["row 1", "row 2", "row 3"]
    assert all("chosen" in line for line in problems[1:])


def test_dpo_config_starts_from_the_dpo_example_and_explains_each_change(dpo_ready, dpo, workspace):
    assert dpo_ready.example.endswith("train_lora/qwen3_lora_dpo.yaml")
    assert "adapted qwen3_lora_dpo.yaml" in dpo_ready.example_note  # the demo family has no DPO example
    built = build.build_train_config(dpo_ready, dpo)
    diff = {row.parameter: row for row in built.diff}
    assert built.config["stage"] == "dpo" and built.config["pref_loss"] == "sigmoid"
    assert (diff["learning_rate"].default, diff["learning_rate"].new) == (5e-6, 3e-3)
    assert "5e-6" in diff["learning_rate"].reason
    assert diff["output_dir"].new.startswith(str(workspace / "saves" / "lf-tiny-qwen3" / "lora" / "dpo_"))
    assert "pref_loss" in dpo.stage("config").settings["key_params"]
    assert not validate(load_config(built.config))
    assert (built.rows, built.total_steps) == (20, 10)
    assert config_stage.small_data_advice(built, dpo_ready, dpo, ["alpaca_demo"]) is None
    assert not config_stage.apply_edit(dpo_ready, "pref_loss", "orpo").ok  # decided in stage 0


def test_simpo_and_orpo_set_their_loss_and_beta_and_full_dpo_warns_about_the_reference(
        workspace, dpo, demo_model_dir):
    simpo = build.build_train_config(_ready(workspace, dpo, demo_model_dir, _answers("simpo")), dpo)
    diff = {row.parameter: row for row in simpo.diff}
    assert (diff["pref_loss"].new, diff["pref_beta"].new) == ("simpo", 2.0)
    assert "no reference" in diff["pref_loss"].reason and "beta ~2" in diff["pref_beta"].reason
    orpo = {row.parameter: row for row in build.build_train_config(
        _ready(workspace, dpo, demo_model_dir, _answers("orpo")), dpo).diff}
    assert orpo["pref_loss"].new == "orpo" and "pref_beta" not in orpo
    full = _ready(workspace, dpo, demo_model_dir, _answers("dpo", "full"))
    assert "LoRA example" in full.example_note
    reason = {row.parameter: row for row in build.build_train_config(full, dpo).diff}["finetuning_type"].reason
    assert "second copy" in reason
    full_orpo = _ready(workspace, dpo, demo_model_dir, _answers("orpo", "full"))
    assert "no reference" in {r.parameter: r for r in build.build_train_config(full_orpo, dpo).diff}[
        "finetuning_type"].reason


def test_continuing_an_adapter_says_what_the_reference_is(dpo_ready, dpo, workspace):
    adapter = workspace / "saves" / "sft_adapter"
    adapter.mkdir(parents=True)
    edited = config_stage.apply_edit(dpo_ready, "adapter_name_or_path", str(adapter)).state
    notes = build.build_train_config(edited, dpo).notes
    assert len(notes) == 1 and "WITHOUT it" in notes[0]


def test_preference_hints_flag_chance_accuracy_and_a_flat_margin(dpo):
    settings = dpo.stage("train").settings

    def rows(accuracies, margins):
        return [{"step": 2 * i, "loss": 0.69, "rewards/accuracies": a, "rewards/margins": m}
                for i, (a, m) in enumerate(zip(accuracies, margins))]

    stuck = train.preference_hints(rows([0.5, 0.5, 0.375, 0.5, 0.625, 0.5], [0, 0, -0.01, 0, 0.01, 0]), settings)
    assert [h.message.split(" ")[:2] for h in stuck] == [["Reward", "accuracy"], ["Reward", "margin"]]
    learning = rows([0.5, 0.6, 0.75, 0.875, 1.0, 1.0], [0, 0.02, 0.05, 0.09, 0.12, 0.18])
    assert train.preference_hints(learning, settings) == []
    assert train.preference_hints(learning[:3], settings) == []  # too early to judge
    assert train.preference_hints(rows([0.5] * 8, [0] * 8), {}) == []  # SFT settings: no reward hints


def test_a_preference_run_is_named_after_its_workflow(workspace):
    state = new_state()
    save_state(state, "lf_runs")
    assert state.run_id.startswith("wizard_run_")
    renamed = rename_for_model(state.replace(model="Qwen/Qwen3-0.6B", method="lora", workflow="dpo"), "lf_runs")
    assert renamed.run_id.startswith("qwen3-0.6b_lora-dpo_")


def test_every_label_the_dpo_skill_names_exists_in_both_languages(dpo):
    from assistant import i18n
    from assistant.tui.screens import SCREENS

    for stage in dpo.stages:
        assert stage.id in SCREENS
        for lang in i18n.LANGUAGES:
            catalog = i18n.CATALOGS[lang]
            assert stage.title_key in catalog
            for question in stage.questions:
                assert question.note is None or question.note in catalog
                assert all(f"q.{question.id}.{choice}" in catalog for choice in question.choices)
    for name in dpo.stage("train").settings["chart"]:
        assert name in ("loss", "rewards/accuracies", "rewards/margins")  # what the DPO recipe logs
