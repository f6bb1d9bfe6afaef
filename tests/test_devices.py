"""GPU detection from recorded tool outputs served by fake executables on PATH, selection, and the launch env."""

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.devices import (
    DeviceChoice,
    DeviceReport,
    auto_choice,
    check_process_count,
    detect_devices,
    load_choice,
    make_choice,
    parse_amd_smi_monitor,
    parse_nvidia_smi,
    parse_rocm_smi_csv,
    save_choice,
    selection_advice,
)
from engine.errors import DeviceError

SMI = Path(__file__).parent / "assets" / "smi"
CAT, SLEEP = shutil.which("cat"), shutil.which("sleep")


class FakeTools:
    """Writes fake vendor tools into a bin folder; `env` has only that folder on PATH."""

    def __init__(self, root: Path):
        self.bin = root / "bin"
        self.bin.mkdir()
        self.env = {"PATH": str(self.bin)}

    def add(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(0o755)

    def prints(self, name: str, asset: str, exit_code: int = 0) -> None:
        self.add(name, f"{CAT} '{SMI / asset}'\nexit {exit_code}")

    def nvidia(self, gpus: str, apps: str) -> None:
        self.add("nvidia-smi", f'case "$*" in\n  *query-compute-apps*) {CAT} \'{SMI / apps}\' ;;\n'
                               f"  *) {CAT} '{SMI / gpus}' ;;\nesac")


@pytest.fixture()
def tools(tmp_path) -> FakeTools:
    return FakeTools(tmp_path)


def test_nvidia_mixed_free_and_busy_with_processes(tools):
    tools.nvidia("nvidia_smi_4gpu_mixed.csv", "nvidia_smi_4gpu_apps.csv")
    report = detect_devices(env=tools.env, probe_torch=False)
    assert (report.platform, report.tool) == ("cuda", "nvidia-smi")
    assert [g.index for g in report.gpus] == [0, 1, 2, 3]
    assert [g.index for g in report.free] == [0, 2]  # GPU 3: 3% busy but 1.2 GiB held -> busy
    busy = report.gpus[1]
    assert (busy.memory_used_mib, busy.memory_total_mib, busy.utilization_pct) == (61447, 81920, 97.0)
    assert busy.processes == ["python3 (pid 48211, 60.0 GiB)", "[Not Found] (pid 48390)"]
    assert "busy (60.0 of 80.0 GiB used, 97% busy) by python3 (pid 48211" in busy.describe()
    assert report.gpus[3].processes == ["python (pid 9921, 1.2 GiB)"]
    assert report.gpus[0].describe().startswith("GPU 0 NVIDIA A100-SXM4-80GB: free")
    advice = selection_advice(report)
    assert (advice.kind, advice.candidates) == ("ask_single_or_multi", [0, 2])
    assert auto_choice(report) is None


def test_one_free_gpu_is_used_without_asking(tools):
    tools.nvidia("nvidia_smi_1gpu_free.csv", "nvidia_smi_no_apps.csv")
    report = detect_devices(env=tools.env, probe_torch=False)
    assert report.gpus[0].name == "NVIDIA GeForce RTX 4090" and report.gpus[0].free
    assert selection_advice(report).kind == "single"
    assert auto_choice(report) == DeviceChoice("cuda", [0])


def test_amd_smi_rocm6_layout(tools):
    tools.prints("amd-smi", "amd_smi_monitor_rocm6_8gpu.txt")
    tools.nvidia("nvidia_smi_1gpu_free.csv", "nvidia_smi_no_apps.csv")  # never reached: amd-smi answers first
    report = detect_devices(env=tools.env, probe_torch=False)
    assert (report.platform, report.tool, len(report.gpus)) == ("rocm", "amd-smi", 8)
    assert [g.index for g in report.free] == [0, 2, 4, 5, 7]  # 6 holds 9.6 GiB at 2% util: busy
    assert (report.gpus[1].memory_used_mib, report.gpus[1].memory_total_mib) == (171220, 196300)
    assert report.gpus[1].utilization_pct == 99.0 and report.gpus[1].vendor == "amd"


def test_amd_smi_rocm7_layout():
    gpus = parse_amd_smi_monitor((SMI / "amd_smi_monitor_rocm7_2gpu.txt").read_text())
    assert [(g.memory_used_mib, g.memory_total_mib, g.utilization_pct) for g in gpus] == [
        (2765, 16384, 16.0),
        (307, 16384, 0.0),
    ]
    assert [g.free for g in gpus] == [False, True]


def test_rocm_smi_used_when_amd_smi_output_is_not_understood(tools):
    tools.prints("amd-smi", "amd_smi_not_a_table.txt")
    tools.prints("rocm-smi", "rocm_smi_2gpu.csv")
    report = detect_devices(env=tools.env, probe_torch=False)
    assert report.tool == "rocm-smi"
    assert any(n.startswith("amd-smi: output not understood") for n in report.notes)
    assert [(g.index, g.name, g.memory_total_mib, g.free) for g in report.gpus] == [
        (0, "AMD Instinct MI210", 65520, True),
        (1, "AMD Instinct MI210", 65520, False),
    ]
    assert report.gpus[1].memory_used_mib == 49152 and report.gpus[1].utilization_pct == 100.0


def test_hanging_tool_is_killed_at_the_timeout(tools):
    tools.add("amd-smi", f"{SLEEP} 30")  # a child process holding the pipe, as a wedged driver call would
    tools.nvidia("nvidia_smi_1gpu_free.csv", "nvidia_smi_no_apps.csv")
    start = time.perf_counter()
    report = detect_devices(timeout_s=0.5, env=tools.env, probe_torch=False)
    assert time.perf_counter() - start < 5.0
    assert report.tool == "nvidia-smi"
    assert "amd-smi: no answer within 0.5 s (driver busy or hung); skipped" in report.notes


def test_driver_failure_and_malformed_output_fall_back_to_cpu(tools):
    tools.prints("nvidia-smi", "nvidia_smi_driver_failure.txt", exit_code=9)
    report = detect_devices(env=tools.env, probe_torch=False)
    assert (report.platform, report.gpus, report.tool) == ("cpu", [], "none")
    assert report.notes[0].startswith("nvidia-smi: exit code 9 (NVIDIA-SMI has failed")
    tools.prints("nvidia-smi", "nvidia_smi_truncated.csv")
    report = detect_devices(env=tools.env, probe_torch=False)
    assert report.platform == "cpu" and "nvidia-smi: output not understood" in report.notes[0]
    advice = selection_advice(report)
    assert advice.kind == "cpu" and "CPU" in advice.message
    assert auto_choice(report) == DeviceChoice("cpu", [])


def test_no_tools_at_all(tmp_path):
    report = detect_devices(env={"PATH": str(tmp_path)}, probe_torch=False)
    assert (report.platform, report.tool, report.notes) == ("cpu", "none", [])


CPUINFO = """processor\t: 0
model name\t: Some CPU
flags\t\t: fpu sse sse2 avx2 {extra}
bugs\t\t: spectre_v1

processor\t: 1
flags\t\t: fpu sse sse2 avx2 {extra}
"""


@pytest.mark.parametrize("extra, units", [
    ("avx512f avx512_bf16 amx_tile amx_bf16 amx_int8", "AMX-BF16"),
    ("avx512f avx512_bf16", "AVX512-BF16"),
    ("avx512f avx512_vnni", None),  # AVX-512 alone emulates bf16, slower than fp32
    ("", None),
])
def test_cpu_bf16_units_read_from_the_cpu_flags(extra, units):
    from engine.devices import cpu_bf16_units

    assert cpu_bf16_units(CPUINFO.format(extra=extra)) == units
    assert cpu_bf16_units("model name : amx_bf16 in a name is not a flag") is None


def test_a_cpu_report_names_the_cpus_bf16_units(tmp_path, monkeypatch):
    from engine import devices

    monkeypatch.setattr(devices, "cpu_bf16_units", lambda: "AMX-BF16")
    report = detect_devices(env={"PATH": str(tmp_path)}, probe_torch=False)
    assert report.cpu_bf16 == "AMX-BF16" and report.to_dict()["cpu_bf16"] == "AMX-BF16"


def test_precision_follows_the_device_and_says_why_it_differs(monkeypatch):
    import torch

    from engine.config import TrainConfig
    from engine.training import setup

    def precision(units, **keys):
        monkeypatch.setattr(setup, "cpu_bf16_units", lambda: units)
        return setup.choose_precision(TrainConfig(model_name_or_path="m", **keys))

    assert (precision(None).autocast_dtype, precision(None).note, precision(None).load_dtype) == (None, None, "float32")
    fallback = precision(None, bf16=True)
    assert fallback.autocast_dtype is None and "no bf16 units" in fallback.note and "fp32" in fallback.note
    units = precision("AMX-BF16", bf16=True)
    assert (units.device.type, units.autocast_dtype, units.note, units.load_dtype) == (
        "cpu", torch.bfloat16, None, "bfloat16")
    half = precision("AMX-BF16", fp16=True)  # fp16 has no CPU training path, units or not
    assert half.autocast_dtype is None and half.note.startswith("fp16 was requested")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    old_gpu = precision(None, bf16=True)
    assert old_gpu.autocast_dtype == torch.float16 and "no bf16 support" in old_gpu.note
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    gpu = precision(None, bf16=True)
    assert (gpu.device.type, gpu.autocast_dtype, gpu.note, gpu.load_dtype) == ("cuda", torch.bfloat16, None, "auto")
    assert precision(None, fp16=True).autocast_dtype == torch.float16


def test_torch_fallback(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"Fake GPU {i}")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: ((80 - 40 * i) * 2**30, 80 * 2**30))
    report = detect_devices(env={"PATH": str(tmp_path)})
    assert (report.platform, report.tool) == ("cuda", "torch")
    assert [(g.memory_used_mib, g.free) for g in report.gpus] == [(0, True), (40960, False)]


