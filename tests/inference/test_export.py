"""Export on the demo model: the merge changes the weights, matches base + adapter, reloads in plain transformers."""

import json
import shutil
import stat
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from engine.errors import ConfigError, ModelError
from engine.export import load_export_config, make_export_config
from engine.export.__main__ import main as export_main
from engine.export.run import export_model

REPO = Path(__file__).resolve().parents[2]
PROMPTS = ["Who are you?", "What is tea?", "Say hello."]


def export_config(lora_run, demo_model_dir, export_dir, **over):
    data = make_export_config(lora_run, base_model=str(demo_model_dir), method="lora", template="qwen",
                              export_dir=export_dir, export_device="cpu")
    return load_export_config(data, **over)


def greedy(model, tokenizer, text, steps=12):
    inputs = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    output = model.generate(**inputs, max_new_tokens=steps, do_sample=False)
    return output[0, inputs["input_ids"].shape[1]:].tolist()


def all_weights(folder):
    weights = {}
    for file in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(file))
    return weights


@pytest.fixture(scope="module")
def lora_export(lora_run, demo_model_dir, tmp_path_factory):
    target = tmp_path_factory.mktemp("exports") / "tiny-merged"
    # 1.5 MB shards: the 2.1 MB embedding is bigger than a shard and must sit alone, the rest is split.
    result = export_model(export_config(lora_run, demo_model_dir, target, export_size=0.0015))
    return result


def test_lora_export_reloads_and_answers_like_the_adapter(lora_export, lora_run, demo_model_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = lora_export.export_dir
    tokenizer = AutoTokenizer.from_pretrained(folder)
    exported = AutoModelForCausalLM.from_pretrained(folder)
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(demo_model_dir), lora_run)
    for text in PROMPTS:
        assert greedy(exported, tokenizer, text) == greedy(adapted, tokenizer, text)
    # Plain transformers renders the training template and stops on its end-of-turn token.
    from engine.data.templates import get_template

    messages = [{"role": "user", "content": "Hi"}]
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == \
        get_template("qwen").render(messages, add_generation_prompt=True)
    assert json.loads((folder / "tokenizer_config.json").read_text())["chat_template"] == \
        (folder / "chat_template.jinja").read_text()
    assert exported.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_lora_export_files_and_record(lora_export, demo_model_dir):
    folder = lora_export.export_dir
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 2 and shards == lora_export.files
    for shard in shards:
        tensors = load_file(folder / shard)
        assert (folder / shard).stat().st_size <= 1.5e6 or len(tensors) == 1
        assert stat.S_IMODE((folder / shard).stat().st_mode) == 0o644  # readable by a runtime's service user
    base, merged = load_file(demo_model_dir / "model.safetensors"), all_weights(folder)
    changed = {k for k in base if not torch.equal(base[k], merged[k])}
    assert changed and all(k.endswith("proj.weight") for k in changed)
    assert torch.equal(base["model.embed_tokens.weight"], merged["model.embed_tokens.weight"])
    record = json.loads((folder / "lfa_export.json").read_text())
    assert record["operation"] == "merge" and record["template"] == "qwen" and record["weight_files"] == shards
    assert all(check["passed"] for check in record["checks"]) and len(record["checks"]) == 5
    logits = next(c for c in record["checks"] if "logits" in c["name"])
    assert logits["measured"] <= logits["tolerance"] < 1e-2
    modelfile = (folder / "Modelfile").read_text()
    assert "FROM ." in modelfile and 'PARAMETER stop "<|im_end|>"' in modelfile
    assert "<|im_start|>user\n{{ .Content }}<|im_end|>\n" in modelfile
    assert 'SYSTEM """You are Qwen, created by Alibaba Cloud. You are a helpful assistant."""' in modelfile


