"""Stage 2: the model — a recommended default, a hub id or a local path, resolved to family, template and example;
an unsupported model gets its choices; a missing one is downloaded (or built) in the background."""

from __future__ import annotations

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, Static

from assistant.i18n import t
from assistant.tui.messages import ModelResolved, NetworkProbed
from assistant.tui.screens.base import StageScreen
from assistant.tui.widgets.question import QuestionSet
from assistant.wizard.stages import model
from assistant.wizard.stages.train import display_path


class ModelScreen(StageScreen):
    STAGE = "model"

    def __init__(self) -> None:
        super().__init__()
        self.plan: model.FetchPlan | None = None
        self.resolved = False

    def compose_body(self) -> ComposeResult:
        offline = self.wizard.online is False or model.is_offline()
        recommended = model.recommended_model(self.wizard.skill, offline=offline)
        yield Static(t("model.prompt"), classes="question")
        with Horizontal(classes="row"):
            yield Input(value=self.state.model or recommended, id="model-input")
            yield Button(t("model.check"), id="resolve")
        yield Static(t("model.recommended", model=recommended), id="recommended", classes="hint")
        yield Static("", id="resolution")
        with Vertical(id="template-box"):
            yield Static(t("model.custom_template"), classes="question")
            templates = self._templates()
            with Horizontal(classes="row"):
                yield Input(placeholder="qwen3", id="template-input",
                            suggester=SuggestFromList(templates) if templates else None)
                yield Button(t("model.use_template"), id="use-template")
            yield Static(t("model.templates", names=", ".join(templates)), classes="hint")
        with Vertical(id="fetch-box"):
            yield QuestionSet(self.stage.question("model_source"), self.state.model_source)
            yield Button(t("model.download"), id="fetch", variant="warning")
        yield Static("", id="fetch-status")
        yield Button(t("button.continue"), id="continue", variant="primary")

    @staticmethod
    def _templates() -> list[str]:
        from engine.models.resolve import known_templates

        return known_templates() or []

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#template-box").display = False
        self.query_one("#fetch-box").display = False
        self.query_one("#model-input", Input).focus()
        if self.wizard.online is None and not model.is_offline() and not self.state.model:
            self.probe_network()
        self.resolve(self.query_one("#model-input", Input).value, self.state.template if self.state.model else None)
        self.fetch_changed()

    # --------------------------------------------------------------- network probe
    @work(thread=True, group="probe")
    def probe_network(self) -> None:
        from engine.errors import EngineError
        from engine.models.download import pick_source

        try:
            _source, detail = pick_source()
            self.post_message(NetworkProbed(True, detail))
        except EngineError as exc:
            self.post_message(NetworkProbed(False, str(exc)))

    def on_network_probed(self, message: NetworkProbed) -> None:
        if message.reachable:
            return
        demo = model.recommended_model(self.wizard.skill, offline=True)
        self.query_one("#recommended", Static).update(t("model.recommended_offline", model=demo))
        field = self.query_one("#model-input", Input)
        if not self.resolved or field.value == model.recommended_model(self.wizard.skill, offline=False):
            field.value = demo
            self.resolve(demo, None)

    # --------------------------------------------------------------- resolve
    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "model-input":
            self.resolve(event.value, None)
        elif event.input.id == "template-input":
            self.resolve(self.query_one("#model-input", Input).value, event.value)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "resolve":
            self.resolve(self.query_one("#model-input", Input).value, None)
        elif event.button.id == "use-template":
            self.resolve(self.query_one("#model-input", Input).value, self.query_one("#template-input", Input).value)
        elif event.button.id == "fetch":
            self._start_fetch()
        elif event.button.id == "continue":
            self.submit()

    @work(thread=True, exclusive=True, group="resolve")
    def resolve(self, text: str, template: str | None) -> None:
        outcome = model.resolve(self.state, self.wizard.skill, text, template=template)
        plan = model.fetch_plan(outcome.state, self.wizard.skill) if outcome.ok else None
        self.post_message(ModelResolved(outcome, plan))

    def on_model_resolved(self, message: ModelResolved) -> None:
        outcome = message.outcome
        unsupported = outcome.code == "unsupported"
        self.query_one("#template-box").display = unsupported
        if not outcome.ok:
            self.resolved = False
            self.query_one("#resolution", Static).update("")
            self.query_one("#fetch-box").display = False
            self.say(outcome.problems + ([t("model.unsupported_choices")] if unsupported else []))
            return
        self.resolved, self.plan = True, message.plan
        self.wizard.commit(outcome.state)
        self.query_one("#resolution", Static).update(self._describe(message.plan))
        running = self.state.download.get("state") == "running"
        self.query_one("#fetch-box").display = message.plan.kind != "none" and not running
        self.query_one("#fetch", Button).label = t("model.build" if message.plan.kind == "build" else "model.download")
        self.query_one("#q-model_source").display = message.plan.kind == "download"
        self.say(notes=outcome.notes)

    def _describe(self, plan: model.FetchPlan) -> str:
        state = self.state
        lines = [t("model.family", family=state.family, template=state.template, rule=state.template_rule),
                 t("model.example", path=display_path(state.example))]
        if plan.kind == "none":
            lines.append("[green]" + escape(t("model.local_ok", path=display_path(state.model_path))) + "[/green]")
        elif plan.kind == "build":
            lines.append("[yellow]" + escape(t("model.needs_build", path=display_path(plan.target))) + "[/yellow]")
        else:
            lines.append("[yellow]" + escape(t("model.needs_download", path=display_path(plan.target))) + "[/yellow]")
        return "\n".join(lines)

    # --------------------------------------------------------------- background fetch
    def _start_fetch(self) -> None:
        if self.plan is None or self.plan.kind == "none":
            return
        source = self.query_one("#q-model_source", QuestionSet).value
        self.wizard.start_fetch(self.plan, source)
        self.query_one("#fetch-box").display = False
        self.say(info=[t("model.fetch_started")])

    def fetch_changed(self) -> None:
        download = self.state.download if self.state else {}
        text = self.wizard.fetch_text or ""
        if download.get("state") == "done":
            text = t("model.local_ok", path=display_path(self.state.model_path or download.get("target", "")))
            self.plan = model.FetchPlan("none")
        elif download.get("state") == "failed":
            text = t("fetch.failed", error=download.get("error") or "-")
            self.query_one("#fetch-box").display = True
        self.query_one("#fetch-status", Static).update(escape(text))

    def submit(self) -> None:
        outcome = model.confirm(self.state) if self.resolved else model.confirm(self.state.replace(template=None))
        if not outcome.ok:
            self.say(outcome.problems)
            return
        self.wizard.advance(self.STAGE, outcome.state)
