"""`al start` listens before it imports what reads, validates and runs agents: the modules it
has imported when ``Scheduler.load`` begins (``/health`` answers, webhook deliveries are
taken) are held to a budget, as `al --help`'s are (``tests/foundation/test_cli_imports.py``).

Measured in a real `al start` (``llamaherd.cli.main``) whose ``Scheduler.load`` is wrapped to
write ``sys.modules`` to a file on entry, then go on as it would."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from llamaherd.testing import OfflineProject, imported_by, wait_until

# Never imported before the agents load: each is what reading, validating or running agents
# needs (YAML frontmatter, JSON schemas, templates, a model call, a sandbox), tens of ms each.
HEAVY = {
    "yaml", "jsonschema", "referencing", "jinja2", "cryptography", "docker", "requests",
    "urllib3", "croniter", "jmespath", "orjson", "tarfile", "statistics", "httpx", "rich",
}  # fmt: skip
HEAVY_CORE = {
    "llamaherd.agents", "llamaherd.session", "llamaherd.runner", "llamaherd.schema",
    "llamaherd.prompts", "llamaherd.file_tools", "llamaherd.models",
    "llamaherd_docker.runtime", "llamaherd_host_user.runtime", "llamaherd_ssh.runtime",
    "llamaherd_cron.pattern", "llamaherd_anthropic.provider", "llamaherd_openai.provider",
}  # fmt: skip
# Modules beyond the bare interpreter's when it starts listening, every plugin installed (the
# tests' environment): the CLI, the store (peewee, sqlite3), the HTTP server (uvicorn, asyncio,
# starlette), the plugin manager and each plugin's routes and table sets. 478 when this budget
# was set (605 before the registry collected each kind on first use and the routes' modules
# imported templates, operations and parsers on first use).
START_BUDGET = 500

WRAPPER = textwrap.dedent(
    """
    import sys
    from llamaherd.scheduler import Scheduler

    load = Scheduler.load

    def observed(self):
        with open({out!r}, "w") as fh:
            fh.write("\\n".join(sorted(sys.modules)))
        return load(self)

    Scheduler.load = observed
    sys.argv = ["al", "--project", {root!r}, "start", "-H", "--port", "0"]
    from llamaherd.cli import main
    main()
    """
)


def imported_when_listening(project: OfflineProject, out: Path) -> set[str]:
    code = WRAPPER.format(out=str(out), root=str(project.root))
    env = {**os.environ, **project.env}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: out.exists() and out.read_text(), 60, what="the scheduler listening")
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    return set(out.read_text().split())


def test_al_start_listens_before_importing_what_runs_agents(tmp_path) -> None:
    project = OfflineProject(tmp_path / "project", '[webhooks.github]\ntype = "github"\n')
    project.add_scripted_agent("worker", '[[webhooks]]\nsource = "github"\n')
    modules = imported_when_listening(project, tmp_path / "modules")
    assert "llamaherd.server" in modules and "llamaherd.loading" in modules
    heavy = {m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY_CORE}
    assert not heavy, f"`al start` imports {sorted(heavy)} before it listens: import them later"
    beyond = modules - imported_by()
    assert len(beyond) <= START_BUDGET, (
        f"`al start` imports {len(beyond)} modules before it listens (budget {START_BUDGET})"
    )
