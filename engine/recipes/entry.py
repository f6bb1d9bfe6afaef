"""The training process: ``python -m engine.recipes.<stage> RUN/<stage>.yaml --run-dir RUN``, for every stage.

It announces its rank, turns SIGTERM/SIGINT into a clean stop at the end of the step, holds the run's ownership
locks (inherited from the launcher, or taken here when started by hand), records its failure in the run folder,
and exits 0 (completed or stopped), 1 (failed) or 2 (a problem the user must fix).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from engine.errors import EngineError
from engine.messages import Message
from engine.ownership import FolderInUse
from engine.runstatus import ProcessIdentity, RunState
from engine.rundir import RunDir
from engine.training.loop import StopFlag


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def announce_rank() -> None:
    """Under torchrun, one line from every rank: the launcher prefixes it, so train.log shows each rank started."""
    if world_size() > 1:
        print(f"rank {rank()} of {world_size()} started (pid {os.getpid()})", file=sys.stderr, flush=True)


def record_failure(run: RunDir, exc: BaseException, prefix: str = "") -> None:
    """Record the first failure only: a later one (another rank dying of the first) would hide the cause. The
    reason is the error's sentence (an engine error's own, else its type and text), with its code where it has
    one (``exit_message``)."""
    if run.read_status().is_terminal:
        return
    if isinstance(exc, EngineError):
        reason, said = prefix + str(exc), exc.message
    else:
        reason = f"{prefix}{type(exc).__name__}: {exc}"
        said = Message("run.crashed", reason.removeprefix(prefix), {"kind": type(exc).__name__, "error": str(exc)})
    if said is not None and prefix:
        said = Message("run.on_rank", reason, {"rank": rank(), "said": said})
    run.append_event("failed", reason=reason)
    run.update_status(state=RunState.FAILED, finished_at=time.time(), exit_reason=reason,
                      exit_message=said.to_dict() if said is not None else None)


def main(stage: str, argv: list[str] | None = None) -> int:
    """Entry point of a detached training process for ``stage``."""
    from engine.config import load_config
    from engine.recipes import run_stage

    parser = argparse.ArgumentParser(description=f"Train stage {stage} from a run folder's YAML config.")
    parser.add_argument("config", help=f"the run's {stage}.yaml")
    parser.add_argument("--run-dir", help="run folder (default: the config's folder)")
    args = parser.parse_args(argv)
    announce_rank()
    run = RunDir(Path(args.run_dir) if args.run_dir else Path(args.config).resolve().parent)
    stop = StopFlag()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stop.request(signal.Signals(signum).name))
    prefix = f"rank {rank()}: " if world_size() > 1 else ""
    locks = []
    try:
        config = load_config(args.config)
        if rank() == 0:
            locks = hold_ownership(run, config)
            started = run.read_status().started_at or time.time()
            run.update_status(state=RunState.RUNNING, started_at=started)
        if config.stage != stage:
            raise EngineError(f"{args.config} asks for stage {config.stage}, but this is the {stage} recipe.")
        status = run_stage(config, run, stop=stop)
    except FolderInUse as exc:  # another live process owns this run: its status is not ours to touch
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except EngineError as exc:
        record_failure(run, exc, prefix)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BaseException as exc:  # noqa: BLE001 - record every death in status.json before exiting
        record_failure(run, exc, prefix)
        traceback.print_exc()
        return 1
    finally:
        for lock in locks:
            lock.release()
    return 0 if status.state in (RunState.COMPLETED, RunState.STOPPED) else 1


def hold_ownership(run: RunDir, config) -> list:
    """The run folder's and output_dir's locks: inherited from the launcher, or taken now when this process was
    started by hand (``lf-assistant launch --print`` commands). Records who runs the training if nobody did."""
    from engine.ownership import HELD_LOCKS_ENV, acquire

    locks = []
    # Started by our launcher through torchrun: torchrun itself holds the locks for the whole run.
    if not (os.environ.get(HELD_LOCKS_ENV) and os.environ.get("TORCHELASTIC_RUN_ID")):
        locks.append(acquire(run.path, run_id=run.run_id, what="run folder"))
        if config.output_dir:
            locks.append(acquire(config.output_dir, run_id=run.run_id, what="output_dir"))
    if run.read_status().process is None:
        pid = os.getppid() if os.environ.get("TORCHELASTIC_RUN_ID") else os.getpid()
        run.update_status(process=ProcessIdentity.of(pid))
    return locks
