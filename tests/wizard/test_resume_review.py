"""Where --resume reopens, and what the runs review reads from the run folders."""

import os

from assistant.wizard import review
from assistant.wizard.resume import plan_resume
from assistant.wizard.state import new_state, save_state
from engine.rundir import RunDir
from engine.runstatus import ProcessIdentity


def _run(workspace, **state_fields):
    state = new_state(runs_dir="lf_runs").replace(**state_fields)
    save_state(state, "lf_runs")
    return state, RunDir(workspace / "lf_runs" / state.run_id)


def test_not_launched_reopens_the_saved_stage_with_its_answers(workspace, skill):
    state, run = _run(workspace, stage="config", scope="full", method="freeze", datasets=["identity"],
                      edits={"lora_rank": 4}, done=["flow", "data", "model", "gpu"])
    plan = plan_resume(run.path, skill)
    assert (plan.stage, plan.action) == ("config", "continue")
    assert plan.state.edits == {"lora_rank": 4} and plan.state.method == "freeze"


def test_running_training_is_reattached_and_a_dead_one_offers_resume(workspace, skill):
    state, run = _run(workspace, stage="train", launched=True, scope="sft", execution="run_here")
    run.update_status(state="running", process=ProcessIdentity.current(), step=3, total_steps=20)
    assert plan_resume(run.path, skill).action == "reattach"
    run.update_status(state="running", process=ProcessIdentity(2**22 + 4321, 0.0, ProcessIdentity.current().host))  # died
    plan = plan_resume(run.path, skill)
    assert (plan.stage, plan.action) == ("train", "offer_resume")
    assert RunDir(run.path).read_status().state == "failed"


def test_finished_training_continues_with_the_next_open_stage(workspace, skill):
    state, run = _run(workspace, stage="train", launched=True, scope="full", execution="run_here",
                      done=["flow", "data", "model", "gpu", "config"])
    run.update_status(state="completed", output_dir="/s/out")
    plan = plan_resume(run.path, skill)
    assert (plan.stage, plan.action) == ("loss", "after_training")
    assert "train" in plan.state.done and plan.state.output_dir == "/s/out"
    later = plan.state.replace(stage="export", done=[*plan.state.done, "loss", "validate"])
    save_state(later, "lf_runs")
    assert plan_resume(run.path, skill).stage == "export"


def test_review_lists_runs_and_compares_two(workspace):
    first, run_a = _run(workspace, model="lf-tiny-qwen3", method="lora",
                        diff=[{"parameter": "lora_rank", "default": 8, "new": 16, "reason": "user-specified"}])
    second, run_b = _run(workspace, model="lf-tiny-qwen3", method="full", stage="data")
    from engine.config import dump_yaml

    for run, rank, losses in ((run_a, 16, [3.0, 2.0]), (run_b, 8, [3.0, 2.5])):
        dump_yaml({"finetuning_type": "lora", "lora_rank": rank, "cutoff_len": 128}, run.path / "sft.yaml")
        run.update_status(state="completed", stage="sft", model="lf-tiny-qwen3", method="lora", step=2,
                          total_steps=2)
        for step, loss in enumerate(losses, start=1):
            run.append_metric({"step": step, "loss": loss})
    rows = {row.run_id: row for row in review.list_runs("lf_runs")}
    assert rows[first.run_id].final_loss == "2.0000" and rows[first.run_id].steps == "2/2"
    record = review.load_record(run_a.path)
    assert record.losses == [(1, 3.0), (2, 2.0)] and record.diff[0]["new"] == 16
    assert record.config["lora_rank"] == 16
    assert review.config_difference(record.config, review.load_record(run_b.path).config) == [("lora_rank", 16, 8)]
