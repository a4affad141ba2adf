"""docs/cli.md is generated from the click commands and must not go stale."""

from __future__ import annotations

import click
import pytest

from .conftest import DOCS, load_script

gen = load_script("gen_cli_reference")


@pytest.fixture(scope="module")
def rendered() -> str:
    missing = gen._config_reference().missing_plugins()
    if missing:
        pytest.skip(f"needs every first-party plugin installed (missing: {', '.join(missing)})")
    return gen.render()


def test_cli_reference_is_current(rendered: str) -> None:
    current = (DOCS / "cli.md").read_text()
    assert current == rendered, f"docs/cli.md is stale: run `{gen.COMMAND}`"


def test_rendering_is_deterministic(rendered: str) -> None:
    assert gen.render() == rendered


def test_every_command_and_option_is_documented(rendered: str) -> None:
    """Each command (subcommands included) has a heading, each option a row."""

    def walk(group: click.Group, path: str):
        for name, command in group.commands.items():
            yield f"{path} {name}", command
            if isinstance(command, click.Group):
                yield from walk(command, f"{path} {name}")

    missing = []
    for path, command in walk(gen.build_cli(), "al"):
        if f"# `{path}`" not in rendered:
            missing.append(path)
        for param in command.params:
            if isinstance(param, click.Option) and param.opts[-1] not in rendered:
                missing.append(f"{path} {param.opts[-1]}")
    assert not missing, f"missing from docs/cli.md: {missing}"


def test_plugin_commands_name_their_distribution(rendered: str) -> None:
    assert "## `al mcp` (llamaherd-mcp)" in rendered
    assert "### `al setup docker` (llamaherd-docker)" in rendered
    assert "## `al doctor`\n" in rendered
