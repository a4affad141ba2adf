"""Every corpus project validates with exit 0 and assembles every agent's prompts, unchanged;
what llamaherd does not act on is a warning; a typo in any key is still an error."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .conftest import PROJECTS

# The warnings each project must give (and no others): every key Action Llama accepts that
# llamaherd reads differently or not at all says so in one line.
EXPECTED_WARNINGS = {
    "agent-keys": [
        "warning: agents/dev/config.toml: runtime: groups: docker: controls the Docker daemon, "
        "which runs as root, so the agent's processes can take this host or read its secrets; "
        "remove it unless the agent needs that",
    ],
    "aliases": [
        "warning: config.toml: maxTriggerDepth: deprecated, use maxCallDepth (read as maxCallDepth)",
        "warning: config.toml: webhookQueueSize: deprecated, use workQueueSize "
        "(read as workQueueSize)",
        'warning: config.toml: harness.type: "claude" is not acted on: llamaherd drives the '
        "model itself, with the whole models list (as the pi harness does)",
        "warning: config.toml: telemetry: not acted on: llamaherd exports no OpenTelemetry data "
        "(runs are in `al stats` and the dashboard)",
        "warning: config.toml: cloud: not acted on: llamaherd runs agents on this machine "
        '([runtime] type "container" or "host-user")',
        "warning: config.toml: local.enabled: not acted on (Action Llama forces it on too): "
        'agents run in their [runtime]; set type = "host-user" in an agent to run it without '
        "Docker",
        'warning: agents/worker/config.toml: harness.type: "claude" is not acted on: llamaherd '
        "drives the model itself, with the whole models list (as the pi harness does)",
    ],
    "models": [
        'warning: config.toml: models.haiku-pi.authType: "pi_auth" (the pi harness\'s login '
        'file) is not read: the model uses its stored key, as with "api_key"',
    ],
    "old-style": [
        "warning: agents/dev/SKILL.md: metadata: metadata.credentials, metadata.schedule, "
        "metadata.webhooks, metadata.params: used as agent config (config.toml does not set "
        "them); Action Llama 0.29 reads agent config from config.toml only: move them there",
        "warning: agents/dev/SKILL.md: metadata.models: ignored, config.toml sets it",
        "warning: agents/reviewer/SKILL.md: metadata: metadata.credentials, metadata.models, "
        "metadata.webhooks, metadata.hooks, metadata.scale, metadata.timeout: used as agent "
        "config (config.toml does not set them); Action Llama 0.29 reads agent config from "
        "config.toml only: move them there",
        "warning: agents/triage/SKILL.md: credentials, models, schedule, params: used as agent "
        "config (config.toml does not set them); Action Llama 0.29 reads agent config from "
        "config.toml only: move them there",
    ],
    "scaffolded": [
        'warning: config.toml: models.sonnet.authType: "pi_auth" (the pi harness\'s login '
        'file) is not read: the model uses its stored key, as with "api_key"',
        "warning: agents/dev/SKILL.md: metadata: metadata.schedule: used as agent config "
        "(config.toml does not set it); Action Llama 0.29 reads agent config from config.toml "
        "only: move it there",
    ],
}
# Warnings about this machine, not the project (no Docker base image built yet, ...).
ENVIRONMENT = re.compile(r"^warning: .*(not found locally|Docker daemon not reachable)")


def agents_of(root: Path) -> list[str]:
    return sorted(p.parent.name for p in root.glob("agents/*/SKILL.md"))


def test_the_corpus_has_eight_projects_or_more() -> None:
    assert len(PROJECTS) >= 8, PROJECTS


@pytest.mark.parametrize("name", PROJECTS)
def test_project_validates_with_exit_0(name, corpus, al) -> None:
    root = corpus(name)
    result = al("validate", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [f"ok  agents/{agent}" for agent in agents_of(root)] == [
        line for line in lines if line.startswith("ok  ")
    ]
    warnings = [
        line for line in lines if line.startswith("warning:") and not ENVIRONMENT.match(line)
    ]
    assert warnings == expected_warnings(name)
    assert "Traceback" not in result.stderr


def expected_warnings(name: str) -> list[str]:
    """EXPECTED_WARNINGS, but for keys an installed plugin acts on ([telemetry] with
    llamaherd-otel): those are not "not acted on"."""
    from llamaherd.plugins import registry

    owned = registry().project_keys
    return [w for w in EXPECTED_WARNINGS.get(name, []) if w.split(": ")[2] not in owned]


@pytest.mark.parametrize("name", PROJECTS)
def test_every_agent_assembles_its_prompts(name, corpus, al) -> None:
    from llamaherd.project import load_project

    root = corpus(name)
    project = load_project(root)
    for agent in agents_of(root):
        result = al("prompt", agent, cwd=root)
        assert result.returncode == 0, f"{agent}: {result.stderr}"
        system, user = result.stdout.split("\n=== user ===\n")
        assert project.agent(agent).body.strip() in system
        config = user[user.index("<agent-config>") : user.index("</agent-config>")]
        assert json.loads(config.removeprefix("<agent-config>")) == project.agent(agent).params
        assert "You have been triggered manually." in user


def test_frontmatter_runtime_keys_are_used_under_config_toml(corpus, al) -> None:
    from llamaherd.project import load_project

    root = corpus("old-style")
    status = json.loads(al("status", "--json", cwd=root).stdout)["agents"]
    fires = {row["agent"]: row["next_fire"] for row in status}
    assert fires["triage"] and fires["dev"]  # scheduled by their frontmatter
    assert fires["reviewer"] is None  # webhooks only
    project = load_project(root)
    dev = project.agent("dev")
    assert dev.models == ["fast"]  # config.toml wins
    assert dev.scale == 5
    assert dev.credentials == ["github_token", "git_ssh"]  # metadata, config.toml has none
    assert dev.config["schedule"] == "0 * * * *"
    assert dev.params["triggerLabel"] == "ready-for-dev"
    assert dev.config["webhooks"][0]["orgs"] == ["Action-Llama"]
    reviewer = project.agent("reviewer")
    assert (reviewer.scale, reviewer.timeout, reviewer.hooks["pre"]) == (
        2,
        1200,
        ["echo staging context"],
    )
    assert reviewer.meta["user-invocable"] is False  # unknown frontmatter keys are kept
    assert reviewer.meta["metadata"]["feedback"] == {"enabled": True}
    triage = project.agent("triage")  # the first layout: runtime keys at the top level
    assert (triage.models, triage.config["schedule"]) == (["sonnet"], "*/30 * * * *")
    notes = project.agent("notes-bot")  # no frontmatter: the directory names it
    assert notes.meta == {} and notes.body.startswith("# Notes bot")


def test_peer_settings_are_read_with_the_peer_meaning(corpus) -> None:
    from llamaherd.project import load_project

    keys = load_project(corpus("project-keys"))
    assert keys.agent("dev").scale == 2  # defaultAgentScale
    assert keys.name == "acme-agents"
    assert keys.public_url == "https://agents.acme.example"
    aliases = load_project(corpus("aliases"))
    assert aliases.setting("maxCallDepth") == 2  # maxTriggerDepth
    assert aliases.agent("worker").queue_size == 40  # webhookQueueSize
    assert load_project(corpus("scaffolded")).name == "scaffolded"  # from .env.toml


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_a_typo_in_any_key_is_still_an_error(corpus, al) -> None:
    root = corpus("project-keys")
    _replace(root / "config.toml", "maxCallDepth = 3", "maxCallDeph = 3")
    _replace(root / "config.toml", "samplingRate = 0.5", "samplingrate = 0.5")
    _replace(root / "config.toml", 'type = "pi"', 'tpe = "pi"')
    _replace(root / "config.toml", "enabled = true", "enabeld = true")
    _replace(root / "config.toml", 'authType = "api_key"', 'authType = "apikey"')
    _replace(root / "agents/dev/config.toml", 'labels = ["agent"]', 'lables = ["agent"]')
    _replace(root / "agents/dev/config.toml", "models = [", "waitTimout = 5\nmodels = [")
    (root / "config.toml").write_text("webhookQueueSise = 3\n" + (root / "config.toml").read_text())
    result = al("validate", cwd=root)
    assert result.returncode == 2
    lines = result.stdout.splitlines()
    for expected in (
        'config.toml: maxCallDeph: unknown key (did you mean "maxCallDepth"?)',
        'config.toml: telemetry.samplingrate: unknown key (did you mean "samplingRate"?)',
        'config.toml: harness.tpe: unknown key (did you mean "type"?)',
        'config.toml: local.enabeld: unknown key (did you mean "enabled"?)',
        'config.toml: models.sonnet.authType: expected one of "api_key", "oauth_token", '
        '"pi_auth", got "apikey" (did you mean "api_key"?)',
        'agents/dev/config.toml: webhooks[0].lables: unknown key (did you mean "labels"?)',
        'agents/dev/config.toml: waitTimout: unknown key (did you mean "waitTimeout"?)',
        # a deprecated spelling is accepted, never suggested
        'config.toml: webhookQueueSise: unknown key (did you mean "workQueueSize"?)',
    ):
        assert expected in lines, "\n".join(lines)


def test_problems_of_frontmatter_keys_name_skill_md(corpus, al) -> None:
    root = corpus("old-style")
    _replace(root / "agents/reviewer/SKILL.md", "scale: 2", "scale: many")
    _replace(root / "agents/triage/SKILL.md", '"*/30 * * * *"', '"every half hour"')
    result = al("validate", "reviewer", "triage", cwd=root)
    assert result.returncode == 2
    lines = result.stdout.splitlines()
    assert 'agents/reviewer/SKILL.md: metadata.scale: expected an integer, got "many"' in lines
    assert any(line.startswith("agents/triage/SKILL.md: schedule: ") for line in lines), lines


def test_an_ssh_runtime_is_checked_and_named(corpus, al) -> None:
    root = corpus("agent-keys")
    config = root / "agents/dev/config.toml"
    _replace(config, '[runtime]\ntype = "host-user"\nrun_as = "al-agent"\ngroups = ["docker"]', "")
    config.write_text(
        config.read_text()
        + '[runtime]\ntype = "ssh"\nhost = "build.acme.example"\nport = 22\nuser = "agent"\n'
        'key_path = "~/.ssh/id_ed25519"\ncwd = "/srv/agent"\n'
        'ssh_options = { StrictHostKeyChecking = "yes" }\nprot = 2222\n'
    )
    result = al("validate", "dev", cwd=root)  # llamaherd-ssh provides it
    assert result.returncode == 2
    assert result.stdout.splitlines() == [
        'agents/dev/config.toml: runtime.prot: unknown key (did you mean "port"?)'
    ]
    result = al("validate", "dev", cwd=root, env={"AL_DISABLE_PLUGINS": "ssh"})
    assert result.returncode == 2
    assert result.stdout.splitlines() == [
        'agents/dev/config.toml: runtime.prot: unknown key (did you mean "port"?)',
        'agents/dev/config.toml: runtime.type: runtime "ssh" (Action Llama\'s) is not provided '
        "by any installed plugin: install llamaherd-ssh (`al plugins` lists what is installed), "
        'or use type = "container" or "host-user"',
    ]
