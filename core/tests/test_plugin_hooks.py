"""A plugin's lifecycle hooks, language skills and routes on a real Engine (core's stand-ins for
the model and the runtime): what each hook is given and when."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
import requests
from starlette.responses import JSONResponse
from starlette.routing import Route

from llamaherd import hookimpl
from llamaherd.api import Tool

CONFIG = '[models.fake]\nprovider = "fake"\nmodel = "fake"\n'
SCRIPT = """
[[turns]]
tool_calls = [{name = "shout", arguments = {text = "hello"}}]
[[turns]]
text = "shouted {{ last_result }}"
"""


class Observer:
    """Records the runs it sees, offers a ``shout`` tool and serves ``/observer``."""

    def __init__(self) -> None:
        self.started: list[tuple[str, str, bool]] = []
        self.finished: list[tuple[str, Any]] = []
        self.preambles: list[str] = []

    @hookimpl
    def run_started(self, run):
        self.started.append((run.run_id, run.trigger["kind"], run.sandbox is not None))

    @hookimpl
    def run_finished(self, run, result):
        self.finished.append((run.run_id, result))

    @hookimpl
    def register_language_skills(self, register):
        observer = self

        class Shouting:
            name = "shouting"
            category = "test"
            tools = [
                Tool(
                    "shout",
                    "Say it louder.",
                    {"type": "object", "properties": {"text": {"type": "string"}}},
                    lambda run, args: args["text"].upper(),
                )
            ]

            def preamble(self, run):
                observer.preambles.append(getattr(run, "run_id", None))  # None: a preview
                return "## Shouting\nUse `shout` to say things louder."

        register(Shouting())

    @hookimpl
    def register_routes(self, app):
        async def observed(request):
            return JSONResponse({"started": len(self.started), "finished": len(self.finished)})

        app.router.routes.append(Route("/observer", observed))


@pytest.fixture
def engine(tmp_project, registered_plugin, fakes, monkeypatch, tmp_path):
    from llamaherd.engine import Engine

    monkeypatch.setenv("AL_CREDENTIALS_DIR", str(tmp_path / "creds"))
    observer = Observer()
    registered_plugin(observer, "observer")
    tmp_project.config(CONFIG)
    path = tmp_project.add_agent("loud", 'models = ["fake"]\n[runtime]\ntype = "local"\n')
    (path / "script.toml").write_text(textwrap.dedent(SCRIPT))
    eng = Engine(tmp_project.load())
    eng.serve(port=0)
    eng.observer = observer
    try:
        yield eng
    finally:
        eng.close()


def run(engine: Any) -> Any:
    trigger = {"kind": "manual", "payload": {}, "prompt": "", "source": None}
    return engine.runner.run(engine.store.create_run("loud", "manual", trigger=trigger))


def test_started_and_finished_bracket_the_run(engine):
    final = run(engine)
    assert final.state == "done", final.reason
    assert engine.observer.started == [(final.id, "manual", True)]
    ((run_id, result),) = engine.observer.finished
    assert run_id == final.id
    assert (result.state, result.exit_code, result.text) == ("done", 0, "shouted HELLO")


def test_a_skill_offers_its_tool_and_its_preamble(engine):
    from llamaherd.prompts import build_prompts

    final = run(engine)
    transcript = engine.store.get_run(final.id).transcript
    assert [m["content"] for m in transcript if m.get("role") == "tool"] == ["HELLO"]
    assert final.id in engine.observer.preambles
    agent = engine.project.agent("loud")
    system, _ = build_prompts(agent, engine.registry, {"kind": "manual"})
    assert "Use `shout` to say things louder." in system


def test_a_plugin_route_is_served_beside_core_routes(engine):
    before = requests.get(f"{engine.gateway_url}/observer", timeout=10).json()
    run(engine)
    after = requests.get(f"{engine.gateway_url}/observer", timeout=10).json()
    assert (before, after) == ({"started": 0, "finished": 0}, {"started": 1, "finished": 1})
