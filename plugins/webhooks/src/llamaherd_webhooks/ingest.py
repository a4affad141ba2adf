"""One delivery, start to end: size, signature, parse, dedupe, route, record (``receipts``).

HTTP-free so the route, ``al webhooks replay`` and tests share it. ``engine`` is the running
Engine (``project``, ``store``, ``registry``, ``credentials``, ``emit``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaherd.api import (
    OverLimit,
    WebhookReply,
    admit_json,
    body_digest,
    json_too_deep,
    unrouted,
)
from llamaherd_webhooks.matching import entry_matches, filters_of
from llamaherd_webhooks.receipts import Receipts
from llamaherd_webhooks.throttle import RejectThrottle
from llamaherd_webhooks.trigger import make_event

log = logging.getLogger("llamaherd.webhooks")

DEFAULT_MAX_BODY = 1024 * 1024
# Header names that may carry secrets: never stored in receipts.
SECRET_HEADER_WORDS = ("signature", "authorization", "cookie", "token", "secret", "api-key")
# What a rejected request leaves in its dead letter: enough to debug a sender, too little to let
# anonymous requests fill the database. Headers: these, plus the source's event and delivery
# headers, each value cut to REJECTED_VALUE_KEPT characters.
REJECTED_BODY_KEPT = 1024
REJECTED_HEADERS = ("content-type", "content-length", "user-agent")
REJECTED_VALUE_KEPT = 200
# The result of a delivery's receipt while it waits for the agents (``Ingest._keep``).
PENDING = "pending: taken while the agents loaded"


@dataclass
class Outcome:
    """An HTTP answer: status code and JSON body, unless the source gave its own ``reply``."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)
    reply: WebhookReply | None = None
    # Logged by ``committed`` once the write transaction that made this answer has committed:
    # a commit that fails (a full disk) is answered 503 and logged as such, never as queued.
    log_line: str | None = field(default=None, compare=False)


def committed(outcome: Outcome) -> Outcome:
    if outcome.log_line is not None:
        log.info("%s", outcome.log_line)
    return outcome


@dataclass
class SourceConfig:
    """A ``[webhooks.<name>]`` table resolved against the installed source types."""

    name: str
    kind: str  # the source's type
    source: Any  # WebhookSource, configured for this table
    instance: str
    allow_unsigned: bool
    max_body: int
    filters: dict[str, Any] = field(default_factory=dict)  # the source type's filter keys


def safe_headers(headers: dict[str, str]) -> dict[str, str]:
    """Headers fit for a receipt: anything that may hold a secret or signature left out."""
    return {
        k: v for k, v in headers.items() if not any(w in k.lower() for w in SECRET_HEADER_WORDS)
    }


def rejected_headers(config: SourceConfig, headers: dict[str, str]) -> dict[str, str]:
    """The few headers a dead letter keeps (``REJECTED_HEADERS`` and the source's own event and
    delivery headers), values cut short."""
    source = config.source
    names = {*REJECTED_HEADERS, *(
        str(getattr(source, attr, "")).lower() for attr in ("event_header", "delivery_header")
    )}  # fmt: skip
    kept = {k: v[:REJECTED_VALUE_KEPT] for k, v in headers.items() if k.lower() in names}
    return safe_headers(kept)


def resolve_source(project: Any, registry: Any, name: str) -> SourceConfig | Outcome:
    """The declared source ``name``, or a 404 outcome explaining why it cannot be used."""
    table = (project.config.get("webhooks") or {}).get(name)
    if not isinstance(table, dict):
        return Outcome(404, {"error": f"no webhook source {name!r} in the project config.toml"})
    kind = table.get("type", "generic")
    source = registry.webhook_sources.get(kind)
    if source is None:
        return Outcome(404, {"error": f"webhook source {name!r}: type {kind!r} is not installed"})
    if hasattr(source, "configured"):
        source = source.configured(table)
    # Action Llama's spelling names the instance under the credential type's own name.
    instance = table.get(source.credential_type) if source.credential_type else None
    return SourceConfig(
        name=name,
        kind=kind,
        source=source,
        instance=str(instance if isinstance(instance, str) else table.get("credential", "default")),
        allow_unsigned=bool(table.get("allowUnsigned", False)),
        max_body=int(table.get("maxBodyBytes", DEFAULT_MAX_BODY)),
        filters=filters_of(source),
    )


