"""A base for webhook sources signed with an HMAC of the raw body, the scheme most services use
(GitHub, Sentry, Linear, the generic source): subclass it, set the header names, and override
``normalise`` (the fields filters match) and, where the service differs, ``signed_message`` or
``load_json``. Header dicts passed in have lower-cased names.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from llamaherd.signatures import hmac_digest, signature_matches
from llamaherd.types import WebhookFilter
from llamaherd.waits import MISSING, lookup

# Characters of a free-text field (a message, a comment) kept in the normalised fields; the full
# text stays in the payload.
TEXT_LIMIT = 4000


def pick(data: Any, *paths: str) -> Any:
    """The first string or number (not a boolean) found at one of the dotted ``paths``, else
    None: how sources read payloads whose shape varies by event (and may be hostile)."""
    for path in paths:
        value = lookup(data, path)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return value
    return None


def clip(text: Any, limit: int = TEXT_LIMIT) -> str | None:
    """A free-text field for the prompt: at most ``limit`` characters (``...`` marks a cut),
    None when it is not text or is empty."""
    if not isinstance(text, str) or not text:
        return None
    return text if len(text) <= limit else text[:limit] + "..."


def parse_json(body: bytes) -> Any:
    """The JSON ``body``: through orjson (several times faster on a service's payloads of tens
    of kilobytes), else the standard parser, which also takes what orjson refuses (integers
    beyond 64 bits, ``NaN``); ValueError naming the fault when neither can."""
    import orjson  # with the first body parsed: a scheduler listens before it takes one

    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"body is not valid JSON: {exc}") from None


def json_object(body: bytes) -> dict[str, Any] | None:
    """The body as a JSON object, or None when it is not one (for code that must not raise on
    a hostile body: freshness checks, test helpers)."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return payload if isinstance(payload, dict) else None


def absent(data: Any, path: str) -> bool:
    """Whether the dotted ``path`` of ``data`` holds nothing a JavaScript sender would count as
    there (missing, null, false, 0, ""): how Action Llama's providers test what a payload
    lacks, and so how ``HmacSource.lacks`` does."""
    value = lookup(data, path)
    if value is MISSING or value is None or value is False or value == "":
        return True
    return isinstance(value, int | float) and not isinstance(value, bool) and value == 0


def first_absent(data: Any, *paths: str) -> str | None:
    """The first of ``paths`` that is ``absent`` from ``data``, else None."""
    return next((path for path in paths if absent(data, path)), None)


def unrouted(fields: dict[str, Any]) -> str | None:
    """Why a parsed delivery is acknowledged without being routed to any agent or waiting run,
    else None: the source ``ignore``s it (a ping, a challenge: ``ignored: <event>``), or the
    payload lacks what its event needs (``lacks``: ``incomplete payload: no repository``, as
    Action Llama drops such a delivery)."""
    if fields.get("ignore"):
        return f"ignored: {fields.get('event')}"
    if fields.get("lacks"):
        return f"incomplete payload: no {fields['lacks']}"
    return None


def body_digest(body: bytes) -> str:
    """Stand-in delivery id for senders that send none: the same body is the same delivery."""
    return hashlib.sha256(body).hexdigest()


# ``[webhooks.<name>]`` keys that set header names, and the attribute each sets (``configured``).
HEADER_KEYS = {
    "signatureHeader": "signature_header",
    "deliveryHeader": "delivery_header",
    "eventHeader": "event_header",
    "eventField": "event_field",
}


# The filter keys of repository events (GitHub's, and the generic source's GitHub-like fields):
# filter key -> the field of ``HmacSource.normalise`` it matches.
REPOSITORY_FILTERS: dict[str, WebhookFilter] = {
    "actions": WebhookFilter("action", "Payload actions (opened, closed, ...)."),
    "repos": WebhookFilter("repo", 'Repository full names; globs allowed ("org/*").', True, True),
    "orgs": WebhookFilter("org", "Organisations.", fold=True),
    # As in Action Llama, an event without a branch (an issue, a comment) or a conclusion
    # passes these filters.
    "branches": WebhookFilter(
        "branch",
        "Pushed branch, a pull request's head branch, a workflow run's branch; globs allowed "
        "(an event without one passes).",
        glob=True,
        skip_when_absent=True,
    ),
    "labels": WebhookFilter("labels", "Any of these labels is present."),
    "assignee": WebhookFilter("assignees", "Assigned to any of these logins.", fold=True),
    "author": WebhookFilter("author", "Opened or pushed by any of these logins.", fold=True),
    "conclusions": WebhookFilter(
        "conclusion",
        "Check/workflow run conclusions (an event without one passes).",
        skip_when_absent=True,
    ),
}