def test_none_free_asks_and_offers_least_loaded_first(tools):
    tools.nvidia("nvidia_smi_4gpu_mixed.csv", "nvidia_smi_4gpu_apps.csv")
    report = detect_devices(env=tools.env, probe_torch=False)
    for gpu in report.gpus:
        gpu.memory_used_mib += 20_000
    advice = selection_advice(report)
    assert advice.kind == "ask_none_free" and advice.candidates[:2] == [0, 2] and advice.candidates[-1] == 1
    assert "wait" in advice.message and "share" in advice.message


@pytest.mark.parametrize(
    ("choice", "inherited", "expected"),
    [
        (DeviceChoice("cuda", [1, 3]), {}, {"CUDA_VISIBLE_DEVICES": "1,3"}),
        (DeviceChoice("rocm", [2]), {"CUDA_VISIBLE_DEVICES": "0"}, {"HIP_VISIBLE_DEVICES": "2"}),
        (DeviceChoice("cpu", []), {}, {}),
    ],
)
def test_choice_env_reaches_a_launched_process(choice, inherited, expected):
    script = "import json, os; print(json.dumps({k: v for k, v in os.environ.items() if 'VISIBLE_DEVICES' in k}))"
    env = choice.launch_env({"PATH": "/usr/bin:/bin", **inherited})
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == expected
    assert choice.env() == expected


