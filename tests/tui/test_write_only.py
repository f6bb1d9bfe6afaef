"""The "write the configs, I run them elsewhere" route: every YAML is shown, confirmed, written; nothing runs."""

import json
import shlex

import yaml
from assistant.command import self_command
from pilot_helpers import SIZE, choose_datasets, make_app, messages, on_screen, wait_until


async def test_write_only_route_writes_confirmed_yamls_and_shows_commands(workspace):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        # stage 0: keyboard only — execution is the third question: Tab to it, move down, select
        await pilot.press("tab", "tab", "down", "enter", "ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "DataScreen"), what="data screen")
        assert app.state.execution == "write_only" and app.state.scope == "full"
        await wait_until(pilot, lambda: app.screen.counts, what="row counts")
        choose_datasets(app, "alpaca_demo")  # no placeholders
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "ModelScreen"), what="model screen")
        await wait_until(pilot, lambda: app.state.model_path, what="demo model resolved")
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "GpuScreen") and app.device_report is not None)
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "ConfigScreen"), what="config screen")
        shown = dict(app.screen.built.config)
        # the key help folds between keys onto a second line rather than cutting ^Q and F2 off at 80 columns
        keyhelp = app.screen.query_one("#keyhelp")
        lines = str(keyhelp.render()).splitlines()
        assert len(lines) == 2 and all(len(line) <= keyhelp.size.width for line in lines)
        assert "^Q quit" in lines[-1] and lines[-1].endswith("F2 runs") and "Enter edit" in lines[0]
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "ConfirmTable"), what="sft.yaml table")
        table_rows = dict(app.screen.rows)
        await pilot.press("y")
        await wait_until(pilot, lambda: app.screen.query("#continue") and app.screen.query_one("#continue").display,
                         what="command shown")
        run = workspace / "lf_runs" / app.state.run_id
        assert yaml.safe_load((run / "sft.yaml").read_text()) == table_rows == shown
        assert "lf-assistant train lf_runs/" in str(app.screen.query_one("#command").render())
        # the command runs in a fresh shell: this installation's script, not a bare name PATH may not know
        assert f"{self_command()} train lf_runs/" in " ".join(str(app.screen.query_one("#command").render()).split())
        # it trains in the folder the wizard prepared, not a second one
        words = shlex.split(" ".join(str(app.screen.query_one("#command").render()).split()))
        assert words[words.index("--run-id") + 1] == app.state.run_id
        assert (workspace / words[words.index("--runs-dir") + 1]).resolve() == run.parent.resolve()
        assert not app.state.launched
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "ConfirmTable"), what="infer.yaml table")
        infer_rows = dict(app.screen.rows)
        await pilot.press("y")
        await wait_until(pilot, lambda: on_screen(app, "ValidateScreen") and app.screen.query_one("#prompts-box").display)
        app.screen.query_one("#run").press()
        await wait_until(pilot, lambda: app.screen.query_one("#continue").display, what="validation commands")
        assert yaml.safe_load((run / "infer.yaml").read_text()) == infer_rows
        assert infer_rows["adapter_name_or_path"] == shown["output_dir"]
        assert "lf-assistant chat lf_runs/" in str(app.screen.query_one("#chat-again").render())
        written = [json.loads(line) for line in (run / "prompts.jsonl").read_text().splitlines()]
        assert [row["prompt"] for row in written] == app.state.prompts and len(written) == 3  # nothing held out yet
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "ExportScreen"), what="export screen")
        assert app.screen.query_one("#export-dir").value == "models/lf-tiny-qwen3-merged"
        # Esc is refused once the training config is written, so the key help does not offer it
        assert "Esc" not in str(app.screen.query_one("#keyhelp").render()) and "F2" in str(
            app.screen.query_one("#keyhelp").render())
        await pilot.press("enter")
        await wait_until(pilot, lambda: on_screen(app, "ConfirmTable"), what="export.yaml table")
        export_rows = dict(app.screen.rows)
        await pilot.press("y")
        await wait_until(pilot, lambda: on_screen(app, "ExportScreen") and app.screen.query_one("#continue").display)
        assert yaml.safe_load((run / "export.yaml").read_text()) == export_rows
        assert export_rows["template"] == shown["template"] == infer_rows["template"]
        assert "lf-assistant export" in str(app.screen.query_one("#export-result").render())
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: on_screen(app, "SummaryScreen"), what="summary")
        assert "summary" in app.state.done and messages(app) == ""
        assert (run / "status.json").is_file() and "running" not in (run / "status.json").read_text()
