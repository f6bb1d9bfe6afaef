"""The guided TUI: one screen per stage of the skill, a progress board on each, state saved after every answer.

`run_app()` is what `lf-assistant` (bare), `lf-assistant --resume RUN_ID` and `lf-assistant runs --tui` call.
The app never trains, downloads or infers in its own process, and never imports torch: heavy work runs in
child processes, watched from thread workers that post messages (assistant.tui.messages).
"""

from __future__ import annotations

import os
import subprocess
import threading
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from textual import work
from textual.app import App
from textual.binding import Binding

from assistant.command import self_command
from assistant.i18n import detect_language, set_language, t, t_message
from assistant.tui.messages import AvailabilityChecked, BrowserStarted, FetchProgressed
from assistant.tui.screens.base import NO_BACK_STAGES
from assistant.wizard.skill import WORKFLOW_SKILLS, Skill, load_skill, skill_for
from assistant.wizard.stages import model as model_stage
from assistant.wizard.state import WizardState, new_state, rename_for_model, run_path, save_state

DetectDevices = Callable[[], Any]


def _default_detector() -> Any:
    from assistant.wizard.stages.gpu import detect_in_subprocess

    return detect_in_subprocess()


def fetch_text(progress, human_bytes) -> str:
    """A download's progress in a few words for the board: the share while bytes arrive, then the step the
    package source is on (checking, extracting, importing) once they are all here, whole: a GGUF import's own step
    follows its colon (importing (2/5): dequantizing the weights: tensor 3 of 24)."""
    total, done = progress.total_bytes, progress.downloaded_bytes
    phase = getattr(progress, "phase_message", None)  # the step in the interface language, where it has a code
    if total and done < total:
        line = t("fetch.progress", share=f"{100 * done / total:.0f}%", size=human_bytes(total),
                 rate=human_bytes(progress.rate_bps))
        slow = isinstance(phase, dict) and str(phase.get("code", "")).startswith("download.slow")
        return line + "\n" + t_message(phase) if slow else line  # the advice to switch hub, under the share
    message = (t_message(phase, progress.message or "") if phase else (progress.message or "")).strip()
    if total and message and not message.startswith(("downloading", "asking", "fetching")):
        return t("fetch.phase", step=message)
    return t("fetch.progress", share="", size=human_bytes(done), rate=human_bytes(progress.rate_bps))


