"""The benchmark scripts run end to end on the demo model, at their smallest, and print their ratio lines.

They are run by hand for their figures (benchmarks/RESULTS.md); nothing here checks a speed. What is checked is
that each still works against the current engine and prints what its docstring promises: a script that breaks
silently (a refused output folder, a renamed function) loses a measurement session.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RATIO = r"ratio (\d+\.\d+)"


def run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def ratio(output: str, line_start: str) -> float:
    lines = [line for line in output.splitlines() if line.startswith(line_start)]
    assert lines, output[-2000:]
    found = re.search(RATIO, lines[-1])
    assert found, lines[-1]
    value = float(found.group(1))
    assert value > 0
    return value


def test_compare_peers_prints_the_issue_line_with_a_share_of_peak():
    output = run("compare_peers.py", "--steps", "1", "--repeats", "1", "--datasets", "skewed")
    ratio(output, "[skewed] lf-assistant packed vs HF Trainer")
    assert re.search(r"share of peak \d+%", output)


@pytest.mark.parametrize("script, args, line", [
    ("accumulation_fold.py", ("--model", "lf-tiny-qwen3", "--steps", "2", "--repeats", "1"), "folded vs split"),
    ("sft_throughput.py", ("--steps", "2", "--repeats", "1"), "lf-assistant padded vs HF Trainer"),
])
def test_recipe_and_throughput_benchmarks_print_their_ratio(script, args, line):
    ratio(run(script, *args), line)


def test_profile_step_splits_a_step_into_its_phases():
    output = run("profile_step.py", "--steps", "1", "--warmup", "0")
    assert re.search(r"\d+ tok/s", output)
    phases = {line.split()[0] for line in output.splitlines() if line.split()[:1] in (
        ["data"], ["forward"], ["backward"], ["optimizer"])}
    assert phases == {"data", "forward", "backward", "optimizer"}


def test_cpu_bf16_compares_or_says_why_it_cannot():
    from engine.devices import cpu_bf16_units

    script = [sys.executable, str(REPO / "benchmarks" / "cpu_bf16.py"), "--model", "lf-tiny-qwen3", "--steps", "2",
              "--repeats", "1"]
    done = subprocess.run(script, cwd=REPO, capture_output=True, text=True, timeout=600)
    if cpu_bf16_units():
        assert done.returncode == 0, done.stderr[-2000:]
        ratio(done.stdout, "bf16 vs fp32")
    else:  # a CPU without bf16 units has nothing to compare, and says so
        assert done.returncode != 0 and "no bf16 units" in done.stderr


def test_no_benchmark_module_shadows_an_installed_one():
    """The scripts put benchmarks/ first on sys.path, so a script named like an installed module hides it from
    every library that imports it (transformers imports the hub's ``kernels`` package when installed)."""
    import importlib.util

    clashes = {path.stem: spec.origin for path in (REPO / "benchmarks").glob("*.py")
               if (spec := importlib.util.find_spec(path.stem)) is not None and Path(spec.origin).parent != path.parent}
    assert not clashes, clashes
