"""validate_project: one clear line per problem, naming file, key path and expectation."""

from __future__ import annotations

import getpass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from llamaherd.install import needs
from llamaherd.project import Agent, Project
from llamaherd.schema import schemas, validate_project

from .conftest import standard_kinds, thing

PROJECT = """
[models.main]
provider = "anthropic"
model = "claude-sonnet-4-5"

[webhooks.gh]
type = "github"
allowUnsigned = true
"""

AGENT = """
models = ["main"]
schedule = "0 9 * * *"
[runtime]
type = "host-user"
run_as = "al-agent"
"""


@pytest.fixture
def project(tmp_project, monkeypatch, tmp_path):
    monkeypatch.setenv("AL_CREDENTIALS_DIR", str(tmp_path / "creds"))
    tmp_project.config(PROJECT)
    return tmp_project


def lines(tmp_project, registry, agents=None):
    return [str(p) for p in validate_project(tmp_project.load(), registry, agents)]


def test_a_correct_project_has_no_problems(project, make_registry):
    project.add_agent("hello", AGENT)
    assert lines(project, make_registry()) == []


def test_unknown_provider_value_lists_choices_with_did_you_mean(project, make_registry):
    project.config(PROJECT.replace('"anthropic"', '"antropic"'))
    assert lines(project, make_registry()) == [
        'config.toml: models.main.provider: expected one of "anthropic", "openai", '
        'got "antropic" (did you mean "anthropic"?)'
    ]


def test_first_party_provider_not_installed_names_the_distribution(project, make_registry):
    kinds = standard_kinds()
    kinds["providers"] = [thing("openai")]
    problems = lines(project, make_registry(**kinds))
    assert problems == [
        f'config.toml: models.main.provider: provider "anthropic" {needs("llamaherd-anthropic")}'
    ]


def test_default_runtime_without_docker_names_llamaherd_docker(project, make_registry):
    kinds = standard_kinds()
    kinds["runtimes"] = [thing("host-user")]
    project.add_agent("hello", 'models = ["main"]\n')
    assert lines(project, make_registry(**kinds)) == [
        'agents/hello/config.toml: runtime.type: runtime "container" (the default) '
        + needs("llamaherd-docker")
    ]


def test_unknown_runtime_type_with_did_you_mean(project, make_registry):
    project.add_agent("hello", AGENT.replace('"host-user"', '"host_user"'))
    (problem,) = lines(project, make_registry())
    assert problem.startswith(
        'agents/hello/config.toml: runtime.type: expected one of "container", "host-user"'
    )
    assert problem.endswith('got "host_user" (did you mean "host-user"?)')


def test_unknown_keys_are_errors_with_did_you_mean(project, make_registry):
    project.add_agent("hello", "timout = 30\n" + AGENT + "[hooks]\npree = []\n")
    problems = lines(project, make_registry())
    assert 'agents/hello/config.toml: timout: unknown key (did you mean "timeout"?)' in problems
    assert 'agents/hello/config.toml: hooks.pree: unknown key (did you mean "pre"?)' in problems
    assert len(problems) == 2


def test_unknown_key_in_a_runtime_variant(project, make_registry):
    project.add_agent("hello", AGENT.replace("run_as", "run_ass"))
    assert lines(project, make_registry()) == [
        'agents/hello/config.toml: runtime.run_ass: unknown key (did you mean "run_as"?)'
    ]


def test_wrong_types_and_bounds(project, make_registry):
    project.add_agent("hello", 'scale = "2"\ntimeout = 0\nonInterrupted = "retry"\n' + AGENT)
    assert sorted(lines(project, make_registry())) == [
        'agents/hello/config.toml: onInterrupted: expected one of "fail", "requeue", got "retry"',
        'agents/hello/config.toml: scale: expected an integer, got "2"',
        "agents/hello/config.toml: timeout: expected a number > 0, got 0",
    ]


def test_project_level_types(project, make_registry):
    project.config("maxReruns = -1\n" + PROJECT + '[gateway]\nport = "80"\n')
    assert sorted(lines(project, make_registry())) == [
        'config.toml: gateway.port: expected an integer, got "80"',
        "config.toml: maxReruns: expected a number >= 0, got -1",
    ]


def test_missing_required_model_keys(project, make_registry):
    project.config('[models.main]\nprovider = "openai"\n')
    assert lines(project, make_registry()) == ["config.toml: models.main.model: missing (required)"]