class WizardApp(App):
    """The wizard. `state` is the single source of truth for answers; screens change it only via commit/advance."""

    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "lf-assistant"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [Binding("ctrl+q", "quit_wizard", show=False, priority=True),
                Binding("f2", "review", show=False)]

    def __init__(self, *, runs_dir: str | Path | None = None, resume: str | None = None, lang: str | None = None,
                 review: bool = False, detect_devices: DetectDevices | None = None, skill: Skill | None = None,
                 online: bool | None = None, now: datetime | None = None) -> None:
        self.lang = set_language(detect_language(lang))
        self.lang_flag = lang
        """--lang as given: a resumed session keeps its own language unless this says otherwise."""
        super().__init__()
        from engine.rundir import runs_root

        self.runs_dir = runs_root(runs_dir).resolve()
        self.resume_id, self.review_mode = resume, review
        self.detect_devices = detect_devices or _default_detector
        self.skill = skill or load_skill("sft")
        self.online = online
        """None: decide from HF_HUB_OFFLINE and a quick probe; tests pass False."""
        self.now = now
        """The time the new run's id is stamped with (None: now); snapshot tests fix it."""
        self.state: WizardState | None = None
        self.resume_action: str | None = None
        self.resume_status: dict = {}
        self.fetch_text: str | None = None
        self.device_report: Any = None
        self.exit_hint: str | None = None
        self.availability: Any = None
        """engine.models.availability's answer for the skill's real model (None until it answered)."""

    # ------------------------------------------------------------------ start
    def on_mount(self) -> None:
        if self.review_mode:
            from assistant.tui.screens.review import RunsScreen

            self.push_screen(RunsScreen())
            return
        self.check_availability()
        if self.resume_id:
            self._open_resumed(self.resume_id)
            return
        # Nothing is written until the first answer: a launch that is quit at once leaves no folder behind.
        self.state = new_state(lang=self.lang, now=self.now, runs_dir=self.runs_dir)
        self.goto(self.skill.stage_ids[0], first=True)

    @work(thread=True, group="availability")
    def check_availability(self) -> None:
        """Whether the real model can be had (a cached copy, a hub, the package index): asked once, at start, so
        the answer is there by the model stage. Tests (online=False) look at this machine only."""
        probe = self.online is not False  # HF_HUB_OFFLINE stops the hubs only: the package index is still asked
        self.post_message(AvailabilityChecked(model_stage.check_availability(self.skill, probe_network=probe)))

    def on_availability_checked(self, message: AvailabilityChecked) -> None:
        self.availability = message.availability
        if hasattr(self.screen, "availability_changed"):
            self.screen.availability_changed()

    def _open_resumed(self, run_id: str) -> None:
        from engine.errors import EngineError
        from engine.rundir import find_run

        from assistant.wizard.resume import plan_resume

        try:
            folder = find_run(run_id, self.runs_dir, prefix=False).path
            self._skill_of_run(folder)
            plan = plan_resume(folder, self.skill)
        except EngineError as exc:
            self.exit_hint = str(exc)
            self.exit(return_code=2)
            return
        self.state, self.resume_action, self.resume_status = plan.state, plan.action, plan.status
        if not self.lang_flag and self.state.lang:  # the session's own language, unless --lang says otherwise
            self.lang = set_language(self.state.lang)
        if self.state.download.get("state") == "running":  # the download died with the previous session
            self.state = self.state.replace(download=dict(self.state.download, state="failed",
                                                          error=t("model.download_interrupted")))
        save_state(self.state, self.runs_dir)
        self.goto(plan.stage, first=True)

    def _skill_of_run(self, folder: Path) -> None:
        """A resumed run continues under the skill of the workflow it was started with (SFT or preference)."""
        from assistant.wizard.state import STATE_FILE, load_state

        if (folder / STATE_FILE).is_file():
            workflow = load_state(folder).workflow or "sft"
            if WORKFLOW_SKILLS.get(workflow) != self.skill.name:
                self.skill = skill_for(workflow)

    def use_skill(self, skill: Skill) -> None:
        """Switch workflow (stage 0's first question): every later stage follows the new skill."""
        self.skill = skill
        self.refresh_board()

    # ------------------------------------------------------------------ state and navigation
    @property
    def run_folder(self) -> Path:
        return run_path(self.state, self.runs_dir)

    @property
    def started(self) -> bool:
        """Something was answered (or this is a resumed run): the session has a folder to come back to."""
        return bool(self.state and (self.state.done or self.resume_id))

    def commit(self, state: WizardState) -> None:
        """Adopt a new state and save it (atomically) at once: quitting at any point loses nothing."""
        self.state = state
        if self.started:
            save_state(state, self.runs_dir)
        self.refresh_board()

    def goto(self, stage_id: str, *, first: bool = False) -> None:
        from assistant.tui.screens import screen_for

        self.commit(self.state.replace(stage=stage_id))
        screen = screen_for(stage_id)
        if first:
            self.push_screen(screen)
        else:
            self.switch_screen(screen)

    def advance(self, stage_id: str, state: WizardState, notes: list[str] | None = None) -> None:
        """Mark a stage done and open the next applicable one."""
        done = [*[s for s in state.done if s != stage_id], stage_id]
        state = state.replace(done=done)
        if stage_id == "model":
            state = self._rename(state)
        self.commit(state)
        following = self.skill.next_stage(stage_id, state.answers())
        for note in notes or []:
            self.notify(note, severity="warning", timeout=8)
        if following is not None:
            self.goto(following)

    def _rename(self, state: WizardState) -> WizardState:
        renamed = rename_for_model(state, self.runs_dir)
        return renamed

    def go_back(self) -> None:
        """Back to the previous stage, until training was launched (its config is then fixed)."""
        if self.state.launched or self.state.stage in NO_BACK_STAGES:
            self.notify(t("app.no_back"), severity="information")
            return
        previous = self.skill.previous_stage(self.state.stage, self.state.answers())
        if previous is not None:
            self.goto(previous)

    def refresh_board(self) -> None:
        screen = self.screen if self.screen_stack else None
        if screen is not None and hasattr(screen, "refresh_board"):
            screen.refresh_board()

    def device_label(self) -> str:
        device = self.state.device if self.state else None
        if not device:
            return t("board.device_unset")
        if device["platform"] == "cpu":
            return "CPU"
        return f"{device['platform'].upper()} {','.join(map(str, device['indices']))}"

    # ------------------------------------------------------------------ background model fetch
    def start_fetch(self, plan: model_stage.FetchPlan, source: str) -> None:
        """Download (or build) the model in the background; progress shows on every screen's board."""
        self.commit(self.state.replace(download={"target": str(plan.target), "source": source, "state": "running",
                                                 "kind": plan.kind}, model_source=source))
        self.fetch_text = t("fetch.starting")
        self.refresh_board()
        if plan.kind == "build":
            self._build_demo(plan)
        else:
            self._download(plan, source)

    @work(thread=True, group="fetch")
    def _build_demo(self, plan: model_stage.FetchPlan) -> None:
        self.post_message(FetchProgressed(t("fetch.building", name=plan.repo_id)))
        command = model_stage.build_command(plan.repo_id, plan.target)
        result = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        error = None if result.returncode == 0 else (result.stderr.strip().splitlines() or ["?"])[-1]
        self.post_message(FetchProgressed(t("fetch.built") if error is None else t("fetch.failed", error=error),
                                          done=True, ok=error is None, error=error, target=plan.target))

    @work(thread=True, group="fetch")
    def _download(self, plan: model_stage.FetchPlan, source: str) -> None:
        from engine.errors import EngineError
        from engine.models.cache import human_bytes
        from engine.models.download import start_download

        finished = threading.Event()

        def on_progress(progress) -> None:
            if progress.done:
                ok = progress.error is None
                text = t("fetch.done") if ok else t("fetch.failed", error=t_message(progress.error_message,
                                                                                   progress.error))
                self.post_message(FetchProgressed(text, done=True, ok=ok, error=progress.error, target=plan.target,
                                                  error_message=progress.error_message))
                finished.set()
                return
            self.post_message(FetchProgressed(fetch_text(progress, human_bytes)))

        try:
            start_download(plan.repo_id, source=source, out_dir=plan.target, on_progress=on_progress)
        except EngineError as exc:
            coded = exc.message.to_dict() if exc.message else None
            self.post_message(FetchProgressed(t("fetch.failed", error=t_message(coded, str(exc))), done=True,
                                              ok=False, error=str(exc), target=plan.target, error_message=coded))

    def on_fetch_progressed(self, message: FetchProgressed) -> None:
        self.fetch_text = message.text
        if message.done:
            self.commit(model_stage.fetch_finished(self.state, Path(message.target), ok=message.ok,
                                                   error=message.error, error_message=message.error_message))
            if message.ok:
                self.fetch_text = None
                self.notify(t("fetch.ready"), timeout=5)
        self.refresh_board()
        if hasattr(self.screen, "fetch_changed"):
            self.screen.fetch_changed()

    # ------------------------------------------------------------------ moving into a browser
    def open_in_browser(self) -> None:
        """Stage 0's "open in a browser": start `lf-assistant web`, then leave the terminal with its URL. The
        state is saved, and the page's wizard reopens this (the newest unfinished) session."""
        if self.is_web:
            self.notify(t("app.already_browser"), timeout=6)
            return
        self.notify(t("app.browser_starting"), timeout=20)
        self._start_web()

    @work(thread=True, group="web")
    def _start_web(self) -> None:
        from engine.errors import EngineError

        from assistant.cli.web import start_detached

        try:
            url, log, pid = start_detached(self.runs_dir, self.lang)
        except (EngineError, OSError) as exc:
            self.post_message(BrowserStarted(error=str(exc)))
            return
        self.post_message(BrowserStarted(url, log, pid))

    def on_browser_started(self, message: BrowserStarted) -> None:
        if message.error:
            self.notify(t("app.browser_failed", error=message.error), severity="error", timeout=15)
            return
        save_state(self.state, self.runs_dir)
        self.exit_hint = t("app.browser_hint", url=message.url, log=message.log, pid=message.pid)
        self.exit()

    # ------------------------------------------------------------------ keys
    def action_quit_wizard(self) -> None:
        if self.state is not None and self.started:
            save_state(self.state, self.runs_dir)
            self.exit_hint = t("app.resume_hint", command=self_command(), run_id=self.state.run_id)
            if self._training_goes_on():
                self.exit_hint = t("app.training_goes_on", run_id=self.state.run_id) + "\n" + self.exit_hint
        self.exit()

    def _training_goes_on(self) -> bool:
        """Whether this wizard's training process is still running (it does not stop with the TUI)."""
        from engine.rundir import RunDir
        from engine.runstatus import RunState

        if not self.state.launched or not self.state.run_id:
            return False
        folder = Path(self.runs_dir) / self.state.run_id
        return folder.is_dir() and RunDir(folder).read_status().state == RunState.RUNNING

    def action_review(self) -> None:
        from assistant.tui.screens.review import RunsScreen

        self.push_screen(RunsScreen())

    def reopen_session(self, run_id: str) -> None:
        """Leave the runs review for wizard session `run_id`, at the stage it was left (as `--resume` opens it);
        the session open until now is saved first. Not while this session fetches its model: the fetch reports
        into the session that started it."""
        if self.state is not None and run_id == self.state.run_id:
            self.pop_screen()  # the session already open: back to it
            return
        if self.state is not None and self.state.download.get("state") == "running":
            self.notify(t("review.fetch_running"), severity="warning", timeout=8)
            return
        if self.state is not None and self.started:
            save_state(self.state, self.runs_dir)
        while len(self.screen_stack) > 1:
            self.pop_screen()
        if self.review_mode:  # opened as `runs --tui`: nothing asked the model's availability yet
            self.review_mode = False
            self.check_availability()
        self.resume_id = run_id
        self._open_resumed(run_id)


def run_app(*, resume: str | None = None, lang: str | None = None, runs_dir: str | Path | None = None,
            review: bool = False) -> None:
    """Run the TUI in the terminal; after it closes, print how to come back to the run.

    An unknown RUN_ID raises EngineError before the screen opens (the CLI prints it without a traceback).
    """
    if resume:
        from engine.rundir import find_run

        find_run(resume, runs_dir, prefix=False)  # it may resume training: the whole id, as resume-train
    app = WizardApp(runs_dir=runs_dir, resume=resume, lang=lang, review=review)
    app.run()
    served = "web_driver" in os.environ.get("TEXTUAL_DRIVER", "")  # textual-serve's page: stdout is its channel
    if app.exit_hint and not served:
        print(app.exit_hint)
