"""Fuzz the config loader: whatever bytes land in config.toml and SKILL.md, loading and
validating a project (what ``al validate`` does) raises nothing but ConfigError, and an agent
that validates cleanly resolves every setting without raising.

In-process with hypothesis: bounded examples, no deadline, seeded from the suite's seed.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import tomli_w
import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from llamaherd.plugins import registry
from llamaherd.project import load_project
from llamaherd.schema import validate_project
from llamaherd.types import LlamaherdError

SEED = int(os.environ.get("AL_RELIABILITY_SEED", 20261202))
EXAMPLES = int(os.environ.get("AL_FUZZ_EXAMPLES", 150))

AGENT_KEYS = [
    "source", "models", "credentials", "schedule", "every", "timezone", "catchUp", "webhooks",
    "hooks", "params", "scale", "timeout", "maxWorkQueueSize", "maxReruns", "waitTimeout",
    "runtime", "maxTurns", "onInterrupted", "unknownKey",
]  # fmt: skip
PROJECT_KEYS = [
    "models", "local", "gateway", "webhooks", "maxReruns", "maxCallDepth", "workQueueSize",
    "scale", "resourceLockTimeout", "defaultWaitTimeout", "historyRetentionDays", "database",
]  # fmt: skip
SUBKEYS = [
    "provider", "model", "type", "run_as", "groups", "pre", "post", "port", "bind", "image",
    "memory", "cpus", "timeout", "source", "events", "repos", "match", "credential",
    "allowUnsigned", "keepWorkdir", "authType", "base_url", "signatureHeader", "maxBodyBytes",
]  # fmt: skip
PLAUSIBLE = [
    "*/5 * * * *", "@hourly", "10m", "0s", "-1", "1e309", "Europe/Berlin", "Mars/Olympus",
    "scripted", "host-user", "container", "github", "generic", "sqlite:///x.db", "1800", "",
    "nan", "inf", "30m", "2h", "a:b:c", "github_token", "git_ssh:deploy",
]  # fmt: skip

scalars = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.sampled_from(PLAUSIBLE),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(SUBKEYS) | st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def toml_of(keys: list[str]) -> st.SearchStrategy[bytes]:
    """TOML that parses (structured, so the schema is reached) or arbitrary text. (Bytes that
    are not UTF-8 have their own test below.)"""
    structured = st.dictionaries(st.sampled_from(keys), values, max_size=6).map(_dump_toml)
    mangled = structured.flatmap(  # cut short at a character (not byte) boundary
        lambda raw: st.integers(0, max(len(raw) - 1, 0)).map(
            lambda cut: raw.decode("utf-8", "replace")[:cut].encode()
        )
    )
    return st.one_of(structured, mangled, st.text(max_size=300).map(str.encode))


def _dump_toml(data: dict[str, Any]) -> bytes:
    try:
        return tomli_w.dumps(data).encode()
    except (TypeError, ValueError):  # e.g. a list mixing tables and scalars
        return repr(data).encode()


frontmatter = st.one_of(
    st.dictionaries(st.sampled_from(["name", "description", "license", "x"]), values, max_size=4),
    values,
).map(lambda meta: yaml.safe_dump(meta, allow_unicode=True))
skills = st.one_of(
    frontmatter.map(lambda text: f"---\n{text}---\nDo the thing.\n".encode()),
    st.binary(max_size=300).map(lambda raw: b"---\n" + raw),
    st.text(max_size=200).map(lambda text: f"---\n{text}\n---\n".encode()),
    st.binary(max_size=200),
)


def resolve_everything(agent: Any) -> None:
    """What the scheduler reads of an agent that validated cleanly."""
    for name in ("scale", "timeout", "queue_size", "max_reruns", "wait_timeout", "models",
                 "credentials", "runtime", "params", "hooks", "description"):  # fmt: skip
        getattr(agent, name)


def check(project_toml: bytes, agent_toml: bytes, skill: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "agents" / "fuzzed").mkdir(parents=True)
        (root / "config.toml").write_bytes(project_toml)
        (root / "agents" / "fuzzed" / "config.toml").write_bytes(agent_toml)
        (root / "agents" / "fuzzed" / "SKILL.md").write_bytes(skill)
        try:
            project = load_project(root)
            problems = validate_project(project, registry())
        except LlamaherdError:  # ConfigError: one clear line for the user
            return
        assert all(str(problem).strip() for problem in problems)
        project_errors = [p for p in problems if p.is_error and p.agent is None]
        agent_errors = [p for p in problems if p.is_error and p.agent == "fuzzed"]
        if not project_errors:
            for setting in ("workQueueSize", "maxReruns", "maxCallDepth", "scale"):
                project.setting(setting)
            project.gateway, project.local, project.database_url  # noqa: B018
        if not project_errors and not agent_errors and "fuzzed" in project.agents:
            resolve_everything(project.agents["fuzzed"])


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@seed(SEED)
@FUZZ
@given(project_toml=toml_of(PROJECT_KEYS), agent_toml=toml_of(AGENT_KEYS), skill=skills)
def test_config_loader_never_crashes(project_toml, agent_toml, skill):
    check(project_toml, agent_toml, skill)


VALID_PROJECT = b'[models.scripted]\nprovider = "scripted"\nmodel = "scripted"\n'
VALID_SKILL = b"---\nname: fuzzed\ndescription: A fuzzed agent.\n---\nDo it.\n"


@seed(SEED + 1)
@FUZZ
@given(agent=st.dictionaries(st.sampled_from(AGENT_KEYS), values, min_size=1, max_size=4))
def test_agent_config_against_a_valid_project_never_crashes(agent):
    """The agent's keys alone, so most examples reach the agent schema and resolution."""
    check(VALID_PROJECT, _dump_toml({"models": ["scripted"], **agent}), VALID_SKILL)


def test_config_files_that_are_not_utf8_are_config_errors(tmp_path):
    """A stray byte (a Latin-1 editor, a binary pasted by mistake) is one clear line."""
    for target in ("config.toml", "agents/fuzzed/config.toml", "agents/fuzzed/SKILL.md"):
        root = tmp_path / target.replace("/", "_")
        (root / "agents" / "fuzzed").mkdir(parents=True)
        (root / "config.toml").write_bytes(VALID_PROJECT)
        (root / "agents" / "fuzzed" / "config.toml").write_bytes(b'models = ["scripted"]\n')
        (root / "agents" / "fuzzed" / "SKILL.md").write_bytes(VALID_SKILL)
        with open(root / target, "ab") as fh:
            fh.write(b"# caf\xe9\n")
        try:
            problems = validate_project(load_project(root), registry())
        except LlamaherdError as exc:
            assert target in str(exc), exc
            continue
        assert any(target in str(p) and p.is_error for p in problems), (target, problems)
