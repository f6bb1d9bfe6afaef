"""Running workers under torchrun (2 processes on gloo) and collecting what each rank measured."""

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def child_env(scratch: Path) -> dict[str, str]:
    """torchrun writes into TMPDIR; one thread per process (2 processes share 2 cores)."""
    scratch.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def run_workers(cases: list[str], model_dir: Path, out: Path, nproc: int = 2,
                timeout: int = 300) -> dict[str, list[dict]]:
    """{case: [rank 0 result, rank 1 result]} from one torchrun start; fails with the ranks' output on error."""
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "--tee=3", str(HERE / "workers.py"), ",".join(cases), str(model_dir), str(out)]
    done = subprocess.run(command, env=child_env(out / "tmp"), capture_output=True, text=True, timeout=timeout,
                          cwd=REPO)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return {case: [json.loads((out / f"{case}-rank{r}.json").read_text()) for r in range(nproc)] for case in cases}
