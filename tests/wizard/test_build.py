"""The config builder: example YAML + answers -> engine config, with a reason for every change."""

import pytest

from assistant.wizard import build
from assistant.wizard.stages import config as config_stage
from assistant.wizard.stages import data, flow, model
from assistant.wizard.state import new_state
from engine.api import load_config, validate


@pytest.fixture()
def ready(workspace, skill, demo_model_dir):
    """A state answered up to the config stage: LoRA on the demo model, identity data, CPU."""
    state = flow.apply(new_state(), skill, {"scope": "full", "execution": "run_here", "method": "lora"}).state
    listing = data.list_datasets(workspace / "data")
    counts = {"identity": data.count_rows(workspace / "data", "identity")}
    state = data.choose(state, workspace / "data", ["identity"], listing, counts).state
    outcome = model.resolve(state, skill, str(demo_model_dir))
    assert outcome.ok, outcome.problems
    return outcome.state.replace(device={"platform": "cpu", "indices": [], "mode": "cpu", "reason": "test"})


def test_config_starts_from_the_example_and_every_change_has_a_reason(ready, skill, workspace, demo_model_dir):
    built = build.build_train_config(ready, skill)
    example = build.example_values(ready.example)
    diff = {row.parameter: row for row in built.diff}
    assert diff["model_name_or_path"].new == str(demo_model_dir.resolve())
    assert diff["dataset"].default == example["dataset"] and diff["dataset"].new == "identity"
    assert diff["dataset"].reason == "data chosen in stage 1"
    assert diff["output_dir"].new.startswith(str(workspace / "saves" / "lf-tiny-qwen3" / "lora"))
    assert diff["cutoff_len"].new == 128 and "demo" in diff["cutoff_len"].reason
    # unchanged keys are not in the diff, and every diff row really differs from the example
    assert "lora_rank" not in diff
    assert all(row.default != row.new and row.default == example.get(row.parameter) for row in built.diff)
    assert not validate(load_config(built.config))
    # 6 of identity's 90 rows are held out for validation (val_size), with the reason in the diff
    assert diff["val_size"].new == 6 and "held out" in diff["val_size"].reason
    # total steps = ceil(rows / (batch x grad_accum x devices)) x epochs, rows capped by max_samples
    assert built.rows == 84
    assert built.total_steps == 21 * 4
    # a share is held out as the engine holds it out: 90 x 0.05 = 4.5 rounds up to 5, as datasets' split counts
    assert build.training_rows(ready, {"val_size": 0.05}) == 85


def test_a_small_real_model_on_a_cpu_gets_the_measured_recipe_and_a_preflight_fit_is_applied(ready, skill):
    from engine.models.registry import example_config

    smol = ready.replace(model="HuggingFaceTB/SmolLM2-135M-Instruct", family="smollm2", template="smollm2",
                         example=str(example_config("smollm2", "lora")))
    diff = {row.parameter: row for row in build.build_train_config(smol, skill).diff}
    assert (diff["learning_rate"].default, diff["learning_rate"].new) == (1e-4, 1e-3)
    # the recipe's 4 x 2 samples per step, folded into one packed micro-batch of 8 (the same step, larger products)
    assert diff["per_device_train_batch_size"].new == 8 and diff["gradient_accumulation_steps"].new == 1
    assert "each step's 8 samples in one micro-batch" in diff["gradient_accumulation_steps"].reason
    assert "135M model on a CPU" in diff["learning_rate"].reason
    padded = build.build_train_config(smol.replace(edits={"batching_strategy": "padded"}), skill).config
    assert (padded["per_device_train_batch_size"], padded["gradient_accumulation_steps"]) == (4, 2)
    # the user shaped the step themselves: nothing is folded behind their back
    shaped = build.build_train_config(smol.replace(edits={"per_device_train_batch_size": 2}), skill).config
    assert (shaped["per_device_train_batch_size"], shaped["gradient_accumulation_steps"]) == (2, 2)
    on_gpu = smol.replace(device={"platform": "cuda", "indices": [0], "mode": "single", "reason": "free"})
    assert "learning_rate" not in {row.parameter for row in build.build_train_config(on_gpu, skill).diff}
    # the pre-flight's proposal (its micro-batch fitted where 4 did not) wins over the recipe, with its reason
    fitted = smol.replace(fit={"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4,
                               "reason": "micro-batch 4 does not fit (out of memory)"})
    diff = {row.parameter: row for row in build.build_train_config(fitted, skill).diff}
    assert (diff["per_device_train_batch_size"].new, diff["gradient_accumulation_steps"].new) == (2, 4)
    assert diff["gradient_accumulation_steps"].reason == "pre-flight: micro-batch 4 does not fit (out of memory)"