def test_trigger_keys_without_their_plugin_name_the_distribution(project, make_registry):
    kinds = standard_kinds()
    kinds["trigger_types"] = []
    project.add_agent("hello", AGENT + '[[webhooks]]\nsource = "gh"\n')
    assert lines(project, make_registry(**kinds)) == [
        f"agents/hello/config.toml: schedule: {needs('llamaherd-cron')}",
        f"agents/hello/config.toml: webhooks: {needs('llamaherd-webhooks')}",
    ]


def test_agent_without_triggers_is_fine(project, make_registry):
    project.add_agent("by-hand", 'models = ["main"]\n[runtime]\ntype = "container"\n')
    assert lines(project, make_registry()) == []


def test_cross_references(project, make_registry):
    agent = AGENT.replace('["main"]', '["main", "mian"]') + '[[webhooks]]\nsource = "gthub"\n'
    project.add_agent("hello", agent)
    assert lines(project, make_registry()) == [
        'agents/hello/config.toml: models[1]: no [models.mian] in config.toml (defined: main) (did you mean "main"?)',
        "agents/hello/config.toml: webhooks[0].source: no [webhooks.gthub] in config.toml (defined: gh)",
    ]


def test_agent_without_models(project, make_registry):
    project.add_agent("hello", AGENT.replace('models = ["main"]', ""))
    assert lines(project, make_registry()) == [
        "agents/hello/config.toml: models: missing: list the models this agent uses (defined: main)"
    ]


def test_credential_refs(project, make_registry):
    refs = '["github_tokn", "anthropic_key", "a:b:c", 5]'
    project.add_agent("hello", f"credentials = {refs}\n" + AGENT)
    prefix = "agents/hello/config.toml: credentials"
    assert lines(project, make_registry()) == [
        f"{prefix}[3]: expected a string, got 5",
        f'{prefix}[0]: unknown credential type "github_tokn" (installed: git_ssh, github_token) (did you mean "github_token"?)',
        f'{prefix}[1]: credential type "anthropic_key" {needs("llamaherd-anthropic")}',
        f"{prefix}[2]: invalid credential instance name 'b:c': expected letters, digits, '_', '-' or '.', not starting with '.' or '-'",
    ]


def test_declared_credential_missing_from_the_store(project, make_registry, tmp_path):
    pytest.importorskip("llamaherd.credentials")
    from llamaherd.credentials import CredentialStore

    CredentialStore(tmp_path / "creds").write("github_token", "default", {"token": "x"})
    project.add_agent("hello", 'credentials = ["github_token", "git_ssh:deploy"]\n' + AGENT)
    assert lines(project, make_registry()) == [
        "agents/hello/config.toml: credentials[1]: credential git_ssh:deploy not found; "
        "add it with `al creds add git_ssh:deploy`"
    ]


def test_run_as_current_user_warns_about_isolation(project, make_registry):
    project.add_agent("hello", AGENT.replace("al-agent", getpass.getuser()))
    (problem,) = validate_project(project.load(), make_registry())
    assert not problem.is_error
    assert str(problem) == (
        f'warning: agents/hello/config.toml: runtime.run_as: "{getpass.getuser()}" is the current '
        "user: runs without isolation"
    )


def test_runtimes_validate_themselves(project, make_registry):
    kinds = standard_kinds()
    checks = lambda agent, project: ["docker daemon not reachable", "warning: image is old"]  # noqa: E731
    kinds["runtimes"] = [thing("host-user", validate=checks)]
    project.add_agent("hello", AGENT.replace("run_as", "# run_as"))
    problems = validate_project(project.load(), make_registry(**kinds))
    assert [(str(p), p.is_error) for p in problems] == [
        ("agents/hello/config.toml: runtime: docker daemon not reachable", True),
        ("warning: agents/hello/config.toml: runtime: image is old", False),
    ]


def test_skill_frontmatter_name_and_description_are_optional(project, make_registry):
    project.add_agent("hello", AGENT, skill="---\nname: hi\n---\nbody\n")
    project.add_agent("plain", AGENT, skill="# no frontmatter, as Action Llama allows\n")
    project.add_agent("odd", AGENT, skill="---\ndescription: 3\n---\nbody\n")
    assert lines(project, make_registry()) == [
        'warning: agents/hello/SKILL.md: name: "hi" differs from the directory name "hello"',
        "warning: agents/odd/SKILL.md: description: expected a non-empty string",
    ]


