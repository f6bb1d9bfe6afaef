"""Runs the Triton kernel tests (`interpreted_triton_ops.py`) on CPU in a fresh process under TRITON_INTERPRET=1.

A fresh process because the interpreter must be switched on before anything imports `triton`, and in this session
peft or torch may already have. The child's JUnit report is read back so a failure names the failing test.
"""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest.importorskip("triton")

HERE = Path(__file__).resolve().parent


def test_triton_kernels_match_their_references_under_the_interpreter(tmp_path):
    report = tmp_path / "report.xml"
    command = [sys.executable, "-m", "pytest", str(HERE / "interpreted_triton_ops.py"), "-q", "-p", "no:cacheprovider",
               "-p", "no:randomly", f"--junitxml={report}"]
    result = subprocess.run(command, cwd=HERE.parents[1], env={**os.environ, "TRITON_INTERPRET": "1"},
                            capture_output=True, text=True, timeout=1200)
    failed = []
    for case in ET.parse(report).getroot().iter("testcase"):
        problems = [e for e in (case.find("failure"), case.find("error")) if e is not None]  # Elements are falsy
        failed += [f"{case.get('name')}: {problem.get('message', '')[:300]}" for problem in problems]
    output = result.stdout[-4000:] + result.stderr[-2000:]
    assert result.returncode == 0 and not failed, "\n".join(failed) + "\n" + output
    tests = int(ET.parse(report).getroot().find("testsuite").get("tests"))
    assert tests >= 30, f"only {tests} interpreted tests ran:\n{result.stdout[-2000:]}"