def test_process_count_must_match_the_choice():
    check_process_count(DeviceChoice("cuda", [0, 1]), 2)
    check_process_count(DeviceChoice("cpu", []), 2)  # CPU runs (gloo) pick their own process count
    with pytest.raises(DeviceError, match=r"CUDA_VISIBLE_DEVICES=0,1.*nproc_per_node is 4.*Set nproc_per_node to 2"):
        check_process_count(DeviceChoice("cuda", [0, 1]), 4)
    assert DeviceChoice("rocm", [0, 1, 2]).nproc == 3 and DeviceChoice("cpu", []).nproc == 1


def test_choice_saved_in_the_run_dir(tmp_path):
    assert load_choice(tmp_path) is None
    path = save_choice(DeviceChoice("rocm", [4, 5]), tmp_path / "run")
    assert json.loads(path.read_text())["env"] == {"HIP_VISIBLE_DEVICES": "4,5"}
    assert load_choice(tmp_path / "run") == DeviceChoice("rocm", [4, 5])
    path.write_text("{not json")
    with pytest.raises(DeviceError, match="choose GPUs again"):
        load_choice(tmp_path / "run")
    with pytest.raises(DeviceError, match="platform 'tpu'"):
        DeviceChoice.from_dict({"platform": "tpu"})