def test_parse_errors_are_reported_relative_with_line_and_column(project, make_registry):
    project.add_agent("toml", 'models = ["main"\nscale = 1\n')
    project.add_agent("yaml", AGENT, skill="---\nname: [unclosed\n---\nbody\n")
    (project.root / "agents" / "empty").mkdir()  # no SKILL.md: not an agent, ignored
    problems = lines(project, make_registry())
    assert len(problems) == 2
    assert problems[0].startswith("agents/toml/config.toml: invalid TOML: ")
    assert "line 2, column" in problems[0]
    assert problems[1].startswith("agents/yaml/SKILL.md: invalid YAML frontmatter at line 2")


def test_only_named_agents(project, make_registry):
    project.add_agent("good", AGENT)
    project.add_agent("bad", AGENT + "bogus = 1\n")
    assert lines(project, make_registry(), ["good"]) == []


def test_provider_and_source_fragments_extend_their_tables(project, make_registry):
    kinds = standard_kinds()
    kinds["providers"] = [
        thing("anthropic", {"type": "object", "properties": {"beta": {"type": "boolean"}}})
    ]
    project.config(PROJECT.replace('model = "claude-sonnet-4-5"', 'model = "m"\nbeta = "yes"\n'))
    (project.root / "config.toml").write_text(
        "secret = 1\n" + (project.root / "config.toml").read_text()
    )
    assert lines(project, make_registry(**kinds)) == [
        "config.toml: secret: unknown key (known keys: budget, cloud, database, "
        "defaultAgentScale, defaultWaitTimeout, gateway, harness, historyRetentionDays, local, "
        "log, maxCallDepth, maxReruns, models, projectName, resourceLockTimeout, scale, "
        "telemetry, timezone, webhooks, workQueueSize)",
        'config.toml: models.main.beta: expected true or false, got "yes"',
    ]


def test_missing_keys_of_used_models_and_webhook_sources(project, make_registry, monkeypatch):
    kinds = standard_kinds()
    kinds["providers"] = [
        thing("anthropic", credential_type="anthropic_key", key_env="AL_TEST_KEY"),
        thing("openai", credential_type="openai_key", key_required=False),
    ]
    kinds["webhook_sources"] = [thing("github", credential_type="github_webhook_secret")]
    models = '[models.unused]\nprovider = "anthropic"\nmodel = "x"\n'
    models += '[models.local]\nprovider = "openai"\nmodel = "x"\n'
    project.config(PROJECT.replace("allowUnsigned = true", 'credential = "ci"') + models)
    project.add_agent("hello", AGENT.replace('["main"]', '["main", "local"]'))
    monkeypatch.delenv("AL_TEST_KEY", raising=False)
    assert lines(project, make_registry(**kinds)) == [
        "config.toml: models.main: credential anthropic_key:default not found; "
        "add it with `al creds add anthropic_key:default` (or set $AL_TEST_KEY)",
        "config.toml: webhooks.gh: credential github_webhook_secret:ci not found; "
        "add it with `al creds add github_webhook_secret:ci`",
    ]
    monkeypatch.setenv("AL_TEST_KEY", "sk-test")
    assert len(lines(project, make_registry(**kinds))) == 1


def test_documented_schemas_are_valid_and_agree_with_validation(make_registry):
    assembled = schemas(make_registry())
    agent, project = assembled.agent_schema(), assembled.project_schema()
    for document in (agent, project):
        Draft202012Validator.check_schema(document)
    documented = Draft202012Validator(agent)
    assert documented.is_valid(
        {"models": ["m"], "schedule": "* * * * *", "runtime": {"type": "host-user", "run_as": "x"}}
    )
    assert documented.is_valid({"runtime": {"image": "x"}})  # the default type: container
    assert not documented.is_valid({"runtime": {"type": "host-user", "image": "x"}})
    assert not documented.is_valid({"runtime": {"type": "nope"}})
    project_doc = Draft202012Validator(project)
    assert project_doc.is_valid({"models": {"a": {"provider": "openai", "model": "x"}}})
    assert not project_doc.is_valid({"models": {"a": {"provider": "openai"}}})
    assert not project_doc.is_valid({"webhooks": {"a": {"type": "github", "bogus": 1}}})


def test_schema_defaults_are_design_defaults(make_registry):
    from llamaherd.project import DEFAULTS, GATEWAY_DEFAULTS, LOCAL_DEFAULTS

    props = schemas(make_registry()).project_schema()["properties"]
    for key, value in DEFAULTS.items():
        assert props[key].get("default") == value, key
    for table, defaults in (("local", LOCAL_DEFAULTS), ("gateway", GATEWAY_DEFAULTS)):
        for key, value in defaults.items():
            assert props[table]["properties"][key]["default"] == value


