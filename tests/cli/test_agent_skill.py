"""`lf-assistant skills install` writes a SKILL.md an agent can follow: this test follows it, end to end.

The test plays the agent: it installs the skill, takes the commands from the file's bash blocks in order, gives
the variables the values a user would choose for the demo model (and the values the skill says to read from
the JSON documents), runs them, and checks what the run folder and `status --json` say at the end.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assistant.cli.main import app
from assistant.cli.skills import QUESTIONS, questions_table

REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```bash\n(.*?)```", re.DOTALL)


def shim(folder: Path) -> dict[str, str]:
    """An environment whose PATH has `lf-assistant` (this checkout), as an installed one would."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    script = bin_dir / "lf-assistant"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m assistant.cli.main "$@"\n')
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO),
            "HF_HUB_OFFLINE": "1", "LFA_LANG": "en", "COLUMNS": "200"}


def json_documents(text: str) -> list[dict]:
    """Every JSON document printed (pretty or one per line), in order."""
    decoder, found, index = json.JSONDecoder(), [], 0
    while (start := text.find("{", index)) != -1:
        try:
            document, index = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            index = start + 1
            continue
        found.append(document)
    return found


def test_install_writes_a_skill_with_front_matter_and_never_replaces_a_foreign_file(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["skills", "install", "--dir", str(tmp_path / "skill")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "skill" / "SKILL.md").read_text()
    front = text.split("---\n")[1]
    assert "name: lf-assistant" in front and "description: " in front
    assert "lf-assistant train" in text and "lf-assistant status" in text and "{{" not in text.split("`{{name}}")[0]
    assert runner.invoke(app, ["skills", "install", "--dir", str(tmp_path / "skill")]).exit_code == 0  # ours: updated
    mine = tmp_path / "mine" / "SKILL.md"
    mine.parent.mkdir()
    mine.write_text("---\nname: my-own\n---\nkeep me\n")
    result = runner.invoke(app, ["skills", "install", "--dir", str(mine.parent)])
    assert result.exit_code == 2 and "was not written by lf-assistant" in result.output
    assert mine.read_text() == "---\nname: my-own\n---\nkeep me\n"


def test_every_wizard_question_has_a_way_without_the_wizard_and_the_readme_shows_them():
    import yaml

    asked = {question["id"] for path in (REPO / "skills").glob("*/skill.yaml")
             for stage in yaml.safe_load(path.read_text())["stages"] for question in stage.get("questions", [])}
    mapped = {match for _, question, _ in QUESTIONS for match in re.findall(r"`(\w+)`", question)}
    assert asked <= mapped, f"wizard questions without a command-line way: {sorted(asked - mapped)}"
    assert questions_table() in (REPO / "README.md").read_text()


@pytest.mark.slow
def test_following_the_skill_trains_validates_and_exports_the_demo_model(tmp_path, demo_model_dir):
    env = shim(tmp_path)
    shutil.copytree(REPO / "data", tmp_path / "data")
    shutil.copytree(demo_model_dir, tmp_path / "models" / "lf-tiny-qwen3")
    rows = [{"instruction": f"What is {a} plus {a}?", "input": "", "output": f"{a} plus {a} is {2 * a}."}
            for a in range(16)]
    (tmp_path / "mine.json").write_text(json.dumps(rows))
    (tmp_path / "prompts.txt").write_text("What is 3 plus 3?\n")
    subprocess.run(["lf-assistant", "skills", "install", "--dir", "skill"], cwd=tmp_path, env=env, check=True)
    skill = (tmp_path / "skill" / "SKILL.md").read_text()
    blocks = BLOCK.findall(skill)

    # Only lf-assistant's own commands, and every variable they use is explained in the skill's table.
    commands = [line for block in blocks for line in block.splitlines() if line.strip()]
    assert all(line.startswith("lf-assistant ") for line in commands), commands
    assert any(line.startswith("lf-assistant train ") for line in commands)
    assert any(line.startswith("lf-assistant status ") for line in commands)
    used = set(re.findall(r"\$\{?([A-Z_]+)", "\n".join(blocks)))
    assert all(f"| `{name}` |" in skill for name in used), sorted(used)

    run_id = "lf-tiny-qwen3_lora_20260102_030405"
    answers = {"DATASET_DIR": "data", "DATASET": "mine", "DATA_FILE": "mine.json", "METHOD": "lora",
               "MODEL": "models/lf-tiny-qwen3", "GPUS": "", "RUN_ID": run_id, "PROMPTS": "prompts.txt",
               "OUTPUT_DIR": f"saves/lf-tiny-qwen3/lora/{run_id}", "EXPORT_DIR": "models/lf-tiny-qwen3-merged",
               # What the user agreed to at stage 3: a short run on the tiny model.
               "OVERRIDES": "max_steps=8 logging_steps=2 save_steps=4 cutoff_len=64"}
    outputs = []
    for block in blocks:
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, capture_output=True,
                                text=True, env={**env, **answers}, timeout=600)
        assert result.returncode == 0, f"{block}\n{result.stdout}\n{result.stderr}"
        outputs.append(result.stdout)
        for document in json_documents(result.stdout):
            if "template_rule" in document:  # models check: the skill says to keep these
                answers.update(TEMPLATE=document["template"], EXAMPLE=document["examples"]["lora"],
                               INFER_EXAMPLE=document["examples"]["infer_lora"],
                               EXPORT_EXAMPLE=document["examples"]["export_lora"])

    checks = [d for out in outputs for d in json_documents(out) if "suggested_entry" in d]
    assert checks and checks[0]["ok"] and checks[0]["rows"] == 16
    assert answers["TEMPLATE"] == "qwen"
    final = json.loads(subprocess.run(["lf-assistant", "status", run_id, "--json"], cwd=tmp_path, env=env,
                                      capture_output=True, text=True, check=True).stdout)
    assert final["finished"] and final["state"] == "completed" and final["step"] == 8
    losses = [json.loads(line)["loss"] for line in Path(final["metrics_path"]).read_text().splitlines()
              if '"loss"' in line]
    assert losses[-1] < losses[0]
    config = (tmp_path / "lf_runs" / run_id / "sft.yaml").read_text()
    assert "dataset: mine" in config and "template: qwen" in config
    answers_file = tmp_path / "lf_runs" / run_id / "validation.jsonl"
    validated = [json.loads(line) for line in answers_file.read_text().splitlines()]
    assert validated[0]["prompt"] == "What is 3 plus 3?" and validated[0]["tuned"] is not None
    assert "base" in validated[0]
    exported = tmp_path / "models" / "lf-tiny-qwen3-merged"
    assert (exported / "lfa_export.json").is_file() and list(exported.glob("*.safetensors"))
