"""Starting a run on several processes: torchrun commands for this machine, for N nodes, and a SLURM script.

One process: ``python -m engine.recipes.sft RUN/sft.yaml --run-dir RUN``. Several on this machine:
``python -m torch.distributed.run --standalone --nproc-per-node K --tee 3 --module engine.recipes.sft ...`` (a
free port is picked, so runs side by side do not clash). N nodes: the same per node with a static rendezvous
(``--nnodes N --node-rank i --rdzv-endpoint HEAD:PORT``), so node 0 hosts rank 0, the one writer of the run folder.
``--tee 3`` copies every rank's stdout and stderr into the launcher's output (train.log), each line prefixed with
``[default<local rank>]:``.

The process count per node comes from the GPU choice saved in the run folder (device.json: one process per GPU)
or, on CPU, from ``nproc_per_node`` (config key or argument); a count that differs from the chosen GPUs is
refused (engine.devices.check_process_count). No torch import here: the CLI prints these instantly.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from engine.data.text import escape_control
from engine.errors import ConfigError
from engine.runstatus import STAGES

DEFAULT_PORT = 29500
HEAD_PLACEHOLDER = "HEAD_NODE_ADDRESS"


@dataclass
class LaunchPlan:
    """How a prepared run folder is started: processes, nodes, rendezvous and environment."""

    run_dir: Path
    stage: str = "sft"
    nproc_per_node: int = 1
    nnodes: int = 1
    master_addr: str = HEAD_PLACEHOLDER
    """The head node's address, reachable from every node (multi-node only)."""
    master_port: int = DEFAULT_PORT
    env: dict[str, str] = field(default_factory=dict)
    """Variables the processes need: the visible GPUs, threads per process."""

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    @property
    def config_path(self) -> Path:
        return Path(self.run_dir) / f"{self.stage}.yaml"

    def recipe_args(self) -> list[str]:
        return [f"engine.recipes.{self.stage}", str(self.config_path), "--run-dir", str(self.run_dir)]

    def local_command(self, python: str | None = None) -> list[str]:
        """The command that runs the whole (single-node) run from this machine."""
        python = python or sys.executable
        if self.nnodes > 1:
            raise ConfigError(f"This run spans {self.nnodes} nodes: start `node_command(i)` on each node "
                              "(lf-assistant launch CONFIG --nnodes N --print shows them).")
        if self.world_size == 1:
            return [python, "-m", *self.recipe_args()]
        return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={self.nproc_per_node}",
                "--tee=3", "--module", *self.recipe_args()]

    def node_command(self, node_rank: str | int, launcher: tuple[str, ...] = ("torchrun",)) -> list[str]:
        """The command for node ``node_rank`` (an int, or a shell variable such as "$SLURM_NODEID")."""
        return [*launcher, f"--nnodes={self.nnodes}", f"--nproc-per-node={self.nproc_per_node}",
                f"--node-rank={node_rank}", f"--rdzv-endpoint={self.master_addr}:{self.master_port}", "--tee=3",
                "--module", *self.recipe_args()]

    def env_prefix(self) -> str:
        return " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))

    def describe(self) -> str:
        """Shell text a user can paste: one command per node, and what must be true for it to work."""
        prefix = self.env_prefix() + " " if self.env else ""
        lines = [f"# {self.world_size} process(es): {self.nnodes} node(s) x {self.nproc_per_node} per node",
                 "# Run from an lf-assistant checkout with its virtual environment active."]
        if self.nnodes == 1:
            lines.append(prefix + shlex.join(self.local_command(python="python")))
            return "\n".join(lines)
        lines.append(f"# The run folder {_comment(self.run_dir)} must be reachable at that path on every node "
                     "(shared filesystem); node 0 writes its metrics and status.")
        if self.master_addr == HEAD_PLACEHOLDER:
            lines.append(f"# Replace {HEAD_PLACEHOLDER} with node 0's address (port {self.master_port} open).")
        for node in range(self.nnodes):
            lines.append(f"# node {node}:")
            lines.append(prefix + shlex.join(self.node_command(node)))
        return "\n".join(lines)

    def sbatch_script(self, job_name: str | None = None, gpus_per_node: int | None = None) -> str:
        """A SLURM batch script: one torchrun task per node, rendezvous on the first node of the allocation.

        Quoting, proved in one place: every value is quoted exactly once with shlex.quote (the inner torchrun
        command), and that inner command is quoted once more as the single argument of `bash -c`, so each task
        expands only the two variables meant for it ($SLURM_NODEID, $HEAD_NODE) and nothing from a path or a name.
        """
        job_name = _slurm_word(job_name or f"lfa-{Path(self.run_dir).name}")
        gpus = gpus_per_node if gpus_per_node is not None else (self.nproc_per_node if self.uses_gpus else 0)
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(self.env.items())
                          if not k.endswith("VISIBLE_DEVICES"))  # SLURM sets the visible GPUs itself
        log = f"{self.run_dir}/slurm-%j.log"
        plain_log = _SLURM_PLAIN.fullmatch(str(self.run_dir)) is not None
        return (
            "#!/bin/bash\n"
            f"#SBATCH --job-name={job_name}\n"
            f"#SBATCH --nodes={int(self.nnodes)}\n"
            "#SBATCH --ntasks-per-node=1\n"
            + (f"#SBATCH --gpus-per-node={int(gpus)}\n" if gpus else "")
            + (f"#SBATCH --output={log}\n" if plain_log else "")
            + "set -euo pipefail\n"
            # A folder name SLURM's #SBATCH parser cannot take (spaces, quotes, %) is redirected by the shell.
            + ("" if plain_log else
               f"exec >>{shlex.quote(str(self.run_dir))}/slurm-\"$SLURM_JOB_ID\".log 2>&1\n")
            + "HEAD_NODE=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
            "export HEAD_NODE\n"
            + exports
            + f"srun bash -c {shlex.quote(self.task_command())}\n"
        )

    def task_command(self) -> str:
        """The shell command each SLURM task runs: torchrun with this node's rank and the head node's address."""
        words = [shlex.quote(word) for word in self.node_command(0)]
        words[words.index("--node-rank=0")] = '--node-rank="$SLURM_NODEID"'
        endpoint = shlex.quote(f"--rdzv-endpoint={self.master_addr}:{self.master_port}")
        words[words.index(endpoint)] = f'--rdzv-endpoint="$HEAD_NODE":{int(self.master_port)}'
        return "exec " + " ".join(words)

    @property
    def uses_gpus(self) -> bool:
        return any(k.endswith("VISIBLE_DEVICES") for k in self.env)


