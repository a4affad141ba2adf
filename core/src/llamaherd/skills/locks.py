"""Locks: named resources (URIs) held by one run at a time, released when the run ends."""

from __future__ import annotations

from typing import Any

from llamaherd.skills.base import MAX_LOCK_URI, CoreSkill, capped, obj, refuse
from llamaherd.types import Tool
from llamaherd.write_budget import SPENT

PREAMBLE = """\
Locks (also `rlock URI`, `runlock URI`, `rlock-heartbeat [URI]`):
- acquire_lock(resource_key, ttl_seconds?): claim a shared resource (e.g. \
"github://owner/repo/issues/12") so other runs leave it alone. If another run holds it you get \
its id: skip that resource.
- release_lock(resource_key) when done; heartbeat_lock(resource_key) during long work (locks \
expire after {ttl:g} s unless you ask for more). Every lock is released when your run ends."""


def ttl(ctx: Any, args: dict[str, Any] | None = None) -> float:
    """The call's ``ttl_seconds`` (Action Llama's argument), else ``resourceLockTimeout``."""
    asked = (args or {}).get("ttl_seconds")
    if asked is not None:
        if isinstance(asked, bool) or not isinstance(asked, int | float) or asked <= 0:
            raise ValueError(f"ttl_seconds must be a positive number, got {asked!r}")
        return float(asked)
    return float(ctx.project.setting("resourceLockTimeout"))


def _uri(args: dict[str, Any]) -> str:
    """The resource: ``resource_key`` (Action Llama's name) or ``uri``."""
    raw = args.get("resource_key") or args.get("uri") or ""
    uri = capped("the lock uri", str(raw).strip(), MAX_LOCK_URI)
    if not uri:
        raise ValueError("a lock needs a resource_key (a URI such as lock://repo/main)")
    return uri


def acquire_lock(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    uri = _uri(args)
    seconds = ttl(ctx, args)
    # A lock row holds its uri twice (the row and its key's index). Past the run's write
    # budget a lock it holds is still extended (no new row); a new one is refused.
    if not ctx.within_budget(2 * len(uri.encode("utf-8", "surrogatepass"))):
        if ctx.store.heartbeat_lock(ctx.run_id, uri, seconds):
            return {"ok": True, "uri": uri, "note": "extended; " + SPENT}
        return refuse(f"no new lock: {SPENT}")
    result = ctx.store.acquire_lock(ctx.run_id, uri, seconds)
    ctx.log(
        "lock",
        {"uri": uri, "action": "acquire", "ok": result.get("ok"), "holder": result.get("holder")},
    )
    if not result.get("ok"):
        holder = result.get("holder")
        if result.get("deadlock"):
            result["error"] = f"deadlock: {' and '.join(result['deadlock'])} wait on each other"
        else:
            result["error"] = f"held by run {holder}"
    return result


def holder_of(ctx: Any, uri: str) -> str | None:
    return next(
        (
            lock.get("run_id") or lock.get("holder")
            for lock in ctx.store.locks()
            if lock.get("uri") == uri
        ),
        None,
    )


def release_lock(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    uri = _uri(args)
    if ctx.store.release_lock(ctx.run_id, uri):
        ctx.log("lock", {"uri": uri, "action": "release", "ok": True})
        return {"ok": True}
    holder = holder_of(ctx, uri)
    if holder is not None:
        return refuse(f"held by run {holder}, not by this run", holder=holder, forbidden=True)
    return refuse(f"no lock on {uri}")


def heartbeat_lock(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    uri = str(args.get("resource_key") or args.get("uri") or "").strip() or None
    count = ctx.store.heartbeat_lock(ctx.run_id, uri, ttl(ctx, args))
    if uri and not count:
        holder = holder_of(ctx, uri)
        if holder is not None:
            return refuse(f"held by run {holder}, not by this run", holder=holder, forbidden=True)
        return refuse(f"no lock on {uri}")
    return {"ok": True, "extended": count}


# Action Llama's argument names (``uri``, the earlier name, is still read).
RESOURCE_KEY = {
    "type": "string",
    "description": "URI identifying the resource (e.g. lock://repo/main-branch)",
}
TTL_SECONDS = {"type": "number", "description": "Lock TTL in seconds (default: 1800)"}


class LockSkill(CoreSkill):
    def preamble(self, run: Any) -> str:
        seconds = ttl(run) if run is not None else 1800.0
        return self.text.format(ttl=seconds)


SKILL = LockSkill(
    name="locks",
    category="locks",
    text=PREAMBLE,
    tools=[
        Tool(
            "acquire_lock",
            "Claim a resource URI; ok, or the run that holds it.",
            obj({"resource_key": RESOURCE_KEY, "ttl_seconds": TTL_SECONDS}, ("resource_key",)),
            acquire_lock,
        ),
        Tool(
            "release_lock",
            "Release a resource URI you hold.",
            obj({"resource_key": RESOURCE_KEY}, ("resource_key",)),
            release_lock,
        ),
        Tool(
            "heartbeat_lock",
            "Extend your lock on a URI (or all your locks without resource_key).",
            obj({"resource_key": RESOURCE_KEY, "ttl_seconds": TTL_SECONDS}),
            heartbeat_lock,
        ),
    ],
)