def sources_of_type(project: Any, registry: Any, kind: str) -> list[SourceConfig]:
    """The declared sources of type ``kind``, by name: who takes a delivery posted to Action
    Llama's ``/webhooks/<type>`` URL when no source is named ``<type>``."""
    tables = project.config.get("webhooks") or {}
    names = sorted(
        name
        for name, table in tables.items()
        if isinstance(table, dict) and table.get("type", "generic") == kind
    )
    found = (resolve_source(project, registry, name) for name in names)
    return [config for config in found if isinstance(config, SourceConfig)]


@dataclass
class Write:
    """What is left of a delivery once examined: ``fn(*args)`` in one write transaction, whose
    result is the answer."""

    fn: Callable[..., Outcome]
    args: tuple[Any, ...]


class Routes:
    """One loaded project's sources and which agents' ``[[webhooks]]`` entries name each,
    resolved once (a live reload loads a new project, and with it new ``Routes``)."""

    def __init__(self, project: Any, registry: Any) -> None:
        self.project = project
        self.registry = registry
        self._candidates: dict[str, list[SourceConfig] | Outcome] = {}
        self._entries: dict[str, list[tuple[str, list[dict[str, Any]]]]] = {}

    def candidates(self, name: str) -> list[SourceConfig] | Outcome:
        """The source named ``name``; else, when ``name`` is a source type (Action Llama's
        ``/webhooks/github``), every declared source of that type; else the 404."""
        found = self._candidates.get(name)
        if found is None:
            config = resolve_source(self.project, self.registry, name)
            if isinstance(config, SourceConfig):
                found = [config]
            else:
                found = sources_of_type(self.project, self.registry, name) or config
            if len(self._candidates) < 1000:  # names come from requests: bounded
                self._candidates[name] = found
        return found

    def agents(self, config: SourceConfig, fields: dict[str, Any]) -> list[str]:
        """Names of the agents with an entry for ``config``'s source matching the event, in
        name order (``matching.matching_agents``, over only the entries that can match)."""
        entries = self._entries.get(config.name)
        if entries is None:
            entries = self._entries[config.name] = entries_for(self.project.agents, config.name)
        return [
            name
            for name, mine in entries
            if any(entry_matches(entry, config.name, fields, config.filters) for entry in mine)
        ]


