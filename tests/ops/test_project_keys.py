"""``register_project_keys``: a plugin's top-level project key is validated against its schema,
shown by `al schema`, and replaces core's schema of a key of the same name."""

from __future__ import annotations

from llamaherd import hookimpl
from llamaherd.schema import Schemas, validate_project


class AuditKey:
    name = "audit"
    description = "Where the audit plugin writes."
    schema = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "rotate": {"type": "boolean"}},
        "additionalProperties": False,
    }


class StrictRetention:
    """Core's `historyRetentionDays`, owned by a plugin with a stricter schema."""

    name = "historyRetentionDays"
    description = "Days kept (the retention plugin: at least 30)."
    schema = {"type": "integer", "minimum": 30}


class Plugin:
    @hookimpl
    def register_project_keys(self, register):
        register(AuditKey())
        register(StrictRetention())


def _problems(tmp_project, registry, config: str) -> list[str]:
    tmp_project.config(config)
    return [str(p) for p in validate_project(tmp_project.load(), registry)]


def test_a_plugin_key_is_validated_with_its_schema(tmp_project, registered_plugin):
    registry = registered_plugin(Plugin(), "audit")
    assert _problems(tmp_project, registry, '[audit]\npath = "/var/log/al"\n') == []
    assert _problems(tmp_project, registry, '[audit]\npaht = "/x"\n') == [
        'config.toml: audit.paht: unknown key (did you mean "path"?)'
    ]
    assert registry.owner[("project_keys", "audit")] == "audit"


def test_without_the_plugin_the_key_is_unknown(tmp_project):
    from llamaherd.plugins import registry

    assert any("audit: unknown key" in p for p in _problems(tmp_project, registry(), "[audit]\n"))


def test_a_plugin_key_replaces_cores_schema_of_the_same_name(tmp_project, registered_plugin):
    registry = registered_plugin(Plugin(), "audit")
    assert _problems(tmp_project, registry, "historyRetentionDays = 7\n") == [
        "config.toml: historyRetentionDays: expected a number >= 30, got 7"
    ]
    documented = Schemas(registry).project_schema()["properties"]
    assert documented["historyRetentionDays"]["description"].startswith("Days kept")
    assert documented["audit"]["properties"]["rotate"] == {"type": "boolean"}
