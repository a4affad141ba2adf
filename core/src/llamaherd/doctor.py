"""``al doctor``: core's checks (a built-in plugin, ``register_doctor_checks``) and running them.

Core checks what it owns: the config (everything ``al validate`` reports), the credentials the
project refers to (present, and valid where their type can tell), webhook signatures, the
models' keys and base URLs, the gateway port, scales against the project cap, the database and
the scheduler. Plugins add theirs through the same hook (the docker plugin its daemon and
images, host-user its OS users). Checks run in parallel, each on its own thread; a check that
raises is one error finding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from llamaherd import hookimpl
from llamaherd.errors import CredentialInvalid, LlamaherdError
from llamaherd.types import Finding, Fix

PROBE_TIMEOUT = 5.0  # seconds for a network probe (a base URL, a port)


@dataclass
class Result:
    """A finding with the check that made it (and, after ``--fix``, what became of its fix)."""

    check: str
    finding: Finding
    fixed: str | None = None  # what the fix did
    fix_error: str | None = None  # why the fix failed


def run_checks(project: Any, registry: Any) -> list[Result]:
    """Every registered check's findings, core's checks first; a problem two checks report
    (the same message) is listed once (``_merge``)."""
    from concurrent.futures import ThreadPoolExecutor  # late: `al --help` imports this module

    from llamaherd.plugins import DEFAULT_PLUGINS

    checks = sorted(  # core's first: a plugin's findings read better after the config's
        registry.doctor_checks.values(),
        key=lambda c: registry.owner[("doctor_checks", c.name)] not in DEFAULT_PLUGINS,
    )
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(checks)))) as pool:
        found = list(pool.map(lambda check: _run_one(check, project, registry), checks))
    results: list[Result] = []
    seen: dict[str, Result] = {}
    for name, findings in found:
        for finding in findings:
            kept = seen.get(finding.message) if finding.status != "ok" else None
            if kept is None:
                results.append(Result(name, finding))
                seen.setdefault(finding.message, results[-1])
            else:
                _merge(kept, name, finding)
    return results


SEVERITY = {"ok": 0, "warning": 1, "error": 2}


def _merge(kept: Result, name: str, finding: Finding) -> None:
    """One problem reported twice: shown as the check that can fix it reports it, at the
    graver of the two statuses (``al validate`` may call a warning what a runtime's check
    knows to be an error)."""
    status = max(kept.finding.status, finding.status, key=lambda s: SEVERITY.get(s, 0))
    if kept.finding.fix is None and finding.fix is not None:
        kept.check, kept.finding = name, finding
    kept.finding.status = status


def _run_one(check: Any, project: Any, registry: Any) -> tuple[str, list[Finding]]:
    try:
        return check.name, list(check.check(project, registry) or [])
    except Exception as exc:  # a broken check is a finding, never a crash of `al doctor`
        return check.name, [Finding.error(check.name, f"check failed: {type(exc).__name__}: {exc}")]


# --------------------------------------------------------------------------- core's checks


class ConfigCheck:
    name = "config"
    description = "Everything `al validate` checks: the project and agent configs."

    def check(self, project: Any, registry: Any) -> list[Finding]:
        from llamaherd.schema import validate_project

        problems = validate_project(project, registry)
        findings = [Finding(_subject(p), p.severity, p.message) for p in problems]
        if not any(p.is_error for p in problems):
            count = len(project.agents)
            findings.append(Finding.ok("config.toml", f"valid, with {count} agent(s)"))
        return findings


def _subject(problem: Any) -> str:
    return f"{problem.file}: {problem.key}" if problem.key else problem.file


def credential_refs(project: Any, registry: Any) -> dict[tuple[str, str], list[str]]:
    """Every credential the project refers to -> who uses it (``agents/x``,
    ``models.y``, ``webhooks.z``): agents' ``credentials``, the keys of the models agents use,
    the signing secrets of webhook sources."""
    from llamaherd.credentials import parse_ref

    refs: dict[tuple[str, str], list[str]] = {}

    def add(ctype: str | None, instance: str, user: str) -> None:
        if ctype:
            refs.setdefault((ctype, instance or "default"), []).append(user)

    for agent in project.agents.values():
        for ref in agent.credentials:
            try:
                add(*parse_ref(ref), f"agents/{agent.name}")
            except LlamaherdError:
                continue  # the config check reports it
    used = {name for agent in project.agents.values() for name in agent.models}
    for name, table in _tables(project.config.get("models")):
        provider = registry.providers.get(table.get("provider"))
        if name in used and provider is not None and getattr(provider, "key_required", True):
            ctype, _, instance = str(table.get("credential", "default")).rpartition(":")
            add(ctype or getattr(provider, "credential_type", None), instance, f"models.{name}")
    for name, table in _tables(project.config.get("webhooks")):
        source = registry.webhook_sources.get(table.get("type"))
        if source is not None and not table.get("allowUnsigned", False):
            ctype = getattr(source, "credential_type", None)
            instance = table.get(ctype) if isinstance(table.get(ctype), str) else None
            add(ctype, instance or str(table.get("credential", "default")), f"webhooks.{name}")
    return refs


def _tables(value: Any) -> list[tuple[str, dict[str, Any]]]:
    items = value.items() if isinstance(value, dict) else ()
    return [(name, table) for name, table in items if isinstance(table, dict)]


class CredentialsCheck:
    name = "credentials"
    description = (
        "Every credential the project refers to: stored, and valid where its type can tell."
    )

    def check(self, project: Any, registry: Any) -> list[Finding]:
        from llamaherd.credentials import CredentialStore, format_ref, test_credential

        store = CredentialStore()
        findings = []
        for (ctype, instance), users in sorted(credential_refs(project, registry).items()):
            shown = format_ref(ctype, instance)
            subject = f"{shown} ({', '.join(users)})"
            credential_type = registry.credential_types.get(ctype)
            if credential_type is None:
                continue  # the config check names the missing plugin
            values = store.read(ctype, instance)
            if values is None:
                ref = f"{ctype}:{instance}"
                message = f"credential {ref} not found; add it with `al creds add {ref}`"
                fix = Fix(f"add {ref} now", _adder(credential_type, instance), interactive=True)
                findings.append(Finding.error(subject, message, fix))
                continue
            try:
                detail = test_credential(credential_type, values)
            except CredentialInvalid as exc:
                findings.append(Finding.error(subject, f"{shown}: {exc}"))
                continue
            findings.append(Finding.ok(subject, detail or "valid"))
        return findings


def _adder(credential_type: Any, instance: str) -> Any:
    """A fix that asks for each field of a credential (secrets hidden) and stores it."""

    def add() -> str:
        import click

        from llamaherd.credentials import CredentialStore, format_ref

        values = {}
        for field in credential_type.fields:
            label = f"{field.name} ({field.description})" if field.description else field.name
            values[field.name] = click.prompt(label, hide_input=field.secret, err=True)
        store = CredentialStore()
        store.write(credential_type.name, instance, values)
        return f"stored {format_ref(credential_type.name, instance)} in {store.root}"

    return add


class WebhooksCheck:
    name = "webhooks"
    description = "Webhook sources: signatures checked, or knowingly not."

    def check(self, project: Any, registry: Any) -> list[Finding]:
        findings = []
        for name, table in _tables(project.config.get("webhooks")):
            subject = f"webhooks.{name}"
            source = registry.webhook_sources.get(table.get("type"))
            if source is None:
                continue  # the config check names the missing plugin
            if table.get("allowUnsigned", False):
                findings.append(
                    Finding.warning(
                        subject,
                        "allowUnsigned = true: anyone who can reach the gateway can queue runs "
                        "through it; use it only on a private network",
                    )
                )
            else:
                ctype = getattr(source, "credential_type", None) or "no credential"
                findings.append(Finding.ok(subject, f"signatures checked ({ctype})"))
        return findings


class ModelsCheck:
    name = "models"
    description = "The models agents use: their key where the provider needs one, their base URL."

    def check(self, project: Any, registry: Any) -> list[Finding]:
        from llamaherd.credentials import CredentialStore
        from llamaherd.models import resolve_model

        store = CredentialStore()
        used = sorted({name for agent in project.agents.values() for name in agent.models})
        findings = []
        for name in used:
            try:
                entry = resolve_model(project, name, registry, store.read)
            except LlamaherdError:
                continue  # a missing key, plugin or table: the config and credentials checks
            findings.append(_model_finding(name, entry))
        return findings


def _model_finding(name: str, entry: Any) -> Finding:
    config, provider = entry.config, entry.provider
    subject = f"models.{name}"
    what = f"{provider.name} {config.model}"
    key = "key found" if config.api_key else "no key (the provider needs none)"
    if not config.base_url:
        return Finding.ok(subject, f"{what}: {key}")
    problem = _unreachable(config.base_url)
    if problem:
        return Finding.error(subject, f"{what}: base URL {config.base_url} {problem}")
    return Finding.ok(subject, f"{what} at {config.base_url}: answers; {key}")


def _unreachable(url: str) -> str | None:
    """Why ``url`` cannot be reached (no answer at all), or None when it answers anything."""
    import requests

    try:
        requests.get(url, timeout=PROBE_TIMEOUT, allow_redirects=False)
    except requests.RequestException as exc:
        return f"does not answer ({type(exc).__name__})"
    return None


class GatewayCheck:
    name = "gateway"
    description = "The gateway port: free, or held by this project's scheduler."

    def check(self, project: Any, registry: Any) -> list[Finding]:
        from llamaherd.local import scheduler_info

        gateway = project.gateway
        bind, port = str(gateway["bind"]), int(gateway["port"])
        subject = f"gateway {bind}:{port}"
        info = scheduler_info(project.state_dir)
        if info is not None and str(info.get("url", "")).endswith(f":{port}"):
            return [Finding.ok(subject, f"in use by this project's scheduler (pid {info['pid']})")]
        if port == 0:
            return [Finding.ok(subject, "a free port is picked at start")]
        problem = _bind_problem(bind, port)
        if problem:
            return [Finding.error(subject, problem)]
        return [Finding.ok(subject, "free")]


def _bind_problem(bind: str, port: int) -> str | None:
    import errno
    import socket

    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((bind, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return (
                    f"port {port} is used by another process: stop it, or set [gateway] port "
                    "(or `al start --port`)"
                )
            return f"cannot listen on {bind}:{port}: {exc.strerror}"
    return None


class ScaleCheck:
    name = "scale"
    description = "Agent scales against the project-wide cap (`scale`)."

    def check(self, project: Any, registry: Any) -> list[Finding]:
        cap = project.setting("scale")
        agents = project.agents.values()
        findings = [
            Finding.warning(f"agents/{a.name}", "scale = 0: the agent never runs")
            for a in agents
            if _scale(a) == 0
        ]
        if not isinstance(cap, int) or isinstance(cap, bool):
            return findings or [Finding.ok("scale", "no project-wide cap")]
        findings += [
            Finding.warning(
                f"agents/{a.name}",
                f"scale {_scale(a)} exceeds the project's scale {cap}: at most {cap} of its "
                "runs are active at once",
            )
            for a in agents
            if _scale(a) is not None and _scale(a) > cap
        ]
        overflow = project.scale_overflow()
        if overflow:
            findings.append(
                Finding.warning(
                    "scale",
                    f"agents' scales add up to {overflow[0]}, above the project's scale {cap}: "
                    "when all are busy, runs wait for a free slot",
                )
            )
        total = sum(_scale(a) or 0 for a in agents)
        return findings or [Finding.ok("scale", f"agents' scales add up to {total} (cap {cap})")]


def _scale(agent: Any) -> int | None:
    try:
        return agent.scale
    except (TypeError, ValueError):
        return None  # the config check reports it


class DatabaseCheck:
    name = "database"
    description = "The database: reachable, and migrated to this llamaherd's schema."

    def check(self, project: Any, registry: Any) -> list[Finding]:
        from llamaherd.store.connection import StoreError

        try:
            return database_findings(project, registry)
        except StoreError as exc:
            return [Finding.error("database", str(exc))]


def database_findings(project: Any, registry: Any) -> list[Finding]:
    """Read the schema versions recorded in the store's ``meta`` table, without migrating."""
    from pathlib import Path

    from llamaherd.store import migrations
    from llamaherd.store.connection import DATABASE_ERRORS, StoreError, connect, explain
    from llamaherd.store.schema import STAMP

    db, where, timeout = connect(project.database_url, str(project.root), create=False)
    subject = f"database {where}"
    if "://" not in where and not Path(where).exists():
        return [Finding.ok(subject, "not created yet: made at the first `al start` or `al run`")]
    try:
        stamps = dict(db.execute_sql('SELECT "key", "value" FROM meta').fetchall())
    except DATABASE_ERRORS as exc:
        text = str(exc).lower()
        if "no such table" not in text and "does not exist" not in text:
            raise StoreError(explain(where, timeout, exc)) from exc
        stamps = {}  # reachable, never opened by llamaherd
    finally:
        db.close()
    wanted = {STAMP: migrations.SCHEMA_VERSION}
    wanted.update({f"{STAMP}:{n}": t.version for n, t in registry.table_sets.items()})
    behind = []
    for key, version in wanted.items():
        have = int(stamps.get(key, 0))
        label = "core" if key == STAMP else f"tables {key.split(':', 1)[1]!r}"
        if have > version:
            return [
                Finding.error(
                    subject,
                    f"{label} at schema version {have}, newer than this llamaherd knows "
                    f"({version}): upgrade llamaherd (or the plugin)",
                )
            ]
        if have < version:
            behind.append(f"{label} {have or 'none'} -> {version}")
    if behind:
        fix = Fix("migrate it now", _migrator(project))
        return [
            Finding.warning(
                subject,
                f"reachable; not migrated yet ({', '.join(behind)}): the next `al start` or "
                "`al run` migrates it",
                fix,
            )
        ]
    return [Finding.ok(subject, f"reachable, schema version {migrations.SCHEMA_VERSION}")]


