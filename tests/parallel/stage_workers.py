"""Every training stage under every multi-process strategy, inside one torchrun start (imports cost ~10 s a process).

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/parallel/stage_workers.py MODEL OUT

For each stage and strategy the shell trains the stage's demo data in this process group and writes nothing but
the run folder and output_dir; the pytest side (test_stage_matrix.py) compares them with single-process runs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch.distributed as dist

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import engine  # noqa: E402
from engine.recipes import run_stage  # noqa: E402
from engine.rundir import RunDir  # noqa: E402
from engine.training.loop import StopFlag  # noqa: E402

STAGE_DATA = {"sft": "identity", "pt": "pt_demo", "rm": "dpo_demo", "dpo": "dpo_demo", "kto": "kto_demo"}
# Global batch: 2 replicas x 2 samples per micro-batch x 1 accumulation (data parallel), or one replica of
# 2 x 2 split along the sequence (sp); the single-process reference takes 2 x 2.
STRATEGIES = {"ddp": {"gradient_accumulation_steps": 1},
              "fsdp2": {"gradient_accumulation_steps": 1, "fsdp": "full_shard"},
              "sp": {"gradient_accumulation_steps": 2, "cp_size": 2}}


def stage_config(stage: str, model_dir: str, out: Path, **over) -> dict:
    values = {"model_name_or_path": model_dir, "stage": stage, "dataset": STAGE_DATA[stage],
              "dataset_dir": str(REPO / "data"), "template": "qwen", "cutoff_len": 64, "max_samples": 8,
              "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "learning_rate": 2e-2,
              "num_train_epochs": 1, "logging_steps": 1, "save_steps": 1, "seed": 7, "plot_loss": False,
              "lr_scheduler_type": "constant", "finetuning_type": "lora", "lora_target": "q_proj,v_proj,o_proj",
              "packing": False, "output_dir": str(out)}
    values.update(over)
    return values


class StopOnRankOne(StopFlag):
    """A stop that only rank 1 sees, from its second step on: every rank must still end on the same step."""

    def __init__(self) -> None:
        super().__init__()
        self.checks = 0

    @property
    def requested(self) -> bool:  # the shell reads it once per step, after the step, when the ranks agree
        self.checks += 1
        return self._requested or (int(os.environ["RANK"]) == 1 and self.checks > 1)

    @requested.setter
    def requested(self, value: bool) -> None:
        self._requested = value


def run_case(name: str, values: dict, out: Path, stop: StopFlag | None = None) -> dict:
    config = engine.load_config(values)
    run = RunDir(out / f"run-{name}")
    run.path.mkdir(parents=True, exist_ok=True)
    status = run_stage(config, run, stop=stop)
    dist.barrier()
    return {"state": str(status.state), "step": status.step}


def main() -> None:
    model_dir, out = sys.argv[1], Path(sys.argv[2])
    stages = sys.argv[3].split(",") if len(sys.argv) > 3 else list(STAGE_DATA)
    rank = int(os.environ.get("RANK", "0"))
    dist.init_process_group("gloo")  # owned here, so each run's strategy leaves it to the next
    results = {}
    for stage in stages:
        for strategy, over in STRATEGIES.items():
            name = f"{stage}-{strategy}"
            results[name] = run_case(name, stage_config(stage, model_dir, out / name, **over), out)
    name = "dpo-stop"
    results[name] = run_case(name, stage_config("dpo", model_dir, out / name, gradient_accumulation_steps=1,
                                                max_steps=6, max_samples=24), out, StopOnRankOne())
    (out / f"results-rank{rank}.json").write_text(json.dumps(results, indent=2))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
