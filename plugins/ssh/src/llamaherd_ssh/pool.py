"""Host pools: where a run goes, and how many runs each host holds, across schedulers.

The plugin's own tables (``register_tables``) live in the project's database, so every
scheduler sharing it (PostgreSQL) sees the same counts:

- ``ssh_leases``: one row per run placed on a host with a capacity, ``(host, slot)`` unique with
  ``slot < capacity``. Taking a lease inserts the lowest free slot with ``ON CONFLICT DO
  NOTHING``: two schedulers racing for the last slot cannot both get it, whatever the isolation
  level. A lease is freed when its run's sandbox is removed, and a lease whose run is no longer
  running or waiting (its scheduler died) is taken back at the next placement.
- ``ssh_hosts``: the last connection result of each host (``up``, or ``down`` with the error
  and since when), for ``al stat``, ``al doctor`` and the dashboard, and so placement skips a
  host that just failed (for ``RETRY_DOWN_AFTER`` seconds) instead of waiting for its timeout
  on every run.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import peewee as pw

from llamaherd.api import ConfigError, Hold, Store, Tables, TableSet
from llamaherd_ssh.settings import Host, Settings

NAME = "ssh"
RETRY_DOWN_AFTER = 30.0  # seconds a host that failed to connect is passed over
BUSY_RETRY = 2.0  # seconds before a run that found every host full is offered again
_LIVE = ("running", "waiting")


def define(db: pw.Database) -> Sequence[type[pw.Model]]:
    class Lease(pw.Model):
        host = pw.TextField()
        slot = pw.IntegerField()
        run_id = pw.TextField(unique=True)
        agent = pw.TextField()
        owner = pw.TextField()  # "<machine>:<pid>" of the scheduler that placed the run
        at = pw.DoubleField()

        class Meta:
            database = db
            table_name = "ssh_leases"
            indexes = ((("host", "slot"), True),)

    class HostState(pw.Model):
        host = pw.TextField(primary_key=True)
        up = pw.BooleanField()
        error = pw.TextField(null=True)
        since = pw.DoubleField()  # when it went up or down
        checked_at = pw.DoubleField()

        class Meta:
            database = db
            table_name = "ssh_hosts"

    return [Lease, HostState]


TABLES = TableSet(
    name=NAME,
    version=1,
    define=define,
    description="Runs placed on ssh hosts with a capacity, and each host's last connection result.",
)


@dataclass(frozen=True)
class HostView:
    """A host of an agent as ``al stat`` and the dashboard show it."""

    key: str
    capacity: int | None
    active: int
    up: bool | None  # None: never tried
    error: str | None
    since: float | None


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Pool:
    """The leases and host states of one store."""

    def __init__(self, store: Store):
        self.store = store

    def _t(self) -> Tables:
        return self.store.tables(NAME)

    # ------------------------------------------------------------------ leases
    def lease(self, hosts: Sequence[Host], run_id: str, agent: str) -> Host | None:
        """Place ``run_id`` on the least-loaded host of ``hosts`` with a free slot (ties: the
        first listed) and record it; None when every one is full. Hosts without a capacity
        count as always free."""
        return self.store.write(self._lease, list(hosts), run_id, agent)

    def _lease(self, hosts: list[Host], run_id: str, agent: str) -> Host | None:
        t = self._t()
        self._reclaim(t)
        rows = t.Lease.select(t.Lease.host, t.Lease.slot).where(
            t.Lease.host.in_([h.key for h in hosts])
        )
        taken: dict[str, set[int]] = {}
        for row in rows:
            taken.setdefault(row.host, set()).add(row.slot)

        def load(host: Host) -> float:
            used = len(taken.get(host.key, ()))
            return used / host.capacity if host.capacity else 0.0

        for host in sorted(hosts, key=load):  # stable: ties keep the configured order
            if host.capacity is None:
                return host
            free = [s for s in range(host.capacity) if s not in taken.get(host.key, ())]
            for slot in free:
                inserted = (
                    t.Lease.insert(
                        host=host.key, slot=slot, run_id=run_id, agent=agent, owner=_owner(),
                        at=self.store.clock(),
                    )
                    .on_conflict_ignore()
                    .execute()
                )  # fmt: skip
                if inserted and self._holds(t, run_id, host.key):
                    return host
        return None

    @staticmethod
    def _holds(t: Tables, run_id: str, host: str) -> bool:
        """Whether the insert just made is ours (an ignored conflict may still report a row)."""
        return t.Lease.select().where((t.Lease.run_id == run_id) & (t.Lease.host == host)).exists()

    def _reclaim(self, t: Tables) -> None:
        """Drop the leases of runs that are neither running nor waiting any more."""
        for lease in list(t.Lease.select(t.Lease.run_id)):
            run = self.store.get_run(lease.run_id)
            if run is None or run.state not in _LIVE:
                t.Lease.delete().where(t.Lease.run_id == lease.run_id).execute()

    def release(self, run_id: str) -> None:
        self.store.write(self._release, run_id)

    def _release(self, run_id: str) -> None:
        t = self._t()
        t.Lease.delete().where(t.Lease.run_id == run_id).execute()

    # ------------------------------------------------------------------ host states
    def mark(self, host: str, error: str | None) -> None:
        """Record a connection result (``error`` None: it connected)."""
        self.store.write(self._mark, host, error)

    def _mark(self, host: str, error: str | None) -> None:
        t = self._t()
        now = self.store.clock()
        up = error is None
        since = pw.Case(None, [(t.HostState.up == up, t.HostState.since)], now)
        changed = (
            t.HostState.update(up=up, error=error, since=since, checked_at=now)
            .where(t.HostState.host == host)
            .execute()
        )
        if not changed:
            t.HostState.insert(
                host=host, up=up, error=error, since=now, checked_at=now
            ).on_conflict_ignore().execute()

    def down(self, hosts: Sequence[Host]) -> dict[str, float]:
        """The hosts of ``hosts`` that failed to connect less than ``RETRY_DOWN_AFTER`` ago,
        each with when it may be tried again (the store's clock)."""
        t = self._t()
        cutoff = self.store.clock() - RETRY_DOWN_AFTER
        with self.store.guard():
            rows = t.HostState.select(t.HostState.host, t.HostState.checked_at).where(
                t.HostState.host.in_([h.key for h in hosts])
                & (t.HostState.up == False)  # noqa: E712 (peewee builds SQL from ==)
                & (t.HostState.checked_at > cutoff)
            )
            return {row.host: row.checked_at + RETRY_DOWN_AFTER for row in rows}

    def blocked(self, hosts: Sequence[Host]) -> Hold | None:
        """Why no host of ``hosts`` can take a run now (each full, or down less than
        ``RETRY_DOWN_AFTER`` ago), and when a down one may be tried again; None when one can.
        Leases of runs that are no longer running or waiting do not count (their slots are
        taken back at the next placement)."""
        t = self._t()
        down = self.down(hosts)
        with self.store.guard():
            leases = list(
                t.Lease.select(t.Lease.host, t.Lease.run_id).where(
                    t.Lease.host.in_([h.key for h in hosts])
                )
            )
        used: dict[str, int] = {}
        for lease in leases:
            run = self.store.get_run(lease.run_id)
            if run is not None and run.state in _LIVE:
                used[lease.host] = used.get(lease.host, 0) + 1
        why = []
        for host in hosts:
            if host.key in down:
                why.append(f"{host.key} down")
            elif host.capacity is None or used.get(host.key, 0) < host.capacity:
                return None
            else:
                why.append(f"{host.key} {used[host.key]}/{host.capacity}")
        reason = f"every host of its pool is full or down ({', '.join(why)})"
        return Hold(reason, min(down.values(), default=None))

    def views(self, hosts: Sequence[Host]) -> list[HostView]:
        t = self._t()
        keys = [h.key for h in hosts]
        with self.store.guard():
            states = {s.host: s for s in t.HostState.select().where(t.HostState.host.in_(keys))}
            counts: dict[str, int] = {}
            for lease in t.Lease.select(t.Lease.host).where(t.Lease.host.in_(keys)):
                counts[lease.host] = counts.get(lease.host, 0) + 1
        views = []
        for host in hosts:
            state: Any = states.get(host.key)
            views.append(
                HostView(
                    host.key,
                    host.capacity,
                    counts.get(host.key, 0),
                    None if state is None else bool(state.up),
                    None if state is None else state.error,
                    None if state is None else state.since,
                )
            )
        return views


class PoolAdmission:
    """Holds a pool agent's queued runs while every host of its pool is full or down, so the
    dispatcher does not claim runs only to put them back (``al stat`` shows why it waits). A
    race between schedulers still ends in ``SandboxBusy``: the lease decides."""

    name = "ssh"
    description = "An ssh pool agent's runs wait while every host of its pool is full or down."

    def hold(self, agent: Any, store: Any, now: float) -> Hold | None:
        if agent.runtime.get("type") != "ssh":
            return None
        try:
            settings = Settings.of(agent)
        except ConfigError:
            return None  # `al validate` says why; its runs fail with that
        return Pool(store).blocked(settings.hosts) if settings.pool else None