def test_make_choice_checks_indices():
    report = DeviceReport("cuda", parse_nvidia_smi((SMI / "nvidia_smi_4gpu_mixed.csv").read_text()), "nvidia-smi")
    assert make_choice(report, [2, 0]) == DeviceChoice("cuda", [2, 0])
    assert make_choice(report, []) == DeviceChoice("cpu", [])
    with pytest.raises(DeviceError, match="GPU 7 does not exist here; detected: 0, 1, 2, 3"):
        make_choice(report, [0, 7])
    with pytest.raises(DeviceError, match="twice"):
        make_choice(report, [1, 1])


def test_parsers_reject_garbage():
    with pytest.raises(ValueError):
        parse_nvidia_smi("0, GPU-x, Tesla T4, lots, 15360, 0")
    with pytest.raises(ValueError, match="no CSV header"):
        parse_rocm_smi_csv("==== ROCm System Management Interface ====")
    with pytest.raises(ValueError, match="values for"):
        parse_amd_smi_monitor("GPU  POWER  VRAM_USED  VRAM_TOTAL\n  0  100 W  283 MB\n")


def _run_gpus_cli(env: dict, *args: str):
    import typer
    from typer.testing import CliRunner

    from assistant.cli.gpus import gpus

    app = typer.Typer()
    app.command()(gpus)
    # rich sizes tables from COLUMNS; 160 keeps each row on one line.
    return CliRunner().invoke(app, list(args), env={**env, "COLUMNS": "160"})


def test_gpus_cli_table_and_json(tools, monkeypatch):
    tools.nvidia("nvidia_smi_4gpu_mixed.csv", "nvidia_smi_4gpu_apps.csv")
    monkeypatch.setenv("PATH", tools.env["PATH"])
    result = _run_gpus_cli(tools.env)
    assert result.exit_code == 0, result.output
    assert "NVIDIA A100-SXM4-80GB" in result.output and "60.0 GiB" in result.output
    assert "busy by python3 (pid 48211" in result.output
    assert "2 GPUs are free (0, 2)" in result.output
    data = json.loads(_run_gpus_cli(tools.env, "--json").output)
    assert data["free"] == [0, 2] and data["advice"]["kind"] == "ask_single_or_multi"
    assert data["gpus"][1]["processes"][0].startswith("python3")


def test_gpus_cli_on_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = _run_gpus_cli({"PATH": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert "No GPU found" in result.output and "fp32" in result.output


@pytest.mark.parametrize("text, said", [
    ("[0, 1]", "must hold a JSON object, not a list"),
    ('"cuda"', "must hold a JSON object, not text"),
    ("[" * 100_000 + "]" * 100_000, "is not valid JSON (nested more than 64 levels deep)"),
], ids=["list", "text", "deep"])
def test_a_saved_choice_that_is_not_an_object_is_refused_naming_the_file(text, said, tmp_path):
    """An AttributeError or a RecursionError once."""
    from engine.devices import DEVICE_CHOICE_FILE, load_choice
    from engine.errors import DeviceError

    (tmp_path / DEVICE_CHOICE_FILE).write_text(text)
    with pytest.raises(DeviceError, match=re.escape(f"{tmp_path / DEVICE_CHOICE_FILE} {said}. Delete it and choose "
                                                    "GPUs again.")):
        load_choice(tmp_path)


def test_a_saved_choice_names_device_numbers_only(tmp_path):
    """device.json is read from disk; its indices reach CUDA_VISIBLE_DEVICES and printed commands."""
    from engine.devices import DEVICE_CHOICE_FILE, load_choice
    from engine.errors import DeviceError

    for indices in (["0;touch /tmp/pwn"], [True], [-1], "0"):
        (tmp_path / DEVICE_CHOICE_FILE).write_text(json.dumps({"platform": "cuda", "indices": indices}))
        with pytest.raises(DeviceError, match="not device numbers"):
            load_choice(tmp_path)
    (tmp_path / DEVICE_CHOICE_FILE).write_text(json.dumps({"platform": "cuda", "indices": [0, 2]}))
    assert load_choice(tmp_path).env() == {"CUDA_VISIBLE_DEVICES": "0,2"}
