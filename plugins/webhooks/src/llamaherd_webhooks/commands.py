"""``al webhooks``: replay a payload through the matching code, send a signed test, list deliveries."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

import click

from llamaherd.api import AppContext, CommandFailed, LlamaherdError, pass_app, unrouted


@click.group("webhooks")
def webhooks() -> None:
    """Inspect and test webhook deliveries."""


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LlamaherdError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise LlamaherdError(f"{path}: invalid JSON: {exc}") from None


def _fixture(path: Path) -> tuple[dict[str, str], bytes]:
    """Headers and body of a fixture: ``{"headers": {...}, "payload": {...}}`` as recorded (or
    ``"body"``, as Action Llama's fixtures have it), or a bare payload object."""
    from llamaherd_webhooks.preview import recorded

    data = _read_json(path)
    if not isinstance(data, dict):
        raise LlamaherdError(f"{path}: expected a JSON object (a payload, or headers + payload)")
    return recorded(data)


def _source_name(project: Any, name: str | None, agent: Any = None) -> str:
    """The named source, else the agent's first, else the project's only one."""
    declared = sorted(project.config.get("webhooks") or {})
    if name is None and agent is not None:
        entries = agent.config.get("webhooks") or []
        name = entries[0].get("source") if entries else None
    if name is None and len(declared) == 1:
        name = declared[0]
    if name not in declared:
        choice = ", ".join(declared) or "none declared in config.toml"
        raise LlamaherdError(f"pick a webhook source with --source (sources: {choice})")
    return name


def _resolve(app: AppContext, name: str) -> Any:
    from llamaherd_webhooks.ingest import Outcome, resolve_source

    config = resolve_source(app.project, app.registry, name)
    if isinstance(config, Outcome):
        raise LlamaherdError(config.body["error"])
    return config


@webhooks.command("replay")
@click.argument("fixture", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option(
    "-s", "--source", "source_name", help="Webhook source (default: the only one declared)."
)
@click.option("--event", help="Event name, when the fixture does not carry its headers.")
@click.option(
    "-r",
    "--run",
    "run_",
    is_flag=True,
    help="Also queue a run of every matching agent (a running scheduler picks it up).",
)
@pass_app
def replay(
    app: AppContext, fixture: Path, source_name: str | None, event: str | None, run_: bool
) -> None:
    """Show which agents a payload FIXTURE would trigger (no signature check)."""
    from llamaherd_webhooks.matching import filters_of, matching_agents
    from llamaherd_webhooks.trigger import make_event

    name = _source_name(app.project, source_name)
    config = _resolve(app, name)
    headers, body = _fixture(fixture)
    delivery = f"replay-{uuid.uuid4()}"
    sign = getattr(config.source, "request_headers", None)
    synthetic = sign(body, event, delivery, None) if sign else {}
    headers = {**{k.lower(): v for k, v in synthetic.items()}, **headers}
    event_header = getattr(config.source, "event_header", None)
    if event and event_header:  # --event wins over the fixture's recorded header
        headers[event_header.lower()] = event
    try:
        fields = config.source.parse(headers, body)
    except ValueError as exc:
        raise LlamaherdError(f"{fixture}: {exc}") from None
    if why := unrouted(fields):
        click.echo(f"{name}: acknowledged, runs nothing ({why})")
        return
    fields["delivery"] = delivery  # a replay is a new delivery, never a duplicate
    agents = matching_agents(app.project.agents, name, fields, filters_of(config.source))
    what = fields.get("event") or "?"
    if fields.get("action"):
        what += f".{fields['action']}"
    click.echo(f"{name}: {what} matches {len(agents)} agent(s): {', '.join(agents) or '-'}")
    if not run_ or not agents:
        return
    from llamaherd.api import Engine

    engine = Engine(app.project)
    try:
        for agent in agents:
            answer = engine.emit(make_event(agent, name, config.kind, fields))
            state = (
                f"refused: {answer.refused}" if answer.refused else f"queued item {answer.queued}"
            )
            click.echo(f"{agent}: {state}")
    finally:
        engine.close()


@webhooks.command("test")
@click.argument("agent")
@click.option("--event", required=True, help="Event name, e.g. pull_request.")
@click.option(
    "--payload",
    "payload_file",
    required=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="JSON payload file.",
)
@click.option("--source", "source_name", help="Webhook source (default: the agent's first).")
@click.option(
    "--signing-key-env",
    "key_env",
    metavar="VAR",
    help="Sign with the value of $VAR instead of the stored secret (for a source signed with "
    "a private key, such as discord: the private key of a test key pair).",
)
@pass_app
def test(
    app: AppContext,
    agent: str,
    event: str,
    payload_file: Path,
    source_name: str | None,
    key_env: str | None,
) -> None:
    """Send a correctly signed delivery to the running scheduler and print its answer."""
    import requests

    name = _source_name(app.project, source_name, app.project.agent(agent))
    config = _resolve(app, name)
    _, body = _fixture(payload_file)
    sign = getattr(config.source, "request_headers", None)
    if sign is None:
        raise LlamaherdError(f"{config.kind} sources cannot sign a test delivery")
    delivery = str(uuid.uuid4())
    renew = getattr(config.source, "renew", None)
    if renew is not None:  # a recorded payload's id and signed timestamp are old by now
        body = renew(body, delivery)
    try:
        headers = sign(body, event, delivery, _signing_key(config, key_env))
    except ValueError as exc:  # a signing key the source cannot use (not a private key)
        raise LlamaherdError(f"cannot sign a {config.kind} delivery: {exc}") from None
    url = f"{_scheduler_url(app.project)}/webhooks/{name}"
    try:
        response = requests.post(url, data=body, headers=headers, timeout=30)
    except requests.RequestException as exc:
        raise CommandFailed(
            f"no scheduler answered at {url} ({type(exc).__name__}); start it with `al start`"
        ) from None
    click.echo(f"HTTP {response.status_code}")
    click.echo(response.text)
    if response.status_code >= 400:  # refused: a script must see it failed
        sys.exit(1)


def _signing_key(config: Any, key_env: str | None) -> str | None:
    """What ``al webhooks test`` signs with: ``$key_env``, else the stored secret (None for an
    unsigned source without one)."""
    import os

    from llamaherd.api import CredentialStore
    from llamaherd_webhooks.ingest import source_secrets

    if key_env is not None:
        value = os.environ.get(key_env, "").strip()
        if not value:
            raise LlamaherdError(f"--signing-key-env: environment variable {key_env} is not set")
        return value
    if getattr(config.source, "signs_with_private_key", False):
        raise LlamaherdError(
            f"{config.kind} deliveries are signed with the sender's private key, which llamaherd "
            "never stores: sign with a test key pair's private key (--signing-key-env), or "
            "queue the payload unsigned with `al webhooks replay FIXTURE --run`"
        )
    secrets = source_secrets(CredentialStore(), config)
    if not secrets and not config.allow_unsigned:
        ctype = config.source.credential_type
        raise LlamaherdError(
            f"no secret for source {config.name!r}: add it with "
            f"`al creds add {ctype}:{config.instance}`"
        )
    return secrets[0] if secrets else None


def _scheduler_url(project: Any) -> str:
    from llamaherd.api import scheduler_info

    info = scheduler_info(project.state_dir)
    if info:
        return str(info["url"]).rstrip("/")
    gateway = project.gateway
    host = "127.0.0.1" if gateway["bind"] in ("0.0.0.0", "::", "") else gateway["bind"]
    return f"http://{host}:{gateway['port']}"


@webhooks.command("ls")
@click.option("--dead", is_flag=True, help="Only dead letters (rejected or unmatched).")
@click.option("--limit", default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def ls(app: AppContext, dead: bool, limit: int, as_json: bool) -> None:
    """Recent deliveries and dead letters."""
    from llamaherd.api import Store
    from llamaherd_webhooks.receipts import Receipts

    store = Store.open(app.project.database_url, str(app.project.root))
    try:
        rows = Receipts(store).recent(limit=limit, dead_letters=dead)
    finally:
        store.close()
    if as_json:
        click.echo(
            json.dumps(
                [{k: v for k, v in r.items() if k != "body"} for r in rows], indent=2, default=str
            )
        )
        return
    if not rows:
        click.echo("no deliveries" if not dead else "no dead letters")
        return
    from llamaherd.api import Column, print_table

    print_table(
        ["TIME", "SOURCE", "EVENT", Column("DELIVERY", keep=True), "STATUS", "RESULT", "AGENTS"],
        (_delivery_cells(row) for row in rows),
    )


def _delivery_cells(row: dict[str, Any]) -> tuple[str, ...]:
    from datetime import datetime

    from llamaherd.api import escape_markup as escape

    when = datetime.fromtimestamp(row["at"]).strftime("%Y-%m-%d %H:%M:%S")
    cells = (
        row.get("source"),
        row.get("event") or "-",
        row.get("delivery_id") or "-",
        row.get("status"),
        row.get("result"),
    )
    matched = ", ".join(row.get("matched") or []) or "-"
    return (when, *(escape(str(cell)) for cell in cells), escape(matched))