def test_lf_merge_example_needs_the_training_template(lf_reference, lora_run, demo_model_dir, tmp_path, capsys):
    example = lf_reference / "examples/merge_lora/qwen3_lora_sft.yaml"  # says template: qwen3_nothink
    args = [str(example), f"model_name_or_path={demo_model_dir}", f"adapter_name_or_path={lora_run}",
            f"export_dir={tmp_path / 'merged'}"]
    assert export_main(args) == 2
    error = capsys.readouterr().err
    assert "'qwen'" in error and "'qwen3_nothink'" in error and "template=qwen" in error
    assert not (tmp_path / "merged").exists()
    assert export_main(args + ["template=qwen"]) == 0
    assert f"exported to {tmp_path / 'merged'}" in capsys.readouterr().out
    # Exporting again replaces the earlier export; a folder of other files is never overwritten.
    assert export_main(args + ["template=qwen"]) == 0
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    assert export_main(args[:-1] + [f"export_dir={tmp_path / 'mine'}", "template=qwen"]) == 2
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_full_export_is_a_resave_in_legacy_format(full_run, tmp_path):
    from transformers import AutoModelForCausalLM

    config = load_export_config(make_export_config(full_run, base_model="unused", method="full", template="qwen",
                                                   export_dir=tmp_path / "sft", export_device="auto"),
                                export_legacy_format=True)
    result = export_model(config)
    assert result.operation == "re-save" and not any("merge" in c.name for c in result.checks)
    assert result.files == ["pytorch_model.bin"] and all(c.passed for c in result.checks)
    reloaded = AutoModelForCausalLM.from_pretrained(result.export_dir).state_dict()
    source = load_file(full_run / "model.safetensors")
    assert all(torch.equal(source[k], reloaded[k]) for k in source)
    assert "chat_template" in json.loads((result.export_dir / "tokenizer_config.json").read_text())


@pytest.mark.parametrize("legacy", [False, True])
def test_export_size_below_one_tensor_gives_that_tensor_its_own_shard(demo_model_dir, tmp_path, legacy):
    # 0.0001 GB: the float32 embedding and MLP matrices are each larger than a shard, the small ones share shards
    # of up to 100 kB of tensor data (the files a few hundred header bytes more), as transformers' max_shard_size.
    from transformers import AutoModelForCausalLM

    from engine.export.writer import _check_shard_sizes, read_weights

    config = load_export_config({"model_name_or_path": str(demo_model_dir), "export_dir": str(tmp_path / "out"),
                                 "template": "qwen", "finetuning_type": "full", "export_device": "cpu",
                                 "infer_dtype": "float32", "export_size": 0.0001, "export_legacy_format": legacy})
    result = export_model(config)
    assert len(result.files) > 2 and all(c.passed for c in result.checks)
    for name in result.files:
        tensors = dict(read_weights(result.export_dir, [name]))
        assert sum(t.numel() * t.element_size() for t in tensors.values()) <= 100_000 or len(tensors) == 1
    assert any(len(dict(read_weights(result.export_dir, [name]))) > 1 for name in result.files)
    source = AutoModelForCausalLM.from_pretrained(demo_model_dir).state_dict()
    reloaded = AutoModelForCausalLM.from_pretrained(result.export_dir).state_dict()
    assert all(torch.equal(source[k], reloaded[k]) for k in source)
    assert not _check_shard_sizes(result.export_dir, result.files, 50_000).passed  # shards of several tensors


def test_the_shard_check_reads_a_damaged_header_within_limits(tmp_path):
    """A shard whose header length field claims terabytes is measured by its size, not read whole."""
    from engine.export.writer import _check_shard_sizes

    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 8 + b"{}" * 500)
    assert _check_shard_sizes(tmp_path, ["model.safetensors"], 5_000).passed
    assert not _check_shard_sizes(tmp_path, ["model.safetensors"], 500).passed


