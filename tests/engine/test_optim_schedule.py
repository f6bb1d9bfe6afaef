"""optim, optim_args, LoRA+ and lr_scheduler_type work as in Transformers / LLaMA-Factory: the same optimizer class
and parameter groups, the same learning rate at every step, refusals by name for what cannot run here."""

import io

import pytest
import torch

import engine
from engine.config.choices import OPTIMIZERS, REFUSED_SCHEDULES, SCHEDULES
from engine.training.optim import build_optimizer, param_groups
from engine.training.schedule import build_scheduler, lr_lambda

from tests.engine.test_train import losses, tiny_config


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.input_layernorm = torch.nn.Module()
        self.input_layernorm.weight = torch.nn.Parameter(torch.ones(4))
        self.ln = torch.nn.LayerNorm(4)


def settings(**over):
    base = {"model_name_or_path": "x", "dataset": "identity", "weight_decay": 0.1, "learning_rate": 1e-3}
    return engine.load_config({**base, **over})


# --- schedules: the factor at every step equals transformers.get_scheduler's

CASES = [
    ("linear", {}), ("cosine", {}), ("cosine", {"num_cycles": 1.5}), ("cosine_with_restarts", {"num_cycles": 3}),
    ("polynomial", {"lr_end": 1e-5, "power": 2.0}), ("constant", {}), ("constant_with_warmup", {}),
    ("inverse_sqrt", {}), ("inverse_sqrt", {"timescale": 7}), ("cosine_with_min_lr", {"min_lr_rate": 0.1}),
    ("cosine_with_min_lr", {"min_lr": 2e-4}), ("cosine_warmup_with_min_lr", {"min_lr_rate": 0.2}),
    ("cosine_warmup_with_min_lr", {"min_lr_rate": 0.1, "warmup_lr_rate": 0.3}),
    ("warmup_stable_decay", {"num_stable_steps": 10, "num_decay_steps": 20, "decay_type": "linear"}),
    ("warmup_stable_decay", {"num_stable_steps": 5, "num_decay_steps": 30, "warmup_type": "cosine",
                             "decay_type": "1-sqrt", "min_lr_ratio": 0.05}),
]


def transformers_rates(kind, total, warmup, kwargs, steps):
    from transformers import get_scheduler

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    scheduler = get_scheduler(kind, optimizer, num_warmup_steps=warmup, num_training_steps=total,
                              scheduler_specific_kwargs=dict(kwargs))
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


