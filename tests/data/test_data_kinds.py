"""One classification of what a dataset holds, used by the config check and by the wizard's lists."""

from pathlib import Path

import engine
from engine.data.kinds import dataset_kind, stage_data_problem, stage_kind
from engine.data.registry import DatasetSpec, load_dataset_info

REPO = Path(__file__).resolve().parents[2]


def test_every_demo_dataset_has_the_kind_its_stage_takes():
    kinds = {name: dataset_kind(spec) for name, spec in load_dataset_info(REPO / "data").items()}
    assert kinds == {"identity": "conversations", "alpaca_demo": "conversations", "sharegpt_demo": "conversations",
                     "dpo_demo": "pairs", "rm_demo": "pairs", "kto_demo": "kto", "pt_demo": "text"}
    assert [stage_kind(stage) for stage in ("sft", "dpo", "rm", "kto", "pt")] == [
        "conversations", "pairs", "pairs", "kto", "text"]
    # LLaMA-Factory's pre-training shape: a jsonl mapping only a text column
    c4 = DatasetSpec(name="c4_demo", file_name="c4_demo.jsonl", columns={"prompt": "text"})
    assert dataset_kind(c4) == "text"
    assert dataset_kind(DatasetSpec(name="a", file_name="a.json", columns={"prompt": "q", "response": "a"})) == \
        "conversations"


def test_a_stage_refuses_data_of_another_kind_by_name():
    info = load_dataset_info(REPO / "data")
    assert stage_data_problem("sft", "pt_demo", info["pt_demo"]).endswith("needs conversations with answers.")
    assert "kto_tag" in stage_data_problem("kto", "identity", info["identity"])
    assert stage_data_problem("pt", "identity", info["identity"]) is None  # pt reads a prompt column, as LF does
    assert stage_data_problem("rm", "dpo_demo", info["dpo_demo"]) is None
    config = engine.load_config({"dataset": "pt_demo", "dataset_dir": str(REPO / "data"), "template": "qwen"})
    assert any("pt_demo" in problem and "raw text" in problem for problem in engine.validate(config))
