"""CPU training gives large freed blocks back to the OS (engine/training/host_memory.py), so the process does not
keep its largest step's memory after it: measured in child processes, with and without the setting."""

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is for glibc's malloc")

CHILD = """
import json, sys, torch
from engine.training.host_memory import return_large_frees

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024

applied = return_large_frees() if sys.argv[1] == "on" else None
# a freed 24 MiB block raises glibc's own threshold; then 40 blocks of 8 MiB, each followed by a small tensor
# that stays alive (as a step's small tensors do), and the big blocks freed
big = torch.ones(6 * 1024 * 1024)
del big
before = rss_mb()
blocks, small = [], []
for _ in range(40):
    blocks.append(torch.ones(2 * 1024 * 1024))
    small.append(torch.ones(256 * 1024))  # 1 MiB: too big for the holes earlier frees left
during = rss_mb()
del blocks
print(json.dumps({"applied": applied, "before": before, "during": during, "after": rss_mb()}))
"""


def child(setting: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, setting], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_freed_activations_go_back_to_the_os_only_with_the_setting():
    default, fixed = child("off"), child("on")
    assert fixed["applied"] is True
    for run in (default, fixed):
        assert run["during"] - run["before"] >= 300, run  # 320 MiB were alive
    assert default["after"] - default["before"] >= 100, default  # glibc kept a good part of them
    assert fixed["after"] - fixed["before"] <= 40, fixed


def test_training_on_cpu_turns_it_on(demo_model_dir, tmp_path):
    """A one-step CPU run in a fresh process, then the same allocations as above: they go back to the OS."""
    train_first = f"""
import engine
from pathlib import Path
config = engine.load_config({{"model_name_or_path": {str(demo_model_dir)!r}, "dataset": "identity",
    "dataset_dir": {str(REPO / "data")!r}, "template": "qwen", "cutoff_len": 64, "max_samples": 8,
    "max_steps": 1, "output_dir": {str(tmp_path / "out")!r}, "plot_loss": False}})
assert engine.train(config, runs_dir=Path({str(tmp_path / "runs")!r})).status().state == "completed"
"""
    code = CHILD.replace("import json, sys, torch", "import json, sys, torch\n" + train_first)
    out = subprocess.run([sys.executable, "-c", code, "unset"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    run = json.loads(out.stdout.strip().splitlines()[-1])
    assert run["during"] - run["before"] >= 300, run
    assert run["after"] - run["before"] <= 40, run
