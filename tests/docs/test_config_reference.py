"""docs/configuration.md is generated from the assembled schemas and must not go stale."""

from __future__ import annotations

import pytest

from .conftest import DOCS, load_script

gen = load_script("gen_config_reference")


@pytest.fixture(scope="module")
def rendered() -> str:
    missing = gen.missing_plugins()
    if missing:
        pytest.skip(f"needs every first-party plugin installed (missing: {', '.join(missing)})")
    return gen.render()


def test_configuration_reference_is_current(rendered: str) -> None:
    current = (DOCS / "configuration.md").read_text()
    assert current == rendered, f"docs/configuration.md is stale: run `{gen.COMMAND}`"


def test_rendering_is_deterministic(rendered: str) -> None:
    assert gen.render() == rendered


def test_every_schema_key_is_documented(rendered: str) -> None:
    """Each property name of both schemas appears as a `key` cell, variants included."""
    from llamaherd.plugins import PluginManager
    from llamaherd.schema import Schemas

    with gen.only_first_party():
        registry = PluginManager(load_entrypoints=True).registry()
    assembled = Schemas(registry)
    keys: set[str] = set()
    _collect(assembled.project_schema(), keys)
    _collect(assembled.agent_schema(), keys)
    missing = sorted(
        k for k in keys if not any(f in rendered for f in (f"| `{k}` |", f"[{k}", f".{k}]"))
    )
    assert not missing, f"keys missing from the reference: {missing}"


def _collect(schema: object, keys: set[str]) -> None:
    """Every name under a ``properties`` object, recursively (if/then branches included)."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                keys.update(k for k, v in value.items() if "const" not in v)
            _collect(value, keys)
    elif isinstance(schema, list):
        for item in schema:
            _collect(item, keys)