def test_sft_on_a_cpu_trains_packed_rows_unless_the_example_packs_or_the_model_runs_its_own_code(ready, skill,
                                                                                                tmp_path):
    """batching_strategy: packed (the padded batches' samples, steps and loss without the padding work) comes with
    its reason; LLaMA-Factory's own packing in the example, or remote code, keeps padded batches."""
    import yaml

    diff = {row.parameter: row for row in build.build_train_config(ready, skill).diff}
    assert (diff["batching_strategy"].default, diff["batching_strategy"].new) == ("padded", "packed")
    assert "same samples, steps and loss as padded batches" in diff["batching_strategy"].reason
    assert not validate(load_config(build.build_train_config(ready, skill).config))
    example = {**build.example_values(ready.example), "packing": True}
    packing_example = tmp_path / "packing.yaml"
    packing_example.write_text(yaml.safe_dump(example))
    for state in (ready.replace(example=str(packing_example)), ready.replace(edits={"batching_strategy": "padded"})):
        config = build.build_train_config(state, skill).config
        assert config.get("batching_strategy", "padded") == "padded"
    from assistant.wizard.adapt import packed_batching_changes

    assert packed_batching_changes(ready, skill, {"trust_remote_code": True}) == []
    assert packed_batching_changes(ready, skill, {"neat_packing": True}) == []
    assert packed_batching_changes(ready, skill, {})[0][:2] == ("batching_strategy", "packed")
    # measured on CPUs only: a GPU run keeps padded batches
    on_gpu = ready.replace(device={"platform": "cuda", "indices": [0], "mode": "single", "reason": "free"})
    assert build.build_train_config(on_gpu, skill).config.get("batching_strategy", "padded") == "padded"


def test_keys_of_several_names_offer_the_names_they_take(ready, skill):
    config = build.build_train_config(ready, skill).config
    params = config_stage.params()
    assert params["report_to"].multi == "names" and params["report_to"].alone == ("none", "all")
    assert params["lora_target"].alone == ("all",) and params["lora_rank"].multi is None
    assert config_stage.name_choices("report_to", config, []) == ("none", "tensorboard", "wandb", "swanlab",
                                                                  "mlflow", "all")
    targets = config_stage.name_choices("lora_target", config, [])
    assert targets[0] == "all" and {"q_proj", "v_proj"} <= set(targets)  # the model's modules
    assert config_stage.name_choices("freeze_trainable_modules", config, [])[:2] == ("all", "input_layernorm")
    assert config_stage.name_choices("eval_dataset", config, ["identity", "alpaca_demo"]) == ("identity",
                                                                                           "alpaca_demo")
    for key in ("lr_scheduler_type", "lora_rank", "adapter_name_or_path", "fsdp"):  # one value, or typed names
        assert config_stage.name_choices(key, config, []) is None, key
    hub = dict(config, model_name_or_path="Qwen/Qwen3-0.6B")  # not here yet: the names are typed
    assert config_stage.name_choices("lora_target", hub, []) is None


def test_user_edit_is_user_specified_and_editing_back_removes_the_row(ready, skill):
    outcome = config_stage.apply_edit(ready, "lora_rank", "16")
    built = build.build_train_config(outcome.state, skill)
    row = next(r for r in built.diff if r.parameter == "lora_rank")
    assert (row.default, row.new, row.reason) == (8, 16, "user-specified")
    outcome = config_stage.apply_edit(outcome.state, "lora_rank", "8")
    assert "lora_rank" not in {r.parameter for r in build.build_train_config(outcome.state, skill).diff}
    # the engine's own types decide
    assert not config_stage.apply_edit(ready, "lora_rank", "lots").ok
    assert not config_stage.apply_edit(ready, "lr_scheduler_type", "sawtooth").ok
    assert config_stage.apply_edit(ready, "bf16", "true").state.edits == {"bf16": True}
    # keys that take several names: each is checked, in either spelling; a bad one is still refused
    for typed in ("tensorboard,wandb", "[tensorboard, wandb]"):
        assert config_stage.apply_edit(ready, "report_to", typed).state.edits == {"report_to": "tensorboard,wandb"}
    alone = config_stage.apply_edit(ready, "report_to", "tensorboard,none")  # the Trainer refuses "none" among them
    assert not alone.ok and "none stands alone" in alone.problems[0]
    assert not config_stage.apply_edit(ready, "report_to", "tensorboard,bogus").ok
    assert not config_stage.apply_edit(ready, "learning_rate", "-1").ok  # out of range, said at once
    assert not config_stage.apply_edit(ready, "lora_rank", "[" * 100_000).ok  # refused, not a RecursionError
    unknown = config_stage.apply_edit(ready, "learning_rat", "1e-4")
    assert not unknown.ok and "learning_rate" in unknown.problems[0]
    assert not config_stage.apply_edit(ready, "dataset", "alpaca_demo").ok  # decided in the data stage


