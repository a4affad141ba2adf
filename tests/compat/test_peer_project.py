"""A project written for Action Llama (``projects/shared-context``: ``shared/`` files injected
with ``!`cat /app/static/shared/...```, a seconds cron, an agent disabled with ``scale = 0``,
``al env set`` binding it to an environment in ``.env.toml``, ``-E``) validates and runs its agents unchanged, in
Docker as Action Llama runs them; the machine's environment file swaps the model provider for
the offline one, as a user's would for their machine (issue 33's acceptance).

``STEPS`` are what its user types, with what Action Llama answers; a peer feature the project
takes up (a file in the project) adds its steps there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from llamaherd.testing import TmpProject, wait_until

pytestmark = pytest.mark.docker

CONVENTIONS = "- Prefer named exports over default exports"
POLICY = "Every pull request needs two approvals"


@dataclass(frozen=True)
class Step:
    args: tuple[str, ...]
    ok: bool  # exit 0, or refused (non-zero)
    says: str = ""  # in its output


STEPS = [
    Step(("env", "set", "ci"), True),  # writes .env.toml: this checkout is bound to "ci"
    Step(("validate",), True, "ok  agents/dev"),
    Step(("run", "dev"), True, "done (exit 0)"),
    Step(("run", "reviewer", "-E", "ci"), True, "done (exit 0)"),
    Step(("run", "planner"), False, "agent 'planner' is disabled (scale = 0"),
    Step(("stat", "-E", "nowhere"), False, "no environment 'nowhere'"),
]
# The machine's environment file, outside the project (`al env set ci` binds the checkout to
# it in .env.toml): it points the project's model at a provider that needs no key here.
CI_ENVIRONMENT = '[models.sonnet]\nprovider = "scripted"\n'


def open_store(project: TmpProject) -> Any:
    from llamaherd.store import Store

    return Store.open(project.load().database_url, str(project.root))


def system_prompt(project: TmpProject, agent: str) -> str:
    store = open_store(project)
    try:
        run = next(r for r in store.runs(agent=agent) if r.state == "done")
        return next(m["content"] for m in run.transcript if m["role"] == "system")
    finally:
        store.close()


def test_a_peer_project_validates_and_runs_unchanged(corpus, al, docker, built, tmp_path):
    project = TmpProject(corpus("shared-context"))  # a copy, with its credentials stored
    built.append(project.root)
    environments = tmp_path / "environments"
    environments.mkdir()
    (environments / "ci.toml").write_text(CI_ENVIRONMENT)
    env = {"AL_ENVIRONMENTS_DIR": str(environments)}
    for step in STEPS:
        result = al(*step.args, cwd=project.root, env=env, timeout=300)
        output = result.stdout + result.stderr
        assert (result.returncode == 0) == step.ok, (step.args, output)
        assert step.says in output, (step.args, output)

    dev = system_prompt(project, "dev")
    assert CONVENTIONS in dev and "!`" not in dev
    assert "The repo has 3 top-level entries" in dev  # after hooks.pre cloned it
    reviewer = system_prompt(project, "reviewer")
    assert CONVENTIONS in reviewer and POLICY in reviewer

    # The seconds cron fires dev; the disabled planner never runs. (Its gateway port is left
    # to the machine: 8080 may be taken here.)
    started = al("start", "--detach", "--port", "0", cwd=project.root, env=env, timeout=300)
    assert started.returncode == 0, started.stdout + started.stderr
    store = open_store(project)
    try:
        wait_until(
            lambda: [r for r in store.runs(agent="dev") if r.trigger_kind == "scheduled"],
            timeout=120,
            what="a scheduled run of dev",
        )
        assert store.runs(agent="planner") == [] and store.queue_depth().get("planner", 0) == 0
    finally:
        store.close()
        al("stop", cwd=project.root, env=env)
