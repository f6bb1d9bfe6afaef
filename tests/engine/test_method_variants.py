"""LLaMA-Factory's LoRA variants, freeze extras and model keys change what they should: rsLoRA's scaling, DoRA's
trained magnitudes, PiSSA's initialisation and its conversion, additional_target modules trained and saved,
create_new_adapter and adapter lists, freeze beyond the layer count, rope_scaling and resize_vocab."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import engine
from engine.methods import get_method

from tests.engine.test_train import REPO, losses, tiny_config


def settings(model_dir, **over):
    base = {"model_name_or_path": str(model_dir), "dataset": "identity", "dataset_dir": str(REPO / "data"),
            "lora_rank": 4, "lora_target": "q_proj,v_proj"}
    return engine.load_config({**base, **over})


def fresh(model_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(model_dir)


def lora_layer(model):
    return next(m for name, m in model.named_modules() if name.endswith("q_proj") and hasattr(m, "scaling"))


def logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


IDS = torch.tensor([[5, 17, 99, 3, 42, 7, 250, 11]])


def test_rslora_scales_by_the_square_root_of_the_rank(demo_model_dir):
    plain = lora_layer(get_method("lora").prepare(fresh(demo_model_dir), settings(demo_model_dir, lora_alpha=8)))
    rs = lora_layer(get_method("lora").prepare(fresh(demo_model_dir),
                                               settings(demo_model_dir, lora_alpha=8, use_rslora=True)))
    assert plain.scaling["default"] == pytest.approx(8 / 4) and rs.scaling["default"] == pytest.approx(8 / 2)


def test_dora_magnitudes_train(demo_model_dir, tmp_path):
    handle = engine.train(tiny_config(demo_model_dir, tmp_path, use_dora=True, lora_target="q_proj,v_proj",
                                      max_steps=4), runs_dir=tmp_path / "runs")
    assert handle.status().state == "completed"
    curve = losses(handle)
    assert curve[-1] < curve[0], curve
    saved = load_file(Path(handle.status().output_dir) / "adapter_model.safetensors")
    magnitudes = {k: v for k, v in saved.items() if "magnitude" in k}
    assert magnitudes
    # DoRA starts each magnitude at the weight's column norms; training moved them.
    model = fresh(demo_model_dir)
    weights = dict(model.named_parameters())
    moved = 0
    for key, value in magnitudes.items():
        weight_name = key.replace("base_model.model.", "").split(".lora_magnitude_vector")[0] + ".weight"
        moved += not torch.allclose(value, weights[weight_name].norm(dim=1), atol=1e-6)
    assert moved == len(magnitudes)


@pytest.mark.parametrize("pissa_iter", [-1, 4])
def test_pissa_initialises_from_the_weights_and_converts_to_a_plain_lora(demo_model_dir, tmp_path, pissa_iter):
    lora = get_method("lora")
    config = settings(demo_model_dir, pissa_init=True, pissa_iter=pissa_iter, pissa_convert=True)
    base_logits = logits(fresh(demo_model_dir), IDS)
    model = lora.prepare(fresh(demo_model_dir), config)
    layer = lora_layer(model)
    # PiSSA: B and A hold the principal part of the weight (B is not zero) and the sum is unchanged at start.
    assert layer.lora_B["default"].weight.abs().sum() > 0
    torch.testing.assert_close(logits(model, IDS), base_logits, atol=1e-4, rtol=1e-4)
    assert lora.begin(model, config, tmp_path, resumed=False)
    with torch.no_grad():  # "training"
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.add_(torch.randn_like(param) * 0.05)
    trained = logits(model, IDS)
    lora.save(model, tmp_path)
    assert "plain LoRA of the original base" in lora.end(model, config, tmp_path)
    from peft import PeftModel

    for folder in (tmp_path, tmp_path / "pissa_converted"):
        reloaded = PeftModel.from_pretrained(fresh(demo_model_dir), folder)
        torch.testing.assert_close(logits(reloaded, IDS), trained, atol=1e-4, rtol=1e-4)
    assert (tmp_path / "pissa_backup" / "adapter_model.safetensors").is_file()


def test_pissa_is_refused_where_llamafactory_refuses_it(demo_model_dir):
    problems = engine.validate(settings(demo_model_dir, pissa_init=True, stage="dpo", dataset="dpo_demo"))
    assert any("pissa_init cannot be used with stage dpo" in p for p in problems)
    problems = engine.validate(settings(demo_model_dir, use_dora=True, finetuning_type="full"))
    assert any(p.startswith("use_dora only applies to LoRA") for p in problems)


def test_additional_target_modules_train_and_are_saved(demo_model_dir, tmp_path):
    handle = engine.train(tiny_config(demo_model_dir, tmp_path, additional_target="embed_tokens", max_steps=4),
                          runs_dir=tmp_path / "runs")
    assert handle.status().state == "completed"
    saved = load_file(Path(handle.status().output_dir) / "adapter_model.safetensors")
    embedding = [v for k, v in saved.items() if "embed_tokens" in k]
    assert embedding, sorted(saved)
    original = fresh(demo_model_dir).get_input_embeddings().weight
    assert not torch.equal(embedding[0], original)
    problems = engine.validate(settings(demo_model_dir, additional_target="no_such_module"))
    assert any("additional_target 'no_such_module' matches no module" in p for p in problems)


def make_adapter(model_dir, folder, seed):
    lora = get_method("lora")
    model = lora.prepare(fresh(model_dir), settings(model_dir))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.05)
    lora.save(model, folder)
    return logits(model, IDS)


def test_create_new_adapter_merges_and_starts_fresh(demo_model_dir, tmp_path):
    adapted = make_adapter(demo_model_dir, tmp_path / "a", seed=1)
    lora = get_method("lora")
    new = lora.prepare(fresh(demo_model_dir), settings(demo_model_dir, adapter_name_or_path=str(tmp_path / "a"),
                                                       create_new_adapter=True))
    assert all(torch.count_nonzero(p) == 0 for n, p in new.named_parameters() if "lora_B" in n)
    torch.testing.assert_close(logits(new, IDS), adapted, atol=1e-5, rtol=1e-5)  # the old adapter is in the base
    # Without create_new_adapter the (last) adapter itself trains on.
    continued = lora.prepare(fresh(demo_model_dir), settings(demo_model_dir, adapter_name_or_path=str(tmp_path / "a")))
    assert any(torch.count_nonzero(p) for n, p in continued.named_parameters() if "lora_B" in n and p.requires_grad)


def test_an_adapter_list_merges_all_but_the_last(demo_model_dir, tmp_path):
    make_adapter(demo_model_dir, tmp_path / "a", seed=1)
    make_adapter(demo_model_dir, tmp_path / "b", seed=2)
    from peft import PeftModel

    expected = PeftModel.from_pretrained(
        PeftModel.from_pretrained(fresh(demo_model_dir), tmp_path / "a").merge_and_unload(), tmp_path / "b")
    model = get_method("lora").prepare(fresh(demo_model_dir), settings(
        demo_model_dir, adapter_name_or_path=f"{tmp_path / 'a'},{tmp_path / 'b'}"))
    torch.testing.assert_close(logits(model, IDS), logits(expected, IDS), atol=1e-5, rtol=1e-5)
    assert any(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)


def test_freeze_beyond_the_layer_count_trains_every_layer_and_extras(demo_model_dir):
    config = settings(demo_model_dir, finetuning_type="freeze", freeze_trainable_layers=50,
                      freeze_extra_modules="embed_tokens")
    model = get_method("freeze").prepare(fresh(demo_model_dir), config)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any(".layers.0." in n for n in trained) and any(".layers.1." in n for n in trained)
    assert "model.embed_tokens.weight" in trained and "model.norm.weight" not in trained
    assert any("all 2 train, as in LLaMA-Factory" in w for w in engine.config.warnings(config))
    with pytest.raises(engine.ConfigError, match="matches no module outside the decoder layers"):
        get_method("freeze").prepare(fresh(demo_model_dir), settings(
            demo_model_dir, finetuning_type="freeze", freeze_extra_modules="vision_tower"))


@pytest.mark.parametrize("kind", ["linear", "dynamic", "yarn", "llama3"])
def test_rope_scaling_is_set_in_the_loaded_config(demo_model_dir, kind):
    from engine.models.loading import load_model
    from engine.models.options import LoadOptions

    notes = []
    model = load_model(demo_model_dir, dtype="float32", options=LoadOptions(rope_scaling=kind, model_max_length=5000),
                       notes=notes)
    params = model.config.rope_parameters
    assert params["rope_type"] == kind and params["factor"] == 3.0  # ceil(5000 / 2048)
    assert model.config.max_position_embeddings == 3 * 2048 and "factor 3" in notes[0]
    assert model.model.rotary_emb.rope_type == kind
    short = load_model(demo_model_dir, dtype="float32", options=LoadOptions(rope_scaling=kind, model_max_length=512))
    assert short.config.rope_parameters["rope_type"] == "default"  # cutoff fits: nothing changes, as in LF


def test_resize_vocab_grows_the_embeddings_and_trains_them(demo_model_dir, tmp_path):
    import shutil

    from transformers import AutoTokenizer

    model_dir = tmp_path / "model"
    shutil.copytree(demo_model_dir, model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = fresh(demo_model_dir).get_input_embeddings().weight.shape[0]
    tokenizer.add_tokens([f"<new_{i}>" for i in range(rows - len(tokenizer) + 3)])
    tokenizer.save_pretrained(model_dir)
    handle = engine.train(tiny_config(model_dir, tmp_path, resize_vocab=True, max_steps=2),
                          runs_dir=tmp_path / "runs")
    assert handle.status().state == "completed"
    saved = load_file(Path(handle.status().output_dir) / "adapter_model.safetensors")
    embedding = next(v for k, v in saved.items() if "embed_tokens" in k)
    assert embedding.shape[0] == ((len(tokenizer) + 63) // 64) * 64 > rows
    assert "resize_vocab: embeddings grown" in handle.run.log_path.read_text()


@pytest.mark.parametrize("method,needs", [("gptq", "gptqmodel"), ("awq", "autoawq"), ("aqlm", "aqlm")])
def test_prequantized_checkpoints_say_what_they_need(demo_model_dir, tmp_path, method, needs):
    import json
    import shutil

    model_dir = tmp_path / method
    shutil.copytree(demo_model_dir, model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    config["quantization_config"] = {"quant_method": method, "bits": 4}
    (model_dir / "config.json").write_text(json.dumps(config))
    problems = engine.validate(settings(model_dir))
    message = next(p for p in problems if "pre-quantized checkpoint" in p)
    assert f"({method})" in message and needs in message and "CUDA GPU" in message


@pytest.mark.parametrize("method", ["full", "freeze", "lora"])
def test_trainable_weights_are_kept_in_float32_under_mixed_precision(demo_model_dir, method):
    """The base loads in the checkpoint's bf16 on a GPU; what trains is cast to float32 (LLaMA-Factory's upcast),
    so AdamW's small updates are not rounded away, and the step still runs under bf16 autocast."""
    from transformers import AutoModelForCausalLM

    from engine.methods import get_method
    from engine.training.session import keep_trainable_in_float32

    config = engine.load_config({"finetuning_type": method, "freeze_trainable_layers": 1, "lora_target": "all"})
    model = get_method(method).module.prepare(
        AutoModelForCausalLM.from_pretrained(demo_model_dir, dtype=torch.bfloat16), config)
    cast = keep_trainable_in_float32(model)
    assert cast == 0 if method == "lora" else cast > 0  # PEFT makes its adapters float32 itself
    trainable = {name: p for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(p.dtype == torch.float32 for p in trainable.values())
    if method != "full":
        assert all(p.dtype == torch.bfloat16 for p in model.parameters() if not p.requires_grad)
    before = {name: p.detach().clone() for name, p in trainable.items()}
    optimizer = torch.optim.AdamW(trainable.values(), lr=1e-3)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss) and any(not torch.equal(before[n], p) for n, p in trainable.items())
    assert keep_trainable_in_float32(model) == 0