def entries_for(agents: dict[str, Any], source: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """(agent, its ``[[webhooks]]`` entries that may take deliveries of ``source``), by name."""
    found = []
    for name, agent in sorted(agents.items()):
        mine = [
            entry
            for entry in agent.config.get("webhooks") or []
            if entry.get("source") in (None, source)
        ]
        if mine:
            found.append((name, mine))
    return found


class SecretCache:
    """Signing secrets by file, read again only when the file changed: a delivery costs one
    ``stat`` instead of reading the credential's files (rotating a secret with ``al creds``
    replaces the file, so the next delivery sees the new one)."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[tuple[int, ...], str]] = {}
        self.lock = threading.Lock()

    def read(self, path: str) -> str | None:
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        stamp = (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns)
        with self.lock:
            cached = self.entries.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            with open(path, encoding="utf-8") as fh:
                value = fh.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("cannot read the webhook secret %s: %s", path, exc)
            return None
        with self.lock:
            self.entries[path] = (stamp, value)
        return value


SECRETS = SecretCache()


def source_secrets(credentials: Any, config: SourceConfig) -> list[str]:
    """The source's signing secret (or public key) from its credential (``CredentialStore``),
    if stored: the field ``secret_field`` names, ``secret`` by default."""
    ctype = config.source.credential_type
    if not ctype:
        return []
    field = getattr(config.source, "secret_field", "secret")
    secret = SECRETS.read(secret_file(str(credentials.root), ctype, config.instance, field))
    return [secret] if secret else []


@functools.lru_cache(maxsize=256)
def secret_file(root: str, ctype: str, instance: str, field: str) -> str:
    """The file of a source's secret, its names checked (``CredentialStore.path``) once, not
    for every delivery."""
    from llamaherd.api import CredentialStore

    return str(CredentialStore(Path(root)).path(ctype, instance) / field)


def answer(config: SourceConfig, fields: dict[str, Any], outcome: Outcome) -> Outcome:
    """``outcome``, with the source's own reply to this delivery when it has one (a challenge
    answered, Discord's deferred response)."""
    reply = getattr(config.source, "reply", None)
    if reply is not None:
        routed = None if unrouted(fields) else outcome.body
        outcome.reply = reply(fields, routed)
    return outcome


def unrouted_body(fields: dict[str, Any]) -> dict[str, Any]:
    """The answer's body for a delivery routed nowhere (``unrouted``): what was ignored, or
    why the payload was not routed."""
    why = {"ignored": fields.get("event")} if fields.get("ignore") else {"reason": unrouted(fields)}
    return {"matched": 0, **why}


class Ingest:
    """Takes deliveries for one engine. ``throttle`` (the server's ``RejectThrottle``) bounds
    the rejected deliveries recorded per source and ``client`` address; without one (``al
    webhooks replay``) every rejection is recorded."""

    def __init__(
        self,
        engine: Any,
        throttle: RejectThrottle | None = None,
        client: str = "",
        routes: Routes | None = None,
    ):
        self.engine = engine
        self.receipts = Receipts(engine.store)
        self.throttle = throttle
        self.client = client
        self.routes = routes or Routes(engine.project, engine.registry)

    def source(self, name: str) -> SourceConfig | Outcome:
        return resolve_source(self.engine.project, self.engine.registry, name)

    def candidates(self, name: str) -> list[SourceConfig] | Outcome:
        """The source named ``name``; else, when ``name`` is a source type (Action Llama's
        ``/webhooks/github``), every declared source of that type; else the 404."""
        return self.routes.candidates(name)

    def pick(
        self, candidates: list[SourceConfig], headers: dict[str, str], body: bytes
    ) -> SourceConfig | Outcome:
        """The source a delivery to a type's URL belongs to: the only one; else the first
        whose secret verifies its signature; else the only one taking unsigned deliveries;
        else the first (which refuses it, 401)."""
        if len(candidates) == 1:
            return candidates[0]
        lowered = {k.lower(): v for k, v in headers.items()}
        for config in candidates:
            secrets = source_secrets(self.engine.credentials, config)
            if secrets and config.source.verify(lowered, body, secrets):
                return config
        unsigned = [config for config in candidates if config.allow_unsigned]
        if len(unsigned) > 1:
            names = ", ".join(config.name for config in unsigned)
            return Outcome(
                409,
                {
                    "error": f"several {unsigned[0].kind} sources take unsigned deliveries "
                    f"({names}): post to /webhooks/<source name>"
                },
            )
        return unsigned[0] if unsigned else candidates[0]

    def take(self, candidates: list[SourceConfig], headers: dict[str, str], body: bytes) -> Outcome:
        """``pick`` the source among ``candidates``, then ``receive`` the delivery."""
        config = self.pick(candidates, headers, body)
        return config if isinstance(config, Outcome) else self.receive(config, headers, body)

    def receive(self, config: SourceConfig, headers: dict[str, str], body: bytes) -> Outcome:
        """Process one delivery. Never raises: a failure is a 4xx (503 while the store is
        unavailable)."""
        try:
            step = self.examine(config, {k.lower(): v for k, v in headers.items()}, body)
            if isinstance(step, Outcome):
                return step
            outcome = committed(self.engine.store.write(step.fn, *step.args))
        except Exception as exc:
            return self._failed(config, exc)
        if self.kept_late(outcome):
            self.route_pending()
        return outcome

    def kept_late(self, outcome: Outcome) -> bool:
        """Whether ``outcome`` kept its delivery for the agents, which became ready before
        that was committed: the routing at their loading's end may not have seen it."""
        return outcome.body.get("pending") is True and self.engine.loading.ready

    async def receive_async(
        self, config: SourceConfig, headers: dict[str, str], body: bytes
    ) -> Outcome:
        """``receive`` on an event loop, ``headers`` lower-cased already: everything but the
        write runs here, the write on the store's writer (``Store.write_async``)."""
        try:
            step = self.examine(config, headers, body)
            if isinstance(step, Outcome):
                return step
            outcome = committed(await self.engine.store.write_async(step.fn, *step.args))
        except Exception as exc:
            return self._failed(config, exc)
        if self.kept_late(outcome):
            await asyncio.get_running_loop().run_in_executor(None, self.route_pending)
        return outcome

    @staticmethod
    def _failed(config: SourceConfig, exc: Exception) -> Outcome:
        """What a delivery that failed is answered: 503 while the store is unavailable, else
        422 (never a 500)."""
        from llamaherd.api import StoreError

        if isinstance(exc, StoreError):
            log.error("webhook %s: the store is unavailable: %s", config.name, exc)
            return Outcome(503, {"error": "store unavailable, retry later"})
        log.error("webhook %s: delivery could not be processed", config.name, exc_info=exc)
        return Outcome(422, {"error": "delivery could not be processed"})

    def examine(
        self, config: SourceConfig, headers: dict[str, str], body: bytes
    ) -> Outcome | Write:
        """Everything about a delivery that needs no database, in order: its size (the
        server took up to the largest of the sources a type's URL may stand for), its
        signature (before anything of the body is parsed), its fields, the agents it matches.
        What is left is one write (receipt, dedupe, queued items, all in one transaction)."""
        if len(body) > config.max_body:
            return self._reject(
                config, headers, b"", 413, f"body larger than {config.max_body} bytes"
            )
        if not config.allow_unsigned and not self._verified(config, headers, body):
            return self._reject(config, headers, body, 401, "missing or bad signature")
        try:
            # Lone surrogates ("\ud800") made U+FFFD and NaN null (stored, they break
            # listings), a body nested too deep or holding too long a number refused.
            fields = admit_json(config.source.parse(headers, body))
        except (OverLimit, RecursionError) as exc:  # RecursionError: the parser gave up
            why = f"body {exc if isinstance(exc, OverLimit) else json_too_deep()}"
            return self._reject(config, headers, body, 422, why, config.allow_unsigned)
        except ValueError as exc:
            # A verified sender's malformed delivery is not throttled: it holds the secret.
            return self._reject(config, headers, body, 400, str(exc), config.allow_unsigned)
        delivery = str(fields.get("delivery"))
        if unrouted(fields):
            return Write(self._unrouted, (config, delivery, headers, body, fields))
        # While the scheduler's agents load, none is matched here: ``_accept`` keeps it.
        agents = self.routes.agents(config, fields) if self.engine.loading.ready else None
        digest = self._digest(config, body)
        return Write(self._accept, (config, delivery, headers, body, fields, agents, digest))

    def _unrouted(
        self,
        config: SourceConfig,
        delivery: str,
        headers: dict[str, str],
        body: bytes,
        fields: dict[str, Any],
    ) -> Outcome:
        """A delivery the source acknowledges without routing it (``unrouted``: a ping, a
        payload without what its event needs): answered (200), recorded with the reason,
        queued for no agent and offered to no waiting run."""
        status = int(fields.get("status", 200))
        why = unrouted(fields)
        self._record(
            config, delivery, headers, body, status, str(why), [], event=fields.get("event")
        )
        log.info("webhook %s: delivery %s %s", config.name, delivery, why)
        outcome = Outcome(status, {"delivery": delivery, **unrouted_body(fields)})
        return answer(config, fields, outcome)

    def _accept(
        self,
        config: SourceConfig,
        delivery: str,
        headers: dict[str, str],
        body: bytes,
        fields: dict[str, Any],
        agents: list[str] | None,
        digest: str | None,
    ) -> Outcome:
        """A verified delivery, in one write transaction: dropped when its id was seen (or,
        for a source whose bodies are unique, its signed body: a replay under a new id), else
        queued for ``agents`` (and offered to waiting runs) with its receipt. ``agents`` None:
        taken while the agents loaded; still loading now, its receipt is kept to be routed
        once they are ready (``route_pending``), else it is matched here."""
        if self.receipts.seen(config.name, delivery):
            log.info("webhook %s: delivery %s is a duplicate: dropped", config.name, delivery)
            outcome = Outcome(200, {"delivery": delivery, "duplicate": True})
        elif digest is not None and self.receipts.seen_body(config.name, digest):
            log.warning(
                "webhook %s: delivery %s has the signed body of an earlier delivery (a replay): "
                "dropped",
                config.name,
                delivery,
            )
            outcome = Outcome(200, {"delivery": delivery, "duplicate": True})
        elif agents is None and not self.engine.loading.ready:
            outcome = self._keep(config, delivery, headers, body, fields, digest)
        else:
            if agents is None:  # the agents became ready since it was examined
                agents = self.routes.agents(config, fields)
            outcome = self._fan_out(config, delivery, headers, body, fields, agents, digest)
        return answer(config, fields, outcome)

    def _keep(
        self,
        config: SourceConfig,
        delivery: str,
        headers: dict[str, str],
        body: bytes,
        fields: dict[str, Any],
        digest: str | None,
    ) -> Outcome:
        """A delivery taken while the scheduler's agents load: its receipt (with the body
        and the headers its source parses) is kept as pending, in the write transaction the
        answer waits for, and routed once they are ready; across a restart too."""
        event = fields.get("event")
        self._record(config, delivery, headers, body, 202, PENDING, [], digest, event, True)
        line = (
            f"webhook {config.name}: delivery {delivery} ({event or '-'}) taken while the "
            "agents load: routed once they are ready"
        )
        return Outcome(202, {"delivery": delivery, "pending": True}, log_line=line)

    def route_pending(self) -> int:
        """Route the deliveries taken while the agents loaded (of this process, or of one
        that stopped before its agents were ready), oldest first, each in one write
        transaction that takes it first: two schedulers never route one twice. How many."""
        routed = 0
        for receipt_id in self.receipts.pending():
            outcome = self.engine.store.write(self._route_kept, receipt_id)
            if outcome is not None:
                committed(outcome)
                routed += 1
        return routed

    def _route_kept(self, receipt_id: int) -> Outcome | None:
        """One kept delivery routed as it would have been when it came (its source as the
        config names it now); None when another router took it first."""
        if not self.receipts.take(receipt_id):
            return None
        receipt = self.receipts.get(receipt_id)
        assert receipt is not None  # taken in this transaction
        headers, body, delivery = dict(receipt["headers"]), receipt["body"], receipt["delivery_id"]
        config = self.source(receipt["source"])
        if isinstance(config, Outcome):
            self.receipts.settle(receipt_id, f"not routed: {config.body['error']}", [])
            return config
        try:
            fields = admit_json(config.source.parse(headers, body))
        except (OverLimit, RecursionError, ValueError) as exc:  # admitted when it came: only
            # a changed source type fails
            self.receipts.settle(receipt_id, f"not routed: {exc}", [])
            return Outcome(400, {"error": str(exc)})
        agents = self.routes.agents(config, fields)
        return self._fan_out(
            config, delivery, headers, body, fields, agents, None, receipt_id=receipt_id
        )

    def replay(self, receipt_id: int) -> Outcome:
        """Route an accepted delivery again, as a new delivery (``replay-<id>-<random>``): for
        the operator (the dashboard's Replay, with the control token), so the signature (never
        stored) is not checked again. A rejected one (a dead letter: unverified, malformed, its
        body cut) is refused. It leaves a receipt of its own."""
        import uuid

        receipt = self.receipts.get(receipt_id)
        if receipt is None:
            return Outcome(404, {"error": f"no delivery {receipt_id}"})
        if receipt["status"] >= 400:  # unverified, malformed or cut: never run on a click
            why = f"delivery {receipt_id} was rejected ({receipt['status']}: {receipt['result']})"
            return Outcome(409, {"error": f"{why}: only accepted deliveries are replayed"})
        config = self.source(receipt["source"])
        if isinstance(config, Outcome):
            return config
        headers, body = dict(receipt["headers"]), receipt["body"]
        try:
            fields = config.source.parse(headers, body)
        except ValueError as exc:
            return Outcome(400, {"error": f"delivery {receipt_id}: {exc}"})
        if unrouted(fields):
            return Outcome(200, unrouted_body(fields))
        delivery = f"replay-{receipt_id}-{uuid.uuid4().hex[:8]}"
        fields["delivery"] = delivery
        agents = self.routes.agents(config, fields)
        # One write transaction for the whole fan-out and its receipt.
        return committed(
            self.engine.store.write(
                self._fan_out, config, delivery, headers, body, fields, agents, None
            )
        )

    def challenge(self, config: SourceConfig, query: dict[str, str]) -> Outcome:
        """A GET to the source's URL: its ``answer_get`` reply (X's CRC), 405 for a source
        that takes no GET, 401 without a secret to answer with, 400 for a GET that is no
        challenge. Nothing is stored or queued."""
        answer_get = getattr(config.source, "answer_get", None)
        if answer_get is None:
            return Outcome(405, {"error": f"{config.kind} sources take POST only"})
        secrets = source_secrets(self.engine.credentials, config)
        if not secrets:
            log.warning("webhook %s: no secret to answer a challenge with", config.name)
            return Outcome(401, {"error": "no secret to answer the challenge with"})
        reply = answer_get(query, secrets)
        if reply is None:
            return Outcome(400, {"error": "not a challenge this source answers"})
        return Outcome(reply.status, reply=reply)

    @staticmethod
    def _digest(config: SourceConfig, body: bytes) -> str | None:
        """The digest a delivery's body is known by, for a source whose bodies are unique per
        event (``dedupe_bodies``) and only when it was verified: on a source that also takes
        unsigned deliveries anyone could send a genuine body first."""
        if config.allow_unsigned or not getattr(config.source, "dedupe_bodies", False):
            return None
        return body_digest(body)

    def _verified(self, config: SourceConfig, headers: dict[str, str], body: bytes) -> bool:
        secrets = source_secrets(self.engine.credentials, config)
        if not secrets:
            log.warning(
                "webhook %s: no %s credential holds a secret; refusing deliveries",
                config.name,
                config.source.credential_type,
            )
        return config.source.verify(headers, body, secrets)

    def _fan_out(
        self,
        config: SourceConfig,
        delivery: str,
        headers: dict[str, str],
        body: bytes,
        fields: dict[str, Any],
        agents: list[str],
        digest: str | None,
        receipt_id: int | None = None,
    ) -> Outcome:
        """Queue the delivery for ``agents``, offer it to waiting runs and keep its receipt
        (in the caller's write transaction); ``receipt_id``: the receipt it was kept under
        while the agents loaded, which now says what became of it."""
        queued, refused, flow = [], {}, {}
        # To each matched agent, then to every waiting run, whatever agent it belongs to (wait
        # filters are their own): the waiting runs are read once for all of them.
        events = [make_event(agent, config.name, config.kind, fields) for agent in [*agents, ""]]
        emitted_all = self.engine.emit_all(events)
        for agent, emitted in zip(agents, emitted_all, strict=False):
            if emitted.refused:
                refused[agent] = emitted.refused
            elif emitted.queued is not None:
                queued.append(agent)
            if emitted.flow:  # what the agent's [flow] did: dropped, skipped, debounced...
                flow[agent] = emitted.flow
        resumed = [run for emitted in emitted_all for run in emitted.resumed]
        result = "matched" if agents or resumed else "unmatched"
        if refused:
            result += "; refused " + ", ".join(f"{a} ({r})" for a, r in refused.items())
        if flow:
            result += "; flow " + ", ".join(f"{a} ({what})" for a, what in flow.items())
        event = fields.get("event")
        if receipt_id is None:
            self._record(config, delivery, headers, body, 202, result, agents, digest, event)
        else:
            self.receipts.settle(receipt_id, result, agents)
        line = (
            f"webhook {config.name}: delivery {delivery} ({fields.get('event') or '-'}) {result}; "
            f"queued for {', '.join(queued) or 'none'}; "
            f"resumed {', '.join(sorted(set(resumed))) or 'none'}"
        )
        return Outcome(
            202,
            {
                "delivery": delivery,
                "matched": len(agents),
                "agents": agents,
                "queued": queued,
                "refused": refused,
                "resumed": sorted(set(resumed)),
                **({"flow": flow} if flow else {}),
            },
            log_line=line,
        )

    def _reject(
        self,
        config: SourceConfig,
        headers: dict[str, str],
        body: bytes,
        status: int,
        why: str,
        anonymous: bool = True,
    ) -> Outcome:
        """Answer ``status``; keep a cut of the request as a dead letter, unless an
        ``anonymous`` (unverified) sender has had its share of them (then 429, nothing kept or
        logged)."""
        throttled = anonymous and self.throttle is not None
        if throttled and not self.throttle.allow(config.name, self.client):
            return Outcome(429, {"error": f"{why}; too many rejected deliveries, retry later"})
        unrecorded = self.throttle.take_suppressed(config.name) if self.throttle else 0
        log.warning(
            "webhook %s: rejected with %d: %s%s",
            config.name,
            status,
            why,
            f" ({unrecorded} more rejected before this were not recorded)" if unrecorded else "",
        )
        kept = body[:REJECTED_BODY_KEPT]
        result = why if kept == body else f"{why} (body cut to {len(kept)} of {len(body)} bytes)"
        # Rejected requests are kept without their claimed delivery id, so a forged id can
        # never make the genuine delivery look like a duplicate.
        letter = (config.name, None, rejected_headers(config, headers), kept, status, result, [])
        return Write(self._dead_letter, (letter, Outcome(status, {"error": why})))

    def _dead_letter(self, letter: tuple[Any, ...], outcome: Outcome) -> Outcome:
        self.receipts.record(*letter)
        return outcome

    def _record(
        self,
        config: SourceConfig,
        delivery: str | None,
        headers: dict[str, str],
        body: bytes,
        status: int,
        result: str,
        matched: list[str],
        digest: str | None = None,
        event: Any = None,
        pending: bool = False,
    ) -> None:
        self.receipts.record(
            config.name, delivery, safe_headers(headers), body, status, result, matched, digest,
            event if isinstance(event, str) else None, pending,
        )  # fmt: skip