def _migrator(project: Any) -> Any:
    def migrate() -> str:
        from llamaherd.store import Store

        Store.open(project.database_url, str(project.root)).close()
        return "migrated"

    return migrate


class SchedulerCheck:
    name = "scheduler"
    description = "The project's scheduler: running, and with the config on disk."

    def check(self, project: Any, registry: Any) -> list[Finding]:
        from llamaherd.local import scheduler_info
        from llamaherd.status import scheduler_status

        status = scheduler_status(project, scheduler_info(project.state_dir))
        if not status["running"]:
            return [Finding.ok("scheduler", "not running here (`al start` runs it)")]
        subject = f"scheduler pid {status['pid']}"
        failures = [Finding.error(subject, problem) for problem in status["problems"]]
        return failures + self._config(subject, status)

    @staticmethod
    def _config(subject: str, status: dict[str, Any]) -> list[Finding]:
        if status["config_errors"]:
            problems = "; ".join(status["config_errors"])
            return [
                Finding.warning(
                    subject, f"refused the config on disk (the last good one runs): {problems}"
                )
            ]
        if status["config_current"] is False:
            return [
                Finding.warning(
                    subject,
                    "runs with an older config than the files on disk (it reloads an edit "
                    "within seconds; if this stays, restart it: `al stop && al start`)",
                )
            ]
        return [Finding.ok(subject, f"running, llamaherd {status['version']}, config current")]


CHECKS = (
    ConfigCheck(),
    CredentialsCheck(),
    WebhooksCheck(),
    ModelsCheck(),
    GatewayCheck(),
    ScaleCheck(),
    DatabaseCheck(),
    SchedulerCheck(),
)


@hookimpl
def register_doctor_checks(register: Any) -> None:
    for check in CHECKS:
        register(check)


def strict_config(project: Any, registry: Any) -> list[Result]:
    """``run_checks``, with the config's warnings about keys llamaherd reads differently or
    does not act on made errors (``al doctor --strict``, as Action Llama's makes unknown
    fields errors)."""
    from llamaherd.schema import validate_project

    strict = {(_subject(p), p.message) for p in validate_project(project, registry) if p.compat}
    results = run_checks(project, registry)
    for result in results:
        finding = result.finding
        if result.check == ConfigCheck.name and (finding.subject, finding.message) in strict:
            result.finding = dataclasses.replace(finding, status="error")
    return results


def failed(results: Iterable[Result]) -> bool:
    """Whether any finding is an error."""
    return any(r.finding.status == "error" for r in results)