@pytest.mark.parametrize("kind,kwargs", CASES)
@pytest.mark.parametrize("total,warmup", [(40, 0), (40, 6), (7, 3)])
def test_every_schedule_matches_transformers(kind, kwargs, total, warmup):
    if kind == "warmup_stable_decay" and total < 40:
        kwargs = {}  # the phases above need 40 steps
    if kind.startswith("warmup_stable") and not kwargs:
        # LLaMA-Factory fills the phases (a third stable, the rest decaying) before calling transformers
        rest = total - warmup
        kwargs_tf = {"num_stable_steps": rest // 3, "num_decay_steps": rest - rest // 3}
    else:
        kwargs_tf = kwargs
    expected = transformers_rates(kind, total, warmup, kwargs_tf, total + 3)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    scheduler = build_scheduler(optimizer, kind, total, warmup, kwargs, 1e-3)
    ours = []
    for _ in range(total + 3):
        ours.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert ours == pytest.approx(expected, rel=1e-9, abs=1e-15)


def test_schedule_list_covers_transformers_and_warmup_starts_at_zero():
    from transformers.trainer_utils import SchedulerType

    assert set(SCHEDULES) | set(REFUSED_SCHEDULES) == {s.value for s in SchedulerType}
    assert lr_lambda("cosine", 10, 4)(0) == 0.0 and lr_lambda("constant", 10, 4)(0) == 1.0


def test_schedule_state_resumes_from_a_weights_only_load():
    def make():
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        return optimizer, build_scheduler(optimizer, "cosine_with_min_lr", 20, 3, {"min_lr_rate": 0.1}, 1.0)

    optimizer, scheduler = make()
    for _ in range(7):
        optimizer.step()
        scheduler.step()
    buffer = io.BytesIO()
    torch.save(scheduler.state_dict(), buffer)
    buffer.seek(0)
    resumed_optimizer, resumed = make()
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    for _ in range(5):
        optimizer.step(), scheduler.step(), resumed_optimizer.step(), resumed.step()
        assert resumed.get_last_lr() == scheduler.get_last_lr()


def test_schedule_refusals_and_kwargs_problems_are_named():
    problems = engine.validate(settings(lr_scheduler_type="reduce_lr_on_plateau"))
    assert any("'reduce_lr_on_plateau' is Transformers' ReduceLROnPlateau" in p for p in problems), problems
    problems = engine.validate(settings(lr_scheduler_type="cosine_with_min_lr"))
    assert any("needs exactly one of min_lr or min_lr_rate" in p for p in problems)
    problems = engine.validate(settings(lr_scheduler_type="cosine", lr_scheduler_kwargs={"power": 2}))
    assert any("'power' is not an argument of the cosine schedule (it takes num_cycles)" in p for p in problems)
    # the CLI form: a JSON string
    config = settings(lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs='{"min_lr_rate": 0.1}')
    assert not [p for p in engine.validate(config) if "lr_scheduler" in p]


# --- optimizers and parameter groups


def test_weight_decay_skips_biases_and_norms_as_the_trainer_does():
    model = Tiny()
    groups = param_groups(model, settings())
    decayed = {id(p) for p in groups[0]["params"]}
    assert groups[0]["weight_decay"] == 0.1 and groups[1]["weight_decay"] == 0.0
    assert decayed == {id(model.proj.weight)}  # not the bias, the *_layernorm weight or the LayerNorm's


@pytest.mark.parametrize("name,cls", [("adamw_torch", torch.optim.AdamW), ("adamw_torch_fused", torch.optim.AdamW),
                                      ("sgd", torch.optim.SGD), ("adagrad", torch.optim.Adagrad),
                                      ("rmsprop", torch.optim.RMSprop)])
def test_each_torch_name_builds_its_class(name, cls):
    optimizer = build_optimizer(settings(optim=name), Tiny())
    assert type(optimizer) is cls and optimizer.defaults["lr"] == 1e-3
    if name == "adamw_torch_fused":
        assert optimizer.defaults["fused"] is True
    if name == "adamw_torch":
        assert optimizer.defaults["foreach"] is True


def test_adafactor_and_optim_args_as_transformers_passes_them():
    from transformers.optimization import Adafactor

    optimizer = build_optimizer(settings(optim="adafactor"), Tiny())
    assert type(optimizer) is Adafactor
    assert not optimizer.defaults["relative_step"] and not optimizer.defaults["scale_parameter"]
    sgd = build_optimizer(settings(optim="sgd", optim_args="momentum=0.9,nesterov=true"), Tiny())
    assert sgd.defaults["momentum"] == 0.9 and sgd.defaults["nesterov"] is True
    problems = engine.validate(settings(optim_args="momentum=0.9"))
    assert any("does not read it" in p for p in problems)


def test_bitsandbytes_optimizers_are_refused_on_cpu_by_name():
    from engine.models.offline import cuda_available

    if cuda_available():
        pytest.skip("this machine has a GPU")
    for name in ("paged_adamw_8bit", "adamw_8bit", "lion_8bit"):
        assert name in OPTIMIZERS
        problems = engine.validate(settings(optim=name))
        assert any(f"optim: {name} is a bitsandbytes optimizer" in p and "CUDA GPUs only" in p for p in problems)


def test_unbuildable_transformers_optimizers_are_refused_by_name():
    from transformers.training_args import OptimizerNames

    from engine.config.choices import REFUSED_OPTIMIZERS

    assert set(OPTIMIZERS) | set(REFUSED_OPTIMIZERS) == {o.value for o in OptimizerNames}
    problems = engine.validate(settings(optim="adamw_torch_4bit"))
    assert any("'adamw_torch_4bit' is torchao's low-bit AdamW" in p for p in problems), problems


def test_loraplus_groups_as_llamafactory_builds_them(demo_model_dir):
    from engine.methods import get_method
    from transformers import AutoModelForCausalLM

    config = settings(loraplus_lr_ratio=16.0, model_name_or_path=str(demo_model_dir))
    model = get_method("lora").prepare(AutoModelForCausalLM.from_pretrained(demo_model_dir), config)
    groups = param_groups(model, config)
    names = {id(p): n for n, p in model.named_parameters()}
    by_lr = {group["lr"]: [names[id(p)] for p in group["params"]] for group in groups}
    assert set(by_lr) == {1e-3, 16e-3}
    assert all("lora_A" in n for n in by_lr[1e-3]) and all("lora_B" in n for n in by_lr[16e-3])
    problems = engine.validate(settings(loraplus_lr_ratio=16.0, finetuning_type="full"))
    assert any(p.startswith("loraplus_lr_ratio only applies to LoRA") for p in problems)


def test_loraplus_with_adafactor_and_a_min_lr_schedule_trains(demo_model_dir, tmp_path):
    config = tiny_config(demo_model_dir, tmp_path, optim="adafactor", loraplus_lr_ratio=8.0, learning_rate=2e-3,
                         lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs={"min_lr_rate": 0.5},
                         warmup_steps=2, max_steps=10)
    handle = engine.train(config, runs_dir=tmp_path / "runs")
    assert handle.status().state == "completed"
    curve = losses(handle)
    assert curve[-1] < curve[0] * 0.95, curve
    rates = [m["learning_rate"] for m in handle.metrics() if "learning_rate" in m]
    # the rate of the next step, logged every 2 steps: the peak after warmup, half of it at the end (LoRA A's group)
    assert rates[0] == pytest.approx(2e-3) and rates[-1] == pytest.approx(1e-3)


def test_scheduler_kwargs_text_is_read_within_the_config_limits():
    """A text value is YAML read as a config file is: an alias bomb or deep nesting is refused at once, by name."""
    from engine.config.choices import scheduler_kwargs
    from engine.errors import ConfigError

    bomb = "a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]"
    for text, said in ((bomb, "alias"), ("[" * 100_000, "nested")):
        with pytest.raises(ConfigError, match=f"lr_scheduler_kwargs.*{said}"):
            scheduler_kwargs(text)
    assert scheduler_kwargs("{num_cycles: 2}") == {"num_cycles": 2}