class HmacSource:
    """Deliveries signed with an HMAC-SHA256 of the raw body (hex unless ``signature_encoding``
    says ``base64``), behind a prefix such as ``sha256=`` when ``signature_prefix`` names one
    (a signature without it is refused, as the services' senders always send it, unless
    ``signature_prefix_optional``). A subclass sets ``name``, ``description``,
    ``credential_type`` and ``schema`` (``WebhookSource``), and ``lacks`` when a payload can
    lack what its event needs."""

    signature_header = "X-Signature-256"
    signature_prefix = "sha256="
    signature_prefix_optional = False
    signature_encoding = "hex"
    delivery_header = "X-Delivery-Id"
    event_header = "X-Event"
    event_field = "event"
    filters = REPOSITORY_FILTERS

    def configured(self, config: dict[str, Any]) -> HmacSource:
        """A copy using the header names a ``[webhooks.<name>]`` table sets (those of
        ``HEADER_KEYS`` that this source's ``schema`` declares)."""
        source = copy.copy(self)
        schema = getattr(self, "schema", {})
        for key, attr in HEADER_KEYS.items():
            if key in config and key in schema:
                setattr(source, attr, str(config[key]))
        return source

    def signed_message(self, headers: dict[str, str], body: bytes) -> bytes:
        """What the sender signs: the raw body (Slack-style schemes sign more)."""
        return body

    def verify(self, headers: dict[str, str], body: bytes, secrets: list[str]) -> bool:
        """True when the signature header holds the HMAC under one of ``secrets``. Every
        secret is compared in constant time, so timing reveals nothing."""
        given = headers.get(self.signature_header.lower(), "").strip()
        if self.signature_prefix and given.lower().startswith(self.signature_prefix):
            given = given[len(self.signature_prefix) :]
        elif self.signature_prefix and not self.signature_prefix_optional:
            return False  # the bare MAC: not what the sender sends (a prefix says which MAC)
        if self.signature_encoding == "hex":
            given = given.lower()
        message = self.signed_message(headers, body)
        expected = [hmac_digest(s, message, encoding=self.signature_encoding) for s in secrets]
        return signature_matches(given, expected)

    def parse(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        """Normalised fields of a delivery; ValueError when the body is not a JSON object."""
        payload = self.load_json(headers, body)
        event = headers.get(self.event_header.lower()) or lookup(payload, self.event_field)
        fields = self.normalise(event if isinstance(event, str) else None, payload)
        fields["delivery"] = headers.get(self.delivery_header.lower()) or body_digest(body)
        lacks = self.lacks(fields["event"], payload)
        if lacks:
            fields["lacks"] = lacks
        return fields

    def lacks(self, event: str | None, payload: dict[str, Any]) -> str | None:
        """What the payload lacks that its ``event`` needs (``"repository"``), else None: such
        a delivery is acknowledged, recorded as ``incomplete payload: no <what>`` and routed
        nowhere (``unrouted``). None here: a generic sender's payload has no required shape."""
        return None

    def load_json(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        payload = parse_json(body)
        if not isinstance(payload, dict):
            raise ValueError("body must be a JSON object")
        return payload

    def normalise(self, event: str | None, payload: dict[str, Any]) -> dict[str, Any]:
        """Filterable fields; a generic sender may use GitHub-like keys or flat ones."""

        labels = payload.get("labels")
        return {
            "event": event,
            "action": pick(payload, "action"),
            "repo": pick(payload, "repository.full_name", "repo"),
            "org": pick(payload, "organization.login", "org"),
            "sender": pick(payload, "sender.login", "sender"),
            "number": pick(payload, "number"),
            "ref": pick(payload, "ref"),
            "branch": pick(payload, "branch"),
            "labels": [str(label) for label in labels] if isinstance(labels, list) else [],
            "author": pick(payload, "author"),
            "conclusion": pick(payload, "conclusion"),
            "payload": payload,
        }

    def request_headers(
        self, body: bytes, event: str | None, delivery: str, secret: str | None
    ) -> dict[str, str]:
        """Headers a genuine sender would send with ``body`` (``al webhooks test``, tests)."""
        headers = {"Content-Type": "application/json", self.delivery_header: delivery}
        if event:
            headers[self.event_header] = event
        return self.signed(headers, body, secret)

    def signed(self, headers: dict[str, str], body: bytes, secret: str | None) -> dict[str, str]:
        """``headers`` plus the signature a sender holding ``secret`` adds (None: unsigned)."""
        if secret is None:
            return headers
        lowered = {k.lower(): v for k, v in headers.items()}
        mac = hmac_digest(
            secret, self.signed_message(lowered, body), encoding=self.signature_encoding
        )
        return {**headers, self.signature_header: self.signature_prefix + mac}
