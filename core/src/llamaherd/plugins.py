"""The plugin manager: built-ins and entry-point plugins, registered through one path.

Load order: built-in modules (``DEFAULT_PLUGINS``), then the ``llamaherd`` entry-point group via
stevedore (a plugin that fails to import becomes one warning), filtered by ``AL_LOAD_PLUGINS``
(allowlist) and ``AL_DISABLE_PLUGINS`` (blocklist), then ``check_pending()``. ``AL_PLUGINS``
names modules to register as plugins as well, entry points or not (as ``PYTEST_PLUGINS`` does:
tests hand ``al`` subprocesses their stand-in plugins this way).

Built-ins are imported on first use of a hook other than ``register_commands`` (they add no
commands; a test holds them to it): ``al --help`` and the client commands never import the
control API's web stack. They are then registered ahead of the entry-point plugins, so the
order hooks are called in is the same as if they had been loaded first.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import sys
import threading
import typing
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pluggy

from llamaherd import hookspecs, types

GROUP = "llamaherd"

DEFAULT_PLUGINS: tuple[str, ...] = (
    "llamaherd.triggers",
    "llamaherd.skills",
    "llamaherd.gateway",
    "llamaherd.control",
    "llamaherd.control_compat",
    "llamaherd.doctor",
    "llamaherd.budgets",
    "llamaherd.agent_tests.expectations",
)

# Registry kinds: hook name -> (attribute of Registry, the protocol its objects implement).
KINDS: dict[str, tuple[str, type]] = {
    "register_trigger_types": ("trigger_types", types.TriggerType),
    "register_webhook_sources": ("webhook_sources", types.WebhookSource),
    "register_runtimes": ("runtimes", types.Runtime),
    "register_credential_types": ("credential_types", types.CredentialType),
    "register_language_skills": ("language_skills", types.LanguageSkill),
    "register_providers": ("providers", types.Provider),
    "register_tables": ("table_sets", types.TableSet),
    "register_project_keys": ("project_keys", types.ProjectKey),
    "register_doctor_checks": ("doctor_checks", types.DoctorCheck),
    "register_admission_checks": ("admission_checks", types.AdmissionCheck),
    "register_expectations": ("expectations", types.Expectation),
}
# Registry kind -> its hook name.
HOOKS: dict[str, str] = {kind: hook for hook, (kind, _) in KINDS.items()}
# A registered name: a plain word that can be a config value and a path segment.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass
class PluginInfo:
    name: str
    distribution: str | None = None
    version: str | None = None
    builtin: bool = False
    hooks: list[str] = field(default_factory=list)
    registers: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # objects it registered that do not conform
    error: str | None = None  # set when the plugin failed to load


def _split_env(name: str) -> set[str] | None:
    value = os.environ.get(name)
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


class PluginManager:
    """Wraps pluggy's manager; knows each plugin's distribution and what it registered."""

    def __init__(self, load_entrypoints: bool = True):
        self.pm = pluggy.PluginManager(GROUP)
        self.pm.add_hookspecs(hookspecs)
        self.info: dict[str, PluginInfo] = {}
        self.failed: dict[str, str] = {}
        self._registry: Registry | None = None
        self._builtins_loaded = False
        self._load_named(_split_env("AL_PLUGINS") or set())
        if load_entrypoints:
            self._load_entrypoints()
        self._check_pending()

    def _load_builtins(self) -> None:
        """Register the built-in modules first in the call order: the entry-point plugins
        (and any registered since) are registered again after them."""
        if self._builtins_loaded:
            return
        self._builtins_loaded = True
        later = [(name, self.pm.get_plugin(name), self.info[name]) for name in list(self.info)]
        for name, _, _ in later:
            self.pm.unregister(name=name)
        self.info.clear()
        for module_name in DEFAULT_PLUGINS:
            self.register(importlib.import_module(module_name), module_name, builtin=True)
        for name, plugin, info in later:
            self.pm.register(plugin, name=name)
            self.info[name] = info
        self._registry = None
        self._check_pending()

    def _check_pending(self) -> None:
        """pluggy's ``check_pending`` (an implementation of an unknown hook: a typo), except
        that a third-party plugin failing it is dropped with one warning, not a crash."""
        while True:
            try:
                self.pm.check_pending()
                return
            except pluggy.PluginValidationError as exc:
                name = self.pm.get_name(exc.plugin)
                if name is None or self.info.get(name, PluginInfo(name)).builtin:
                    raise
                self.failed[name] = str(exc)
                _warn(f"plugin {name!r} ignored: {exc}")
                self.unregister(name)

    @property
    def hook(self) -> Any:
        self._load_builtins()
        return self.pm.hook

    def register(self, plugin: Any, name: str, *, builtin: bool = False) -> None:
        self.pm.register(plugin, name=name)
        self.info[name] = PluginInfo(
            name=name,
            distribution="llamaherd" if builtin else None,
            builtin=builtin,
            hooks=sorted(h.name for h in self.pm.get_hookcallers(plugin) or []),
        )
        self._registry = None

    def unregister(self, name: str) -> None:
        self.pm.unregister(name=name)
        self.info.pop(name, None)
        self._registry = None

    def _load_named(self, module_names: set[str]) -> None:
        for module_name in sorted(module_names):
            try:
                self.register(importlib.import_module(module_name), module_name)
            except Exception as exc:  # as an entry point that fails: one warning
                self.failed[module_name] = f"{type(exc).__name__}: {exc}"
                _warn(f"plugin {module_name!r} failed to load: {type(exc).__name__}: {exc}")

    def _load_entrypoints(self) -> None:
        from stevedore import ExtensionManager

        allow = _split_env("AL_LOAD_PLUGINS")
        block = _split_env("AL_DISABLE_PLUGINS") or set()

        def on_failure(_manager: Any, entrypoint: Any, exc: BaseException) -> None:
            self.failed[entrypoint.name] = f"{type(exc).__name__}: {exc}"
            _warn(f"plugin {entrypoint.name!r} failed to load: {type(exc).__name__}: {exc}")

        def wanted(ext: Any) -> bool:
            name = ext.entry_point.name
            return name not in block and (allow is None or name in allow)

        manager = ExtensionManager(
            namespace=GROUP,
            invoke_on_load=False,
            on_load_failure_callback=on_failure,
        )
        for ext in manager:
            if not wanted(ext) or self.pm.has_plugin(ext.name):
                continue
            self.register(ext.plugin, ext.name)

    def call_each(self, hook_name: str, **kwargs: Any) -> list[Any]:
        """Call every implementation of a hook; one that raises becomes a warning naming it.
        Returns the answers of those that did not raise, None ones left out."""
        if hook_name != "register_commands":  # the one hook no built-in implements
            self._load_builtins()
        answers = []
        for impl in reversed(getattr(self.pm.hook, hook_name).get_hookimpls()):
            try:
                answer = impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
            except Exception as exc:  # a broken plugin must not take the CLI down
                _warn(
                    f"plugin {impl.plugin_name!r} failed in {hook_name}: {type(exc).__name__}: {exc}"
                )
                continue
            if answer is not None:
                answers.append(answer)
        return answers

    def registry(self) -> Registry:
        self._load_builtins()
        if self._registry is None:
            self._registry = Registry(self)
        return self._registry

    def describe(self, show_all: bool = False) -> list[PluginInfo]:
        """Plugins by name with distribution and version, those that failed to load included
        (with ``error``); core's built-ins only with ``show_all``.

        Distributions are looked up here, not at load time, so ``al --help`` does not pay for
        scanning every installed distribution's metadata.
        """
        self.registry().complete()
        dists = entrypoint_distributions()
        failed = [PluginInfo(name, error=error) for name, error in self.failed.items()]
        rows = []
        for info in [*self.info.values(), *failed]:
            if info.builtin and not show_all:
                continue
            if info.builtin:
                info.version = _version("llamaherd")
            elif info.name in dists:
                info.distribution, info.version = dists[info.name]
            rows.append(info)
        return sorted(rows, key=lambda info: (not info.builtin, info.name))


def install_signature() -> tuple[Any, ...]:
    """Changes when a distribution is installed or removed: installing writes into a
    directory of ``sys.path`` (its ``.dist-info``, an editable install's ``.pth``)."""
    found = []
    for entry in sys.path:
        try:
            found.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            continue
    return tuple(found)


def installed_plugins() -> set[str]:
    """The entry-point plugins installed now (read afresh) that ``AL_LOAD_PLUGINS`` and
    ``AL_DISABLE_PLUGINS`` let load: what a process starting now would load."""
    from importlib import invalidate_caches
    from importlib.metadata import entry_points

    if os.environ.get("AL_NO_ENTRYPOINTS") == "1":
        return set()
    invalidate_caches()  # the metadata finders cache directory listings
    allow = _split_env("AL_LOAD_PLUGINS")
    block = _split_env("AL_DISABLE_PLUGINS") or set()
    names = {ep.name for ep in entry_points(group=GROUP)}
    return {name for name in names if name not in block and (allow is None or name in allow)}


def entrypoint_distributions() -> dict[str, tuple[str, str]]:
    """Entry-point name -> (distribution, version) for the ``llamaherd`` group."""
    from importlib.metadata import entry_points

    found: dict[str, tuple[str, str]] = {}
    for ep in entry_points(group=GROUP):
        if ep.dist is not None and ep.name not in found:
            found[ep.name] = (ep.dist.metadata["Name"], ep.dist.version)
    return found


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def nonconformance(obj: Any, protocol: type) -> str | None:
    """Why ``obj`` does not implement ``protocol`` (its annotated attributes and methods, then
    ``types.OPTIONAL_MEMBERS``; for a value type such as ``TableSet``, being one), or None when
    it does. Checked at registration, so a broken
    object is refused with one warning instead of failing later in some command."""
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not NAME.fullmatch(name):
        return f"{type(obj).__name__} has no valid `name` (got {name!r})"
    label = f"{protocol.__name__} {name!r}"
    if dataclasses.is_dataclass(protocol):  # a value type: its constructor checked its fields
        if isinstance(obj, protocol):
            return None
        return f"{type(obj).__name__} {name!r} is not a {protocol.__name__} (build it with one)"
    hints = typing.get_type_hints(protocol)
    for member, hint in hints.items():
        if not hasattr(obj, member):
            return f"{label} lacks `{member}`"
        if not _conforms(getattr(obj, member), hint):
            return f"{label}: `{member}` should be {_describe(hint)}"
    methods = [m for m, v in vars(protocol).items() if callable(v) and not m.startswith("_")]
    for member in methods:
        if not callable(getattr(obj, member, None)):
            return f"{label} lacks the method `{member}()`"
    for member, expected in types.OPTIONAL_MEMBERS.get(protocol, {}).items():
        if not hasattr(obj, member):
            continue
        value = getattr(obj, member)
        if expected is types.METHOD and not callable(value):
            return f"{label}: optional `{member}` should be a method"
        if expected is not types.METHOD and not isinstance(value, expected):
            return f"{label}: optional `{member}` should be {expected.__name__}"
    return None


def _conforms(value: Any, hint: Any) -> bool:
    """A shallow check of ``value`` against a type hint: the class, each list item, Optional."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, type(int | None)):
        return any(_conforms(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_conforms(v, item) for v in value)
    if origin is not None:
        return isinstance(value, origin)
    return isinstance(value, hint) if isinstance(hint, type) else True


def _describe(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


class Registry:
    """Everything the loaded plugins registered, by kind and name, with the supplying plugin.

    Each kind is collected when it is first read (its hook called then): plugins import
    their modules inside their hooks, so a scheduler that opens its store (``table_sets``)
    and starts listening imports no runtime, provider or doctor check yet."""

    trigger_types: dict[str, Any]
    webhook_sources: dict[str, Any]
    runtimes: dict[str, Any]
    credential_types: dict[str, Any]
    language_skills: dict[str, Any]
    providers: dict[str, Any]
    table_sets: dict[str, types.TableSet]
    project_keys: dict[str, types.ProjectKey]
    doctor_checks: dict[str, types.DoctorCheck]
    admission_checks: dict[str, types.AdmissionCheck]
    expectations: dict[str, types.Expectation]

    def __init__(self, manager: PluginManager):
        self._manager = manager
        self._owner: dict[tuple[str, str], str] = {}
        self._lock = threading.RLock()

    def __getattr__(self, kind: str) -> dict[str, Any]:
        """A kind not collected yet (only then is this called): call its hook now."""
        hook_name = HOOKS.get(kind)
        if hook_name is None:
            raise AttributeError(kind)
        with self._lock:
            if kind not in self.__dict__:
                self._gather(hook_name)
        return self.__dict__[kind]

    def _gather(self, hook_name: str) -> None:
        kind, protocol = KINDS[hook_name]
        table: dict[str, Any] = {}
        hook = getattr(self._manager.hook, hook_name)
        # Call each implementation ourselves so we know which plugin registered what.
        for impl in reversed(hook.get_hookimpls()):
            self._collect(self._manager, kind, table, protocol, impl)
        self.__dict__[kind] = table
        if kind == "trigger_types":
            self._bind()

    def complete(self) -> Registry:
        """Every kind collected (``al plugins`` lists what each plugin registered)."""
        for kind in HOOKS:
            getattr(self, kind)
        return self

    @property
    def owner(self) -> dict[tuple[str, str], str]:
        """(kind, name) -> the plugin that registered it, over every kind."""
        self.complete()
        return self._owner

    def _bind(self) -> None:
        """Hand the registry to the trigger types that build on other plugins' objects
        (``TriggerType.bind``); one that fails is a warning, like a failing hook."""
        for name, trigger in self.trigger_types.items():
            bind = getattr(trigger, "bind", None)
            if bind is None:
                continue
            try:
                bind(self)
            except Exception as exc:  # a broken plugin must not take the CLI down
                plugin = self._owner[("trigger_types", name)]
                _warn(f"plugin {plugin!r} failed in bind: {type(exc).__name__}: {exc}")

    def _collect(
        self, manager: PluginManager, kind: str, table: dict[str, Any], protocol: type, impl: Any
    ) -> None:
        plugin = impl.plugin_name

        def register(obj: Any) -> None:
            problem = nonconformance(obj, protocol)
            if problem:
                refusal = f"{kind[:-1].replace('_', ' ')} from plugin {plugin!r} refused: {problem}"
                manager.info[plugin].refused.append(refusal)
                _warn(refusal)
                return
            name = obj.name
            if name in table:
                other = self._owner[(kind, name)]
                _warn(
                    f"{kind[:-1].replace('_', ' ')} {name!r} from plugin {plugin!r} "
                    f"ignored: already registered by {other!r}"
                )
                return
            table[name] = obj
            self._owner[(kind, name)] = plugin
            manager.info[plugin].registers.append(f"{kind[:-1].replace('_', '-')}:{name}")

        try:
            impl.function(register=register)
        except Exception as exc:  # a broken plugin must not take the CLI down
            _warn(f"plugin {plugin!r} failed in {kind}: {type(exc).__name__}: {exc}")

    def tools(self) -> dict[str, Any]:
        """Every language-skill tool by name."""
        return {tool.name: tool for skill in self.language_skills.values() for tool in skill.tools}


@cache
def get_manager() -> PluginManager:
    """The process-wide plugin manager (``AL_NO_ENTRYPOINTS=1`` loads built-ins only)."""
    return PluginManager(load_entrypoints=os.environ.get("AL_NO_ENTRYPOINTS") != "1")


def registry() -> Registry:
    return get_manager().registry()


def describe_plugins(show_all: bool = False) -> list[PluginInfo]:
    """The loaded plugins as ``al plugins`` lists them: distribution, version, the hooks each
    implements and what it registered (core's built-ins only with ``show_all``)."""
    return get_manager().describe(show_all)


def reset() -> None:
    """Forget the process-wide manager (tests that install or register plugins)."""
    get_manager.cache_clear()


# Distributions that provide each first-party feature: named in errors when one is missing.
PROVIDED_BY: dict[tuple[str, str], str] = {
    ("runtimes", "container"): "llamaherd-docker",
    ("runtimes", "host-user"): "llamaherd-host-user",
    ("runtimes", "ssh"): "llamaherd-ssh",
    ("providers", "anthropic"): "llamaherd-anthropic",
    ("providers", "openai"): "llamaherd-openai",
    ("providers", "groq"): "llamaherd-openai",
    ("providers", "mistral"): "llamaherd-openai",
    ("providers", "openrouter"): "llamaherd-openai",
    ("providers", "xai"): "llamaherd-openai",
    ("providers", "custom"): "llamaherd-openai",
    ("providers", "google"): "llamaherd-google",
    ("providers", "scripted"): "llamaherd-scripted",
    ("trigger_types", "cron"): "llamaherd-cron",
    ("trigger_types", "webhooks"): "llamaherd-webhooks",
    ("webhook_sources", "github"): "llamaherd-github",
    ("webhook_sources", "generic"): "llamaherd-webhooks",
    ("webhook_sources", "sentry"): "llamaherd-sentry",
    ("webhook_sources", "linear"): "llamaherd-linear",
    ("webhook_sources", "slack"): "llamaherd-slack",
    ("webhook_sources", "discord"): "llamaherd-discord",
    ("webhook_sources", "mintlify"): "llamaherd-mintlify",
    ("webhook_sources", "twitter"): "llamaherd-twitter",
    ("credential_types", "github_token"): "llamaherd-github",
    ("credential_types", "git_ssh"): "llamaherd-github",
    ("credential_types", "github_webhook_secret"): "llamaherd-github",
    ("credential_types", "webhook_secret"): "llamaherd-webhooks",
    ("credential_types", "sentry_token"): "llamaherd-sentry",
    ("credential_types", "sentry_client_secret"): "llamaherd-sentry",
    ("credential_types", "linear_token"): "llamaherd-linear",
    ("credential_types", "linear_oauth"): "llamaherd-linear",
    ("credential_types", "linear_webhook_secret"): "llamaherd-linear",
    ("credential_types", "slack_bot_token"): "llamaherd-slack",
    ("credential_types", "slack_signing_secret"): "llamaherd-slack",
    ("credential_types", "discord_bot"): "llamaherd-discord",
    ("credential_types", "mintlify_token"): "llamaherd-mintlify",
    ("credential_types", "mintlify_webhook_secret"): "llamaherd-mintlify",
    ("credential_types", "x_twitter_api"): "llamaherd-twitter",
    ("credential_types", "x_twitter_user_oauth1"): "llamaherd-twitter",
    ("credential_types", "x_twitter_user_oauth2"): "llamaherd-twitter",
    ("credential_types", "anthropic_key"): "llamaherd-anthropic",
    ("credential_types", "openai_key"): "llamaherd-openai",
    ("credential_types", "groq_key"): "llamaherd-openai",
    ("credential_types", "mistral_key"): "llamaherd-openai",
    ("credential_types", "openrouter_key"): "llamaherd-openai",
    ("credential_types", "xai_key"): "llamaherd-openai",
    ("credential_types", "custom_key"): "llamaherd-openai",
    ("credential_types", "google_key"): "llamaherd-google",
    ("credential_types", "bugsnag_token"): "llamaherd-credentials-extra",
    ("credential_types", "cloudflare_api_token"): "llamaherd-credentials-extra",
    ("credential_types", "gcp_service_account"): "llamaherd-credentials-extra",
    ("credential_types", "hetzner_api_key"): "llamaherd-credentials-extra",
    ("credential_types", "netlify_token"): "llamaherd-credentials-extra",
    ("credential_types", "reddit_oauth"): "llamaherd-credentials-extra",
    ("credential_types", "vultr_api_key"): "llamaherd-credentials-extra",
    ("credential_types", "vps_ssh"): "llamaherd-credentials-extra",
    # Agent config.toml keys that a trigger plugin adds.
    ("agent_keys", "schedule"): "llamaherd-cron",
    ("agent_keys", "timezone"): "llamaherd-cron",
    ("agent_keys", "catchUp"): "llamaherd-cron",
    ("agent_keys", "every"): "llamaherd-cron",
    ("agent_keys", "webhooks"): "llamaherd-webhooks",
    # Project config.toml keys a plugin acts on (register_project_keys).
    ("project_keys", "telemetry"): "llamaherd-otel",
    # Subcommands and hooks of a plugin that core names when they are missing.
    ("commands", "mcp"): "llamaherd-mcp",
    ("commands", "env"): "llamaherd-deploy",
    ("commands", "push"): "llamaherd-deploy",
    ("commands", "service"): "llamaherd-deploy",
    ("hooks", "open_control_channel"): "llamaherd-deploy",
}
