"""What `al new` asks, as Action Llama's `al new` asks it: the model provider, the model, its
API key; and the ``[models.*]`` table it writes from the answers."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import click

from llamaherd.errors import LlamaherdError

# Action Llama's choices, in its order and words (cli/commands/new.js); the first is the default.
PROVIDERS = [
    ("anthropic", "Anthropic Claude (recommended)"),
    ("openai", "OpenAI GPT/Codex"),
    ("scripted", "Scripted (offline, no key: the example agent only)"),
]
MODELS = {
    "anthropic": [
        ("claude-sonnet-4-20250514", "claude-sonnet-4-20250514 (recommended)"),
        ("claude-opus-4-20250514", "claude-opus-4-20250514"),
        ("claude-haiku-3-5-20241022", "claude-haiku-3-5-20241022"),
    ],
    "openai": [
        ("gpt-4o", "gpt-4o (recommended for coding)"),
        ("gpt-4", "gpt-4"),
        ("o1-preview", "o1-preview"),
        ("gpt-3.5-turbo", "gpt-3.5-turbo"),
    ],
}
KEY_TYPES = {"anthropic": "anthropic_key", "openai": "openai_key"}
NAMES = {"anthropic": "Anthropic", "openai": "OpenAI"}


@dataclass(frozen=True)
class ModelChoice:
    provider: str
    model: str

    @property
    def name(self) -> str:
        """The ``[models.<name>]`` Action Llama derives from the model id."""
        for word, name in (("sonnet", "sonnet"), ("opus", "opus"), ("haiku", "haiku")):
            if word in self.model:
                return name
        if "gpt-4o" in self.model:
            return "gpt4o"
        if "gpt-4" in self.model:
            return "gpt4"
        short = re.sub(r"[-_.]\d{4,}.*$", "", self.model.lower())
        return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", short)).strip("-") or "model"


def _select(message: str, choices: list[tuple[str, str]]) -> str:
    """A numbered menu; Enter picks the first (recommended) choice."""
    click.echo(message)
    for number, (_, label) in enumerate(choices, 1):
        click.echo(f"  {number}) {label}")
    values = [value for value, _ in choices]
    picked = click.prompt(
        "Choice",
        default="1",
        type=click.Choice([str(n) for n in range(1, len(choices) + 1)] + values),
        show_choices=False,
    )
    return values[int(picked) - 1] if picked.isdigit() else picked


def ask_model() -> ModelChoice | None:
    """Provider, then model, as Action Llama asks them; None for the offline example only."""
    click.echo("\n--- Model Provider ---\n")
    provider = _select("Select model provider:", PROVIDERS)
    if provider == "scripted":
        return None
    click.echo(f"\n--- {NAMES[provider]} Model ---\n")
    kind = "Claude" if provider == "anthropic" else "OpenAI"
    return ModelChoice(provider, _select(f"Select {kind} model:", MODELS[provider]))


def given_model(provider: str | None, model: str | None) -> ModelChoice | None:
    """``--provider`` and ``--model``; the provider's recommended model when only it is given."""
    if provider is None:
        if model is not None:
            raise LlamaherdError("--model needs --provider (anthropic, openai, ...)")
        return None
    check_provider(provider)
    if provider == "scripted":
        return None
    if model is None:
        if provider not in MODELS:
            raise LlamaherdError(f"--model: required with --provider {provider}")
        model = MODELS[provider][0][0]
    return ModelChoice(provider, model)


def check_provider(provider: str) -> None:
    """LlamaherdError (exit 2) unless ``provider`` is an installed model provider: an unknown
    name lists the installed ones, a first-party one not installed names its plugin. So
    ``al new`` never writes a project that fails ``al validate``."""
    from llamaherd.install import needs
    from llamaherd.plugins import PROVIDED_BY, registry
    from llamaherd.schema import did_you_mean, one_of

    installed = registry().providers
    if provider in installed:
        return
    dist = PROVIDED_BY.get(("providers", provider))
    if dist:
        raise LlamaherdError(f"--provider: {provider!r} {needs(dist)}")
    raise LlamaherdError(
        f"--provider: expected {one_of(installed)}, got {provider!r}"
        + did_you_mean(provider, installed)
    )


def ask_key(choice: ModelChoice) -> str | None:
    """The provider's API key, typed hidden; None when skipped (empty)."""
    kind = KEY_TYPES.get(choice.provider)
    if kind is None:
        return None
    click.echo(f"\n--- {NAMES[choice.provider]} Auth ---\n")
    key = click.prompt(
        f"{NAMES[choice.provider]} API key (empty: add it later with `al creds add {kind}`)",
        default="",
        hide_input=True,
        show_default=False,
    )
    return key.strip() or None


def store_key(choice: ModelChoice, key: str) -> None:
    from llamaherd.credentials import CredentialStore

    store = CredentialStore()
    store.write(KEY_TYPES[choice.provider], "default", {"token": key})
    click.echo(f"  Wrote {store.root}/{KEY_TYPES[choice.provider]}/default/")


def model_table(choice: ModelChoice | None) -> str:
    """The ``[models.<name>]`` table of the chosen model (nothing for the offline example)."""
    if choice is None:
        return ""
    lines = [
        "",
        f"# Chosen with `al new`. Its key: `al creds add {KEY_TYPES.get(choice.provider, '...')}`;"
        f' use it in an agent with models = ["{choice.name}"].',
        f"[models.{choice.name}]",
        f'provider = "{choice.provider}"',
        f'model = "{choice.model}"',
    ]
    if choice.provider == "anthropic":
        lines.append('thinkingLevel = "medium"')
    lines.append('authType = "api_key"')
    return "\n".join(lines) + "\n"


def summary(choice: ModelChoice, directory: Path, stored: bool) -> str:
    from llamaherd.credentials import CredentialStore

    key = KEY_TYPES.get(choice.provider)
    note = "" if stored or key is None else f"  (add the key: al creds add {key})"
    return (
        f"\nSetup complete!\n\n"
        f"  Provider:    {choice.provider}\n"
        f"  Model:       {choice.model} ([models.{choice.name}])\n"
        f"  Credentials: {CredentialStore().root}/{note}\n"
        f"  Project:     {directory.resolve()}/\n"
    )
