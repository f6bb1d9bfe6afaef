"""The generated launch scripts run with hostile run folders and addresses: stub `python`, `torchrun`, `srun` and
`scontrol` record their arguments, and nothing but them runs (no marker file appears)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assistant.cli.main import app

REPO = Path(__file__).resolve().parents[2]
STUB = """#!/bin/sh
n=$(ls "$STUB_LOG" | wc -l)
printf '%s\\0' "$(basename "$0")" "$@" > "$STUB_LOG/call-$(printf '%03d' "$n")"
"""
SRUN = STUB + 'for id in 0 1; do SLURM_NODEID=$id "$@" || exit $?; done\n'
SCONTROL = STUB + "printf 'node-a\\nnode-b\\n'\n"


def hostile(marker: Path) -> str:
    """A folder name that runs `touch marker` if any shell ever parses it as code."""
    return (f"runs $(touch {marker}) `touch {marker}` ;touch {marker}; 'q' \"d\" $HOME\n"
            f"touch {marker}\n% #x")


@pytest.fixture()
def stubs(tmp_path):
    folder, log = tmp_path / "stubs", tmp_path / "calls"
    folder.mkdir()
    log.mkdir()
    for name, text in {"torchrun": STUB, "python": STUB, "srun": SRUN, "scontrol": SCONTROL}.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    env = {"PATH": f"{folder}:{os.environ['PATH']}", "STUB_LOG": str(log), "SLURM_JOB_NODELIST": "node-[a-b]",
           "SLURM_JOB_ID": "77", "HOME": str(tmp_path)}
    return env, log


def calls(log: Path) -> list[list[str]]:
    found = [path.read_bytes().decode().split("\0")[:-1] for path in sorted(log.iterdir())]
    for path in log.iterdir():
        path.unlink()
    return found


def write_config(folder: Path, model_dir: Path) -> Path:
    config = {"model_name_or_path": str(model_dir), "dataset": "identity", "dataset_dir": str(REPO / "data"),
              "template": "qwen", "finetuning_type": "lora", "cutoff_len": 64, "max_steps": 2,
              "output_dir": str(folder / "out")}
    path = folder / "train.yaml"
    path.write_text("".join(f"{key}: {json.dumps(value)}\n" for key, value in config.items()))
    return path


def launch(*args) -> Path:
    result = CliRunner().invoke(app, ["launch", *[str(a) for a in args]])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    return result


def test_generated_scripts_pass_hostile_paths_as_single_arguments(demo_model_dir, tmp_path, stubs):
    env, log = stubs
    marker = tmp_path / "pwned"
    runs = tmp_path / hostile(marker)
    config = write_config(tmp_path, demo_model_dir)
    address = "head-0"  # a hostile address is refused up front (test_a_master_addr_that_is_no_address...)
    launch(config, "--nnodes", "2", "--nproc-per-node", "2", "--print", "--slurm", "--runs-dir", runs,
           "--run-id", "multi", "--master-addr", address)
    run = runs / "multi"
    subprocess.run(["bash", run / "launch.sh"], env=env, check=True, cwd=tmp_path)
    nodes = calls(log)
    assert [call[0] for call in nodes] == ["torchrun", "torchrun"]
    for rank, call in enumerate(nodes):
        assert f"--node-rank={rank}" in call and f"--rdzv-endpoint={address}:29500" in call
        assert call[-3:] == [str(run / "sft.yaml"), "--run-dir", str(run)]  # one argument each, byte for byte
    subprocess.run(["bash", run / "launch.sbatch"], env=env, check=True, cwd=tmp_path)
    scontrol, srun, *tasks = calls(log)
    assert scontrol == ["scontrol", "show", "hostnames", "node-[a-b]"] and srun[:3] == ["srun", "bash", "-c"]
    assert len(tasks) == 2
    for rank, call in enumerate(tasks):
        assert call[0] == "torchrun" and f"--node-rank={rank}" in call
        assert "--rdzv-endpoint=node-a:29500" in call  # the head node of the allocation, expanded in the task
        assert call[-3:] == [str(run / "sft.yaml"), "--run-dir", str(run)]
    assert (run / "slurm-77.log").exists()  # the shell redirect stands in for an #SBATCH --output SLURM can't parse
    assert not marker.exists()


def test_single_node_command_runs_only_python(demo_model_dir, tmp_path, stubs):
    env, log = stubs
    marker = tmp_path / "pwned"
    runs = tmp_path / hostile(marker)
    config = write_config(tmp_path, demo_model_dir)
    for nproc, module in ((1, "engine.recipes.sft"), (2, "torch.distributed.run")):
        launch(config, "--nproc-per-node", str(nproc), "--print", "--runs-dir", runs, "--run-id", f"one{nproc}")
        run = runs / f"one{nproc}"
        subprocess.run(["sh", run / "launch.sh"], env=env, check=True, cwd=tmp_path)
        [call] = calls(log)
        assert call[:3] == ["python", "-m", module]
        assert call[-3:] == [str(run / "sft.yaml"), "--run-dir", str(run)]
    assert not marker.exists()


@pytest.mark.parametrize("run_id", ["../../escaped", "", "a b", "x$(touch m)", "-rf", ".hidden", "a\nb", "é" * 3,
                                    "x" * 101])
def test_run_ids_that_are_not_names_are_refused_before_anything_is_written(demo_model_dir, tmp_path, run_id):
    config = write_config(tmp_path, demo_model_dir)
    runs = tmp_path / "runs"
    for command in (["launch", str(config), "--print"], ["train", str(config), "--check"]):
        result = CliRunner().invoke(app, [*command, "--runs-dir", str(runs), "--run-id", run_id])
        assert result.exit_code == 2, result.output
        assert "run id" in result.output and "Traceback" not in result.output
    assert not runs.exists() and not (tmp_path / "escaped").exists()


@pytest.mark.parametrize("address", ["a\nrm -rf /", "$(reboot)", "host name", "`id`", ""])
def test_a_master_addr_that_is_no_address_is_refused_before_anything_is_written(demo_model_dir, tmp_path, address):
    config = write_config(tmp_path, demo_model_dir)
    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, ["launch", str(config), "--print", "--slurm", "--nnodes", "2",
                                      "--master-addr", address, "--runs-dir", str(runs)], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "is not a host name or an IP address" in result.output, result.output
    assert not runs.exists()


@pytest.mark.parametrize("address", ["10.0.0.1", "node-0.cluster", "[fe80::1%eth0]"])
def test_host_names_and_ip_addresses_reach_the_rendezvous(demo_model_dir, tmp_path, address):
    config = write_config(tmp_path, demo_model_dir)
    result = launch(config, "--print", "--nnodes", "2", "--master-addr", address, "--runs-dir", tmp_path / "runs")
    assert f"{address}:29500" in result.output