# Paths SLURM's #SBATCH line parser reads as one word with no pattern characters (% starts one).
_SLURM_PLAIN = re.compile(r"[A-Za-z0-9._/+,=@-]+")


def _slurm_word(text: str) -> str:
    """A job name made of characters every SLURM version and shell take as they are."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", text)[:100] or "lfa"


def _comment(value: object) -> str:
    """`value` for a shell comment: a newline in a path would end the comment and start a command."""
    return escape_control(str(value), keep_layout=False)


def plan_launch(run_dir: str | Path, stage: str = "sft", *, nproc_per_node: int | None = None, nnodes: int = 1,
                master_addr: str = HEAD_PLACEHOLDER, master_port: int = DEFAULT_PORT,
                cpu_count: int | None = None) -> LaunchPlan:
    """The plan for a prepared run folder: its GPU choice (device.json) and config decide the process count."""
    from engine.devices import check_process_count, load_choice

    if stage not in STAGES:  # it names the module to run and the config file: a stage, nothing else
        raise ConfigError(f"stage {stage!r} is not a training stage; valid stages: {', '.join(STAGES)}.")
    run_dir = Path(run_dir)
    choice = load_choice(run_dir)
    gpus = choice is not None and choice.platform != "cpu"
    nproc = nproc_per_node or _config_nproc(run_dir / f"{stage}.yaml") or (choice.nproc if gpus else 1)
    if nproc < 1 or nnodes < 1:
        raise ConfigError(f"nproc_per_node ({nproc}) and nnodes ({nnodes}) must be at least 1.")
    env = dict(choice.env()) if gpus else {}
    if gpus:
        check_process_count(choice, nproc)
    if nproc * nnodes > 1 and "OMP_NUM_THREADS" not in os.environ:
        # Processes on one node share its cores; torchrun would otherwise force 1 thread each.
        env["OMP_NUM_THREADS"] = str(max(1, (cpu_count or os.cpu_count() or 1) // nproc))
    return LaunchPlan(run_dir=run_dir, stage=stage, nproc_per_node=nproc, nnodes=nnodes, master_addr=master_addr,
                      master_port=master_port, env=env)


def _config_nproc(config_path: Path) -> int | None:
    """``nproc_per_node`` from the run's config, when it sets one (the way to ask for N CPU processes)."""
    if not config_path.is_file():
        return None
    from engine.config import read_yaml

    value = read_yaml(config_path).get("nproc_per_node")
    return int(value) if value else None