def test_gpu_keeps_bf16_and_cpu_turns_it_off(ready, skill, demo_model_dir):
    from engine.models.registry import example_config

    state = ready.replace(family="qwen3", example=str(example_config("qwen3", "lora")))
    cpu = {r.parameter: r for r in build.build_train_config(state, skill).diff}
    assert cpu["bf16"].new is False and "CPU" in cpu["bf16"].reason
    gpu = state.replace(device={"platform": "cuda", "indices": [0], "mode": "single", "reason": "free"})
    assert "bf16" not in {r.parameter for r in build.build_train_config(gpu, skill).diff}


def test_a_cpu_with_bf16_units_keeps_bf16(ready, skill):
    """The device stage records a CPU's bf16 units; the config then keeps the example's bf16: true, and LoRA
    switches it on where the example has it off (SmolLM2's CPU example), saying why; fp16 is turned off."""
    from engine.devices import DeviceReport
    from engine.models.registry import example_config
    from assistant.wizard.stages import gpu as gpu_stage

    state = ready.replace(family="qwen3", example=str(example_config("qwen3", "lora")))
    plain = gpu_stage.apply(state, DeviceReport("cpu", [], "none"), {}).state
    assert "bf16_units" not in plain.device
    assert {r.parameter: r.new for r in build.build_train_config(plain, skill).diff}["bf16"] is False
    amx = gpu_stage.apply(state, DeviceReport("cpu", [], "none", [], "AMX-BF16"), {}).state
    assert amx.device["bf16_units"] == "AMX-BF16" and amx.device["platform"] == "cpu"
    built = build.build_train_config(amx, skill)
    assert "bf16" not in {r.parameter for r in built.diff} and built.config["bf16"] is True
    fp32_example = amx.replace(family="smollm2", example=str(example_config("smollm2", "lora")))
    assert build.example_values(fp32_example.example)["bf16"] is False
    row = {r.parameter: r for r in build.build_train_config(fp32_example, skill).diff}["bf16"]
    assert row.new is True and "AMX-BF16" in row.reason and "1.5-2.1x" in row.reason
    full = fp32_example.replace(method="full")  # not measured there: as the example
    assert build.build_train_config(full, skill).config["bf16"] is False
    changes = {key: (value, reason) for key, value, reason in build._device_changes(amx, {"fp16": True})}
    assert changes["fp16"] == (False, "no GPU: a CPU has no fp16 training path") and changes["bf16"][0] is True
    plain_changes = {key: (value, reason) for key, value, reason in build._device_changes(plain, {"fp16": True})}
    assert plain_changes["fp16"][0] is False and "no bf16 units" in plain_changes["fp16"][1]


def test_small_dataset_advice_proposes_a_fix_that_works(ready, skill, workspace):
    state = config_stage.apply_edit(ready, "num_train_epochs", "1").state
    state = config_stage.apply_edit(state, "logging_steps", "10").state
    state = config_stage.apply_edit(state, "max_samples", "40").state
    built = build.build_train_config(state, skill)
    assert built.total_steps == 9  # 40 rows less the 6 held out, 4 a step
    available = [row.name for row in data.list_datasets(workspace / "data")]
    advice = config_stage.small_data_advice(built, state, skill, available)
    assert advice is not None and len(advice.problems) >= 2
    assert advice.mix_dataset == "alpaca_demo"
    assert advice.suggestions["logging_steps"] < 10
    rows, _chars = data.count_rows(workspace / "data", "alpaca_demo")
    fixed = config_stage.accept_advice(state, advice, mix_rows=rows)
    fixed = fixed.replace(edits={})  # the hand edits gave the problem; the accepted suggestions must solve it
    rebuilt = build.build_train_config(fixed, skill)
    assert rebuilt.config["dataset"] == "identity,alpaca_demo"
    assert config_stage.small_data_advice(rebuilt, fixed, skill, available) is None
    assert any(r.reason == "small dataset: more loss points / steps" for r in rebuilt.diff)
    # the mixed-in data is named as the fix's, not as the user's choice in stage 1
    assert fixed.mixed_in == ["alpaca_demo"]
    reasons = {key: reason for key, _value, reason in build._changes(fixed, skill, {})}
    assert reasons["dataset"] == "data chosen in stage 1, with alpaca_demo mixed in by the small-data fix (f)"
    # choosing the same datasets on the data stage makes them the user's own choice
    rows = {row.name: row for row in data.list_datasets(workspace / "data")}
    counts = {name: data.count_rows(workspace / "data", name) for name in ("identity", "alpaca_demo")}
    chosen = data.choose(fixed, workspace / "data", ["identity", "alpaca_demo"], list(rows.values()), counts).state
    assert chosen.mixed_in == []