toml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
AGENT_KEYS_TRIED = [
    "models",
    "credentials",
    "runtime",
    "hooks",
    "webhooks",
    "scale",
    "params",
    "schedule",
]
PROJECT_KEYS_TRIED = ["models", "webhooks", "local", "gateway", "scale"]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    agent=st.dictionaries(st.sampled_from(AGENT_KEYS_TRIED), toml_values, max_size=4),
    config=st.dictionaries(st.sampled_from(PROJECT_KEYS_TRIED), toml_values, max_size=3),
    meta=st.dictionaries(st.sampled_from(["name", "description"]), toml_values, max_size=2),
)
def test_any_values_give_problems_never_exceptions(tmp_path, make_registry, agent, config, meta):
    project = Project(root=tmp_path, config=config)
    project.__dict__["agents"] = {
        "a": Agent("a", tmp_path / "agents" / "a", project, meta, "", agent)
    }
    for problem in validate_project(project, make_registry()):
        assert problem.file and problem.message


def test_trigger_types_validate_their_own_keys(project, make_registry):
    from llamaherd.types import ConfigError

    def check(agent):
        if agent.config["schedule"] == "boom":
            raise ValueError("parser exploded")
        return [ConfigError(str(agent.config_file), "schedule", "bad cron field 'x'")]

    kinds = standard_kinds()
    kinds["trigger_types"] = [thing("cron", {"schedule": {"type": "string"}}, validate=check)]
    project.add_agent("hello", AGENT.replace('"0 9 * * *"', '"x * * * *"'))
    project.add_agent("boom", AGENT.replace('"0 9 * * *"', '"boom"'))
    project.add_agent("typed", AGENT.replace('"0 9 * * *"', "5"))  # schema error: not re-checked
    project.add_agent("manual", AGENT.replace('schedule = "0 9 * * *"', ""))  # no cron keys
    assert lines(project, make_registry(**kinds)) == [
        'agents/boom/config.toml: schedule: trigger type "cron" could not check this agent: '
        "ValueError: parser exploded",
        "agents/hello/config.toml: schedule: bad cron field 'x'",
        "agents/typed/config.toml: schedule: expected a string, got 5",
    ]


def test_schema_and_a_trigger_types_findings_come_in_one_pass(project, make_registry):
    """Issue 42 item 16: a schema error under one of a trigger type's keys no longer hides
    what the type finds under another (``timezone = 5`` and a bad ``schedule``); what it finds
    under the key the schema reported is left out (said once); a ConfigWarning is a warning."""
    from llamaherd.types import ConfigError, ConfigWarning

    def check(agent):
        file = str(agent.config_file)
        return [
            ConfigError(file, "schedule", "hour 25 is out of range 0-23"),
            ConfigError(file, "timezone", "not a zone"),  # the schema said it already
            ConfigWarning(file, "schedule", "never fires"),
        ]

    kinds = standard_kinds()
    schema = {"schedule": {"type": "string"}, "timezone": {"type": "string"}}
    kinds["trigger_types"] = [thing("cron", schema, validate=check)]
    project.add_agent("both", AGENT.replace("[runtime]", "timezone = 5\n[runtime]"))
    assert lines(project, make_registry(**kinds)) == [
        "agents/both/config.toml: timezone: expected a string, got 5",
        "agents/both/config.toml: schedule: hour 25 is out of range 0-23",
        "warning: agents/both/config.toml: schedule: never fires",
    ]


def test_one_webhooks_entrys_schema_error_does_not_hide_anothers_misplaced_filter(
    tmp_path, offline_project
):
    """Issue 42 item 16 through ``al validate``, with the installed plugins: entry 0's schema
    error and entry 1's filter of another source type, and a bad schedule beside a timezone of
    the wrong type, all in one run."""
    from llamaherd.plugins import registry

    if not {"cron", "webhooks"} <= set(registry().trigger_types):
        pytest.skip("needs the llamaherd-cron and llamaherd-webhooks plugins")
    with (offline_project.root / "config.toml").open("a") as fh:
        fh.write('\n[webhooks.gh]\ntype = "github"\nallowUnsigned = true\n')
    offline_project.add_scripted_agent(
        "hooked",
        'schedule = "0 25 * * *"\ntimezone = 5\n'
        '[[webhooks]]\nsource = "gh"\nevents = 5\n[[webhooks]]\nsource = "gh"\nchannels = ["C1"]\n',
    )
    said = offline_project.al("validate")
    assert said.returncode == 2
    errors = [line for line in said.stdout.splitlines() if not line.startswith("warning")]
    assert sorted(line.split(": ")[1] for line in errors) == [
        "schedule",
        "timezone",
        "webhooks[0].events",
        "webhooks[1].channels",
    ]