def test_adapter_that_changes_nothing_is_refused(demo_model_dir, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    untrained = get_peft_model(AutoModelForCausalLM.from_pretrained(demo_model_dir),
                               LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))  # lora_B starts at zero
    untrained.save_pretrained(tmp_path / "adapter")
    with pytest.raises(ModelError, match="changes nothing"):
        export_model(export_config(tmp_path / "adapter", demo_model_dir, tmp_path / "out"))
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_quantized_base_is_refused_before_loading(lora_run, demo_model_dir, tmp_path):
    quantized = shutil.copytree(demo_model_dir, tmp_path / "gptq")
    config = json.loads((quantized / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    (quantized / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="quantized checkpoint \\(gptq\\).*full-precision"):
        export_model(export_config(lora_run, quantized, tmp_path / "out"))


def test_adapter_on_tied_embedding_is_untied(demo_model_dir, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(demo_model_dir),
                                LoraConfig(r=4, target_modules=["embed_tokens", "q_proj"]))
    with torch.no_grad():  # a non-zero update, as training would leave it (embedding LoRA starts with A = 0)
        for name, param in peft_model.named_parameters():
            if "lora_B" in name or "lora_embedding" in name:
                param.normal_(std=0.05)
    peft_model.save_pretrained(tmp_path / "adapter")
    result = export_model(export_config(tmp_path / "adapter", demo_model_dir, tmp_path / "out"))
    assert all(c.passed for c in result.checks) and any("untie" in n for n in result.notes)
    assert "3 of 3 adapted matrices" in result.checks[0].detail  # the embedding and both q_proj
    exported = AutoModelForCausalLM.from_pretrained(result.export_dir)
    assert exported.config.tie_word_embeddings is False
    reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(demo_model_dir), tmp_path / "adapter")
    ids = torch.tensor([[1, 300, 301, 302, 2, 1, 400]])
    with torch.no_grad():
        assert torch.allclose(exported(ids).logits, reference(ids).logits, atol=1e-4)
    base = load_file(demo_model_dir / "model.safetensors")["model.embed_tokens.weight"]
    assert torch.equal(exported.lm_head.weight, base)  # the head keeps the untouched embedding
    assert not torch.equal(exported.model.embed_tokens.weight, base)


def test_verification_catches_an_export_of_the_original_weights(lora_run, demo_model_dir, tmp_path):
    """Pain point: an export that silently holds the base weights. The read-back check must fail on it."""
    from transformers import AutoModelForCausalLM

    from engine.export.merge import fingerprints
    from engine.export.writer import save_weights, verify_export
    from engine.inference.source import attach_adapter

    adapted = attach_adapter(AutoModelForCausalLM.from_pretrained(demo_model_dir), str(lora_run), "demo")
    _, prints = fingerprints(adapted)
    merged = adapted.merge_and_unload()
    files, _ = save_weights(AutoModelForCausalLM.from_pretrained(demo_model_dir), tmp_path, shard_bytes=10**9,
                            dtype=torch.float32, legacy=False, stop_ids=[2], pad_id=0)
    checks = {c.name: c.passed for c in verify_export(tmp_path, files, merged, prints, 10**9)}
    assert checks["export files hold the merged weights"] is False
    assert checks["exported weights differ from the base where the adapter is non-zero"] is False


@pytest.fixture(scope="module")
def stacked_run(lora_run, demo_model_dir, tmp_path_factory):
    """A second adapter trained on lora_run merged into the base (create_new_adapter), on the same matrices
    (lora_target: all for both): exporting lora_run,stacked_run merges two updates into each of them."""
    import engine

    root = tmp_path_factory.mktemp("stacked_run")
    config = engine.load_config({
        "model_name_or_path": str(demo_model_dir), "adapter_name_or_path": str(lora_run), "create_new_adapter": True,
        "lora_target": "all", "dataset": "identity", "dataset_dir": str(REPO / "data"), "template": "qwen",
        "finetuning_type": "lora", "cutoff_len": 96, "max_samples": 8, "per_device_train_batch_size": 4,
        "learning_rate": 5e-3, "max_steps": 3, "save_strategy": "no", "seed": 11, "output_dir": str(root / "out"),
        "lr_scheduler_type": "constant", "plot_loss": False})
    status = engine.train(config, runs_dir=root / "runs").status()
    assert status.state == "completed", status
    return Path(status.output_dir)


def merged_in_order(demo_model_dir, adapters):
    """The base with each adapter merged into what the previous ones left, as LLaMA-Factory's export does."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(demo_model_dir)
    for adapter in adapters:
        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    return model.state_dict()


def test_overlapping_adapters_export_base_plus_both_updates(lora_run, stacked_run, demo_model_dir, tmp_path):
    """Pain point: two adapters on the same matrices always failed the read-back check and the export was removed,
    because it compared the files with the last adapter's update alone."""
    result = export_model(export_config(lora_run, demo_model_dir, tmp_path / "out",
                                        adapter_name_or_path=f"{lora_run},{stacked_run}"))
    assert all(c.passed for c in result.checks), [c.detail for c in result.checks if not c.passed]
    carried = next(c for c in result.checks if c.name.startswith("exported weights differ"))
    count = int(carried.detail.split()[0])
    assert count > 0 and carried.detail.startswith(f"{count} of {count} (adapter, matrix) pairs")
    base, first = load_file(demo_model_dir / "model.safetensors"), merged_in_order(demo_model_dir, [lora_run])
    both, exported = merged_in_order(demo_model_dir, [lora_run, stacked_run]), all_weights(result.export_dir)
    by_first = {k for k in base if not torch.equal(base[k], first[k])}
    by_second = {k for k in base if not torch.equal(first[k], both[k])}
    assert by_first and by_second == by_first  # the adapters overlap on every matrix
    for name in base:
        torch.testing.assert_close(exported[name], both[name], rtol=0, atol=1e-6)
    record = json.loads((result.export_dir / "lfa_export.json").read_text())
    assert record["adapters_merged"] == [str(lora_run), str(stacked_run)]


def test_verification_catches_an_export_missing_the_second_adapter(lora_run, stacked_run, demo_model_dir, tmp_path):
    """The read-back check stays meaningful with overlapping adapters: files holding only the first adapter's merge
    fail it, files holding both pass."""
    from transformers import AutoModelForCausalLM

    from engine.export.merge import fingerprints
    from engine.export.writer import save_weights, verify_export
    from engine.inference.source import attach_adapter

    prints, model = [], AutoModelForCausalLM.from_pretrained(demo_model_dir)
    for adapter in (lora_run, stacked_run):
        adapted = attach_adapter(model, str(adapter), "demo")
        _, prints = fingerprints(adapted, prints)
        model = adapted.merge_and_unload()
    name = "exported weights differ from the base where the adapter is non-zero"
    first_only = AutoModelForCausalLM.from_pretrained(demo_model_dir)
    first_only.load_state_dict(merged_in_order(demo_model_dir, [lora_run]))
    files, _ = save_weights(first_only, tmp_path / "first", shard_bytes=10**9, dtype=torch.float32, legacy=False,
                            stop_ids=[2], pad_id=0)
    checks = {c.name: c for c in verify_export(tmp_path / "first", files, model, prints, 10**9)}
    assert checks[name].passed is False and checks[name].detail.startswith("0 of ")
    files, _ = save_weights(model, tmp_path / "both", shard_bytes=10**9, dtype=torch.float32, legacy=False,
                            stop_ids=[2], pad_id=0)
    assert all(c.passed for c in verify_export(tmp_path / "both", files, model, prints, 10**9))


def test_export_keeps_the_base_dtype(lora_run, demo_model_dir, tmp_path):
    """A bf16 base merged on a CPU (in float32) is exported in bf16, as large as its base, not twice that."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    base = tmp_path / "bf16-base"
    AutoModelForCausalLM.from_pretrained(demo_model_dir, dtype=torch.bfloat16).save_pretrained(base)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(demo_model_dir / name, base / name)
    result = export_model(export_config(lora_run, base, tmp_path / "out"))
    assert all(c.passed for c in result.checks)
    with safe_open(str(result.export_dir / "model.safetensors"), framework="pt") as handle:
        assert {handle.get_tensor(k).dtype for k in handle.keys()} == {torch.bfloat16}
    assert json.loads((result.export_dir / "lfa_export.json").read_text())["dtype"] == "bfloat16"


def test_export_never_writes_over_its_inputs(lora_run, demo_model_dir):
    for target in (lora_run, demo_model_dir, demo_model_dir.parent, demo_model_dir / "merged"):
        with pytest.raises(ConfigError, match="export_dir .* (is|contains|is inside) the .* folder"):
            export_model(export_config(lora_run, demo_model_dir, target))


def snapshot(folder):
    """{relative path: sha256} of every file under `folder`."""
    import hashlib

    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture()
def umask_002():
    import os

    previous = os.umask(0o002)
    yield
    os.umask(previous)


def test_reexport_keeps_user_files_and_every_sibling(lora_run, demo_model_dir, tmp_path, umask_002):
    target = tmp_path / "merged"
    siblings = {".merged.partial": "a folder of mine", ".merged.old": "a file of mine", "other": "untouched"}
    (tmp_path / ".merged.partial").mkdir()
    (tmp_path / ".merged.partial" / "x.txt").write_text(siblings[".merged.partial"])
    for name in (".merged.old", "other"):
        (tmp_path / name).write_text(siblings[name])
    first = export_model(export_config(lora_run, demo_model_dir, target))
    assert (tmp_path / ".merged.partial" / "x.txt").read_text() == siblings[".merged.partial"]
    assert (tmp_path / ".merged.old").read_text() == siblings[".merged.old"]
    record = json.loads((target / "lfa_export.json").read_text())
    assert set(record["files"]) == set(snapshot(target)) and "Modelfile" in record["files"]
    # Modes follow the umask (002 here): group-writable files and folders, as the user's own would be.
    assert stat.S_IMODE(target.stat().st_mode) == 0o775
    assert {stat.S_IMODE((target / name).stat().st_mode) for name in record["files"]} == {0o664}
    (target / "notes.txt").write_text("mine")
    (target / "eval").mkdir()
    (target / "eval" / "scores.json").write_text("{}")
    second = export_model(export_config(lora_run, demo_model_dir, target))
    assert (target / "notes.txt").read_text() == "mine" and (target / "eval" / "scores.json").read_text() == "{}"
    assert any("kept 2 file(s)" in note for note in second.notes), second.notes
    assert "notes.txt" not in json.loads((target / "lfa_export.json").read_text())["files"]
    assert (tmp_path / ".merged.partial" / "x.txt").read_text() == siblings[".merged.partial"]
    assert (tmp_path / ".merged.old").read_text() == siblings[".merged.old"]
    assert (tmp_path / "other").read_text() == siblings["other"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*siblings, "merged"])  # no staging left behind
    assert first.files == second.files


def test_a_failed_or_killed_export_leaves_the_earlier_one_intact(lora_run, demo_model_dir, tmp_path, monkeypatch):
    import subprocess
    import sys

    import engine.export.run as run_module

    target = tmp_path / "merged"
    export_model(export_config(lora_run, demo_model_dir, target))
    (target / "notes.txt").write_text("mine")
    before = snapshot(target)

    def broken(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_module, "save_tokenizer", broken)  # fails while writing the new export
    with pytest.raises(OSError):
        export_model(export_config(lora_run, demo_model_dir, target))
    assert snapshot(target) == before and sorted(p.name for p in tmp_path.iterdir()) == ["merged"]
    # Killed (no cleanup at all) just before the swap: the old export is whole, the staging folder stays aside.
    script = ("import os, sys\nimport engine.export.swap as swap\nfrom engine.export import load_export_config, "
              "make_export_config\nfrom engine.export.run import export_model\n"
              "swap._exchange = lambda *a: os._exit(9)\n"
              f"export_model(load_export_config(make_export_config({str(lora_run)!r}, base_model="
              f"{str(demo_model_dir)!r}, method='lora', template='qwen', export_dir={str(target)!r}, "
              "export_device='cpu')))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 9, done.stderr[-2000:]
    assert snapshot(target) == before
    assert [p.name.startswith(".lfa-export-") for p in tmp_path.iterdir() if p.name != "merged"] == [True]


def test_export_dir_of_foreign_files_or_a_file_is_refused_untouched(lora_run, demo_model_dir, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "weights.safetensors").write_text("not ours")
    (tmp_path / "afile").write_text("x")
    for target, said in ((tmp_path / "mine", "not an earlier export"), (tmp_path / "afile", "is a file")):
        with pytest.raises(ConfigError, match=said):
            export_model(export_config(lora_run, demo_model_dir, target))
    assert (tmp_path / "mine" / "weights.safetensors").read_text() == "not ours"
    assert (tmp_path / "afile").read_text() == "x" and len(list(tmp_path.iterdir())) == 2


def test_an_adapter_is_never_applied_beside_the_one_it_continued(lora_run, demo_model_dir, stacked_run, tmp_path):
    """Trained on from lora_run (no create_new_adapter), the new adapter holds lora_run's weights and more: chat and
    export refuse the two together, which would apply lora_run twice; each alone, and a stacked (new) adapter
    beside lora_run, still load."""
    import engine
    from engine.errors import ConfigError
    from engine.inference.source import plan_model

    config = engine.load_config({
        "model_name_or_path": str(demo_model_dir), "adapter_name_or_path": str(lora_run), "dataset": "identity",
        "dataset_dir": str(REPO / "data"), "template": "qwen", "finetuning_type": "lora", "cutoff_len": 96,
        "max_samples": 8, "per_device_train_batch_size": 4, "max_steps": 2, "save_strategy": "no",
        "output_dir": str(tmp_path / "continued"), "plot_loss": False})
    continued = Path(engine.train(config, runs_dir=tmp_path / "runs").status().output_dir)
    with pytest.raises(ConfigError, match="continued the training of .* twice"):
        plan_model(str(demo_model_dir), [str(lora_run), str(continued)], "qwen")
    assert plan_model(str(demo_model_dir), [str(continued)], "qwen").adapters == [str(continued)]
    assert len(plan_model(str(demo_model_dir), [str(lora_run), str(stacked_run)], "qwen").adapters) == 2
    # a chain: the third continued the second, which continued lora_run, so it holds lora_run too
    import dataclasses

    third = dataclasses.replace(config, adapter_name_or_path=str(continued), output_dir=str(tmp_path / "third"))
    third = Path(engine.train(third, runs_dir=tmp_path / "runs").status().output_dir)
    with pytest.raises(ConfigError, match="continued the training of"):
        plan_model(str(demo_model_dir), [str(lora_run), str(third)], "qwen")