def test_qlora_and_full_pick_their_own_example(workspace, skill, demo_model_dir):
    state = flow.apply(new_state(), skill, {"scope": "sft", "execution": "write_only", "method": "qlora"}).state
    outcome = model.resolve(state, skill, "Qwen/Qwen3-0.6B")
    assert outcome.ok and outcome.state.example.endswith("train_qlora/qwen3_lora_sft.yaml")
    state = outcome.state.replace(datasets=["identity"], dataset_dir=str(workspace / "data"),
                                  device={"platform": "cuda", "indices": [0], "mode": "single", "reason": "x"})
    built = build.build_train_config(state, skill)
    assert built.config["quantization_bit"] == 4 and built.config["finetuning_type"] == "lora"
    state = flow.apply(state, skill, {"scope": "sft", "execution": "write_only", "method": "full"}).state
    state = model.resolve(state, skill, "Qwen/Qwen3-0.6B").state.replace(
        datasets=["identity"], dataset_dir=str(workspace / "data"))
    built = build.build_train_config(state, skill)
    assert built.config["finetuning_type"] == "full" and built.config["quantization_bit"] is None


def test_packed_pretraining_leaves_the_step_count_to_the_preflight(workspace, demo_model_dir):
    """Texts packed into cutoff_len rows make as many steps as their tokens fill: a count from rows would be
    another number than the run makes (157 texts would say 80 steps where the run makes 30)."""
    from assistant.wizard.skill import skill_for

    pt = skill_for("pt")
    state = flow.apply(new_state(), pt, {"workflow": "pt", "scope": "full", "execution": "run_here",
                                         "method": "lora"}).state
    listing = data.list_datasets(workspace / "data", kind="text")
    counts = {"pt_demo": data.count_rows(workspace / "data", "pt_demo")}
    state = data.choose(state, workspace / "data", ["pt_demo"], listing, counts).state
    state = model.resolve(state, pt, str(demo_model_dir)).state.replace(
        device={"platform": "cpu", "indices": [], "mode": "cpu", "reason": "test"})
    built = build.build_train_config(state, pt)
    assert built.config["stage"] == "pt" and built.rows and built.total_steps is None


def test_many_checkpoints_keep_only_the_newest_few(ready, skill):
    """save_steps 5 over a long run wrote every checkpoint (optimizer state included) and kept them all."""
    from pathlib import Path

    full = str(Path(ready.example).with_name("tiny_full_sft.yaml"))  # an example without a limit
    ready = ready.replace(example=full, method="full")
    state = config_stage.apply_edit(ready, "save_steps", "5").state
    built = build.build_train_config(state, skill)
    count = built.total_steps // 5
    assert count > build.KEEP_CHECKPOINTS and built.config["save_total_limit"] == build.KEEP_CHECKPOINTS
    [row] = [r for r in built.diff if r.parameter == "save_total_limit"]
    assert row.reason.startswith(f"{count} checkpoints otherwise") and "the newest 3 are kept" in row.reason
    assert not validate(load_config(built.config))
    mine = build.build_train_config(config_stage.apply_edit(state, "save_total_limit", "10").state, skill)
    assert mine.config["save_total_limit"] == 10  # a hand-set limit stands
    few = build.build_train_config(config_stage.apply_edit(ready, "save_steps", "100000").state, skill)
    assert few.config.get("save_total_limit") is None


def test_a_new_starting_example_drops_the_old_small_data_fix(ready, skill):
    """The fix answered the old example's step count (epochs 3 -> 5 for LoRA); under Full's example (20 epochs)
    it would lower them, with a reason saying the opposite. It is asked anew; hand edits stay."""
    fixed = ready.replace(suggestions={"num_train_epochs": 5.0}, edits={"lora_rank": 16})
    changed = flow.apply(fixed, skill, {**fixed.answers(), "method": "full"}).state
    assert changed.example != fixed.example and changed.suggestions == {} and changed.edits == {"lora_rank": 16}
    same = flow.apply(fixed, skill, fixed.answers()).state
    assert same.suggestions == {"num_train_epochs": 5.0}


def test_the_eval_loss_is_measured_a_few_times_in_a_short_run(ready, skill):
    """logging_steps x 10 over a run shorter than that measured the held-out loss only at the end."""
    state = config_stage.apply_edit(ready, "logging_steps", "10").state
    built = build.build_train_config(state, skill)
    assert built.config["val_size"] and built.total_steps < 100
    assert built.config["eval_steps"] == max(1, built.total_steps // build.EVALS_PER_RUN)
    [row] = [r for r in built.diff if r.parameter == "eval_steps"]
    assert row.reason.startswith("every 100 steps (logging_steps x 10)")
    assert not validate(load_config(built.config))
    mine = build.build_train_config(config_stage.apply_edit(state, "eval_steps", "7").state, skill)
    assert mine.config["eval_steps"] == 7
