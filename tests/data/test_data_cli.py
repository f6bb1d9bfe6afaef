"""`lf-assistant data check|preview` through typer's CliRunner: exit codes, messages, never a traceback."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assistant.cli.data import app

REPO_DATA = Path(__file__).resolve().parents[2] / "data"

runner = CliRunner()
WIDE = {"COLUMNS": "200"}  # rich wraps at the terminal width; keep messages on one line for the asserts


def _invoke(*args):
    result = runner.invoke(app, [str(a) for a in args], env=WIDE)
    assert "Traceback" not in result.output
    return result


def test_check_a_clean_file_exits_0_and_suggests_the_registration(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps([{"instruction": "2+2?", "input": "", "output": "4"}]))
    result = _invoke("check", path)
    assert result.exit_code == 0, result.output
    assert "alpaca, 1 rows: ok" in result.output and '"mine": {"file_name": "mine.json"}' in result.output


def test_check_lists_errors_with_rows_and_exits_1(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"instruction": "a", "output": "b"}, {"instruction": "c"},
                                {"instruction": "d", "output": ""}], indent=1))
    result = _invoke("check", path)
    assert result.exit_code == 1
    assert "2 error(s)" in result.output
    lines = [line for line in result.output.splitlines() if "no answer" in line or "is empty" in line]
    assert lines[0].split()[0] == "2" and lines[1].split()[0] == "3"


@pytest.mark.parametrize(("name", "content", "message"), [
    ("missing.json", None, "does not exist"),
    ("folder", "DIR", "is a folder"),
    ("garbage.json", bytes(range(256)), "looks like a binary file"),
    ("empty.json", b"", "is empty"),
    ("latin.json", '[{"instruction": "café", "output": "x"}]'.encode("latin-1"), "not UTF-8"),
])
def test_unreadable_files_give_one_line_and_exit_2(tmp_path, name, content, message):
    path = tmp_path / name
    if content == "DIR":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    result = _invoke("check", path)
    assert result.exit_code == 2
    assert message in result.output and result.output.startswith("error:")
    assert len(result.output.strip().splitlines()) == 1


def test_check_fix_writes_a_repaired_copy_and_leaves_the_input(tmp_path):
    source = tmp_path / "chat.json"
    source.write_text(json.dumps([{"conversations": [{"from": "user", "value": "Hi {{name}}"},
                                                     {"from": "bot", "value": "I am {{name}}."}]}]))
    before = hashlib.sha256(source.read_bytes()).hexdigest()
    assert _invoke("check", source).exit_code == 1
    result = _invoke("check", source, "--fix", tmp_path / "fixed.json", "--fill", "name=Ada")
    assert result.exit_code == 0, result.output
    assert "renamed role 'bot' to 'gpt'" in result.output and "filled {{name}}" in result.output
    fixed = json.loads((tmp_path / "fixed.json").read_text())
    assert fixed == [{"conversations": [{"from": "human", "value": "Hi Ada"}, {"from": "gpt", "value": "I am Ada."}]}]
    assert hashlib.sha256(source.read_bytes()).hexdigest() == before
    refused = _invoke("check", source, "--fix", source)
    assert refused.exit_code == 2 and "Refusing to write over the input" in refused.output
    typo = _invoke("check", source, "--fix", tmp_path / "fixd" / "sub" / "fixed.json", "--fill", "name=Ada")
    assert typo.exit_code == 2 and "does not exist. Create it first" in typo.output, typo.output
    assert not (tmp_path / "fixd").exists()  # a mistyped folder is not made


def test_check_rejects_bad_options(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps([{"instruction": "a", "output": "b"}]))
    assert _invoke("check", path, "--format", "xml").exit_code == 2
    assert _invoke("check", path, "--fill", "name=Ada").exit_code == 2


def test_preview_highlights_trained_spans_and_counts_tokens(tmp_path, demo_model_dir):
    config = tmp_path / "sft.yaml"
    config.write_text(f"model_name_or_path: {demo_model_dir}\ntemplate: qwen\ndataset: alpaca_demo,sharegpt_demo\n"
                      f"dataset_dir: {REPO_DATA}\nmax_samples: 5\ncutoff_len: 256\n", encoding="utf-8")
    result = runner.invoke(app, ["preview", str(config), "--n", "1"], env={**WIDE, "FORCE_COLOR": "1"})
    assert result.exit_code == 0, result.output
    plain = re.sub(r"\x1b\[[0-9;]*m", "", result.output)
    assert "Traceback" not in plain
    assert "template qwen" in plain and "alpaca_demo:1" in plain and "rows 10 -> samples 10" in plain
    assert "\x1b[1;32m" in result.output  # the trained answer is printed bold green
    override = runner.invoke(app, ["preview", str(config), "dataset=alpca_demo"], env=WIDE)
    assert override.exit_code == 2 and "Did you mean alpaca_demo" in override.output
    # the preview mixes as training mixes: interleave_under stops at the first exhausted dataset
    mixed = runner.invoke(app, ["preview", str(config), "max_samples=7", "dataset=alpaca_demo,identity",
                                "mix_strategy=interleave_under", "interleave_probs=0.5,0.5"], env=WIDE)
    assert mixed.exit_code == 0, mixed.output
    import engine
    from engine.data.loader import data_options, load_examples

    cfg = engine.load_config(config, "max_samples=7", "dataset=alpaca_demo,identity", "mix_strategy=interleave_under",
                             "interleave_probs=0.5,0.5")
    count = len(load_examples(cfg.dataset, REPO_DATA, **data_options(cfg)))
    assert count < 14 and f"rows {count} -> samples {count}" in mixed.output


def test_importing_the_cli_module_does_not_import_torch():
    code = "import sys, assistant.cli.data; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_importing_the_data_engine_does_not_import_torch_or_transformers():
    code = "import sys, engine.data; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False False"
