"""Coordination between runs and between schedulers: agent calls, resource locks (with
deadlock detection), trigger ticks claimed once, and the heartbeats of scheduler hosts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llamaherd.store.connection import Connection, columns, grouped, guarded

_CALL_COLUMNS = ("id", "caller_run", "target", "context", "depth", "state", "return_value",
                 "error", "run_id", "created_at", "finished_at")  # fmt: skip


def statements(q: Callable[[str], str], pg: bool) -> dict[str, str]:
    """Prepared statements of calls, locks and ticks (``Connection._sql``)."""
    return {
        "insert_call": q(
            'INSERT INTO calls (caller_run, target, context, depth, "state", created_at) '
            "VALUES (?, ?, ?, ?, 'pending', ?) RETURNING id"
        ),
        "get_call": q(f"SELECT {columns(_CALL_COLUMNS)} FROM calls WHERE id = ?"),
        "settle_call": q(
            "UPDATE calls SET state = ?, return_value = ?, error = ?, finished_at = ? "
            "WHERE id = ? AND run_id = ? AND state = 'pending'"
        ),
        "call_of": q("SELECT caller_run, depth FROM calls WHERE id = ?"),
        "call_run": q("UPDATE calls SET run_id = ?, state = 'pending' WHERE id = ?"),
        "drop_call": q(
            "UPDATE calls SET state = 'error', error = ?, finished_at = ? "
            "WHERE id = ? AND run_id IS NULL AND state = 'pending'"
        ),
        "lock_row": q(
            f"SELECT run_id, acquired_at, expires_at FROM locks WHERE uri = ?"
            f"{' FOR UPDATE' if pg else ''}"
        ),
        "expire_locks": q("DELETE FROM locks WHERE expires_at <= ?"),
        "lock_wait": q("SELECT uri FROM lock_waits WHERE run_id = ?"),
        "stop_waiting": q("DELETE FROM lock_waits WHERE run_id = ? AND uri = ?"),
        "release_lock": q("DELETE FROM locks WHERE uri = ? AND run_id = ?"),
        "extend_locks": q("UPDATE locks SET expires_at = ? WHERE run_id = ?"),
        "extend_lock": q("UPDATE locks SET expires_at = ? WHERE run_id = ? AND uri = ?"),
        "drop_locks": q("DELETE FROM locks WHERE run_id = ?"),
        "drop_waits": q("DELETE FROM lock_waits WHERE run_id = ?"),
        "insert_tick": q(
            'INSERT INTO trigger_ticks ("key", tick, claimed_at) VALUES (?, ?, ?) '
            "ON CONFLICT DO NOTHING"
        ),
        "last_tick": q('SELECT MAX(tick) FROM trigger_ticks WHERE "key" = ?'),
    }


class Coordination(Connection):
    """Calls, locks, trigger ticks and hosts."""

    # ------------------------------------------------------------ calls
    @guarded
    def create_call(self, caller_run: str, target: str, context: str, depth: int) -> int:
        """Record an agent call (pending until the run that serves it ends)."""
        with self._write():
            return self._value(
                self._sql.insert_call, (caller_run, target, context, depth, self._clock())
            )

    @guarded
    def get_call(self, call_id: int) -> dict[str, Any] | None:
        """{id, caller_run, target, state: pending|done|error, return_value, error, run_id}."""
        row = self._exec(self._sql.get_call, (call_id,)).fetchone()
        if row is None:
            return None
        call = dict(zip(_CALL_COLUMNS, row, strict=True))
        call["return_value"] = self._m.Call.return_value.python_value(call["return_value"])
        return call

    @guarded
    def call_ids(self, caller_run: str) -> list[int]:
        """The ids of the calls ``caller_run`` made, in order (its call 1, 2, ...)."""
        sql = self._statement(
            ("call_ids",), lambda: "SELECT id FROM calls WHERE caller_run = ? ORDER BY id"
        )
        return [row[0] for row in self._exec(sql, (caller_run,)).fetchall()]

    # ------------------------------------------------------------ locks
    @guarded
    def acquire_lock(self, run_id: str, uri: str, ttl: float) -> dict[str, Any]:
        """{"ok": True} or {"ok": False, "holder": run_id, "expires_at": t} or, when the holder
        is itself waiting on a lock this run holds, {"ok": False, "deadlock": [a, b], ...}.
        Expired locks are reclaimed first. Re-acquiring one's own lock extends it.

        A refused run is recorded as waiting for ``uri`` until it takes it, releases it or
        ends; a longer cycle of waits (a -> b -> c -> a) is refused too, naming every run."""
        sql = self._sql
        with self._write():
            now = self._clock()
            self._exec(sql.expire_locks, (now,))
            lock = self._exec(sql.lock_row, (uri,)).fetchone()  # (holder, acquired, expires)
            if lock is None or lock[0] == run_id:
                self._upsert(
                    self._m.Lock, uri=uri, run_id=run_id, expires_at=now + ttl,
                    acquired_at=lock[1] if lock else now,
                )  # fmt: skip
                self._exec(sql.drop_waits, (run_id,))
                return {"ok": True, "uri": uri, "expires_at": now + ttl}
            refused = {"ok": False, "holder": lock[0], "expires_at": lock[2]}
            cycle = self._wait_cycle(run_id, lock[0])
            if cycle:
                names = " -> ".join([*cycle, run_id])
                return {**refused, "deadlock": cycle, "message": f"deadlock: {names}"}
            self._upsert(self._m.LockWait, run_id=run_id, uri=uri, since=now)
            return refused

    def _wait_cycle(self, run_id: str, holder: str) -> list[str]:
        """[run_id, holder, ...] if following holder's waits leads back to run_id, else []."""
        chain = [run_id, holder]
        while len(chain) <= 64:
            uri = self._value(self._sql.lock_wait, (chain[-1],))
            next_holder = None if uri is None else self._value(self._sql.lock_row, (uri,))
            if next_holder is None or next_holder in chain[1:]:
                return []
            if next_holder == run_id:
                return chain
            chain.append(next_holder)
        return []

    @guarded
    def release_lock(self, run_id: str, uri: str) -> bool:
        """Release ``uri`` if ``run_id`` holds it (and stop waiting for it); True if held."""
        with self._write():
            self._exec(self._sql.stop_waiting, (run_id, uri))
            return bool(self._exec(self._sql.release_lock, (uri, run_id)).rowcount)

    @guarded
    def heartbeat_lock(self, run_id: str, uri: str | None, ttl: float) -> int:
        """Extend one (or, with uri None, all) of the run's locks; return how many."""
        with self._write():
            expires = self._clock() + ttl
            if uri is None:
                return self._exec(self._sql.extend_locks, (expires, run_id)).rowcount
            return self._exec(self._sql.extend_lock, (expires, run_id, uri)).rowcount

    @guarded
    def release_all_locks(self, run_id: str) -> int:
        """Release every lock of ``run_id``; return how many."""
        with self._write():
            self._exec(self._sql.drop_waits, (run_id,))
            return self._exec(self._sql.drop_locks, (run_id,)).rowcount

    @guarded
    def locks(self) -> list[dict[str, Any]]:
        """Live locks: {uri, holder, run_id (the same), acquired_at, expires_at}."""
        Lock = self._m.Lock
        query = Lock.select().where(Lock.expires_at > self._clock()).order_by(Lock.uri)
        return [
            {"uri": k.uri, "holder": k.run_id, "run_id": k.run_id, "acquired_at": k.acquired_at,
             "expires_at": k.expires_at}
            for k in query
        ]  # fmt: skip

    # ------------------------------------------------------------ trigger ticks
    @guarded
    @grouped
    def claim_tick(self, key: str, tick: float) -> bool:
        """True exactly once per (key, tick), across processes and hosts (a trigger's
        ``emit_once``; keys are ``<trigger type>:<its key>``)."""
        with self._write():
            return self._exec(self._sql.insert_tick, (key, tick, self._clock())).rowcount == 1

    @guarded
    def last_tick(self, key: str) -> float | None:
        """The latest claimed tick of ``key``."""
        return self._value(self._sql.last_tick, (key,))

    # ------------------------------------------------------------ hosts
    @guarded
    def heartbeat_host(self, host: str, info: dict[str, Any]) -> None:
        """Record that scheduler ``host`` is alive now."""
        with self._write():
            self._upsert(self._m.Host, name=host, info=info, heartbeat_at=self._clock())

    @guarded
    def stale_hosts(self, older_than: float) -> list[str]:
        """Hosts whose last heartbeat is before the time ``older_than`` (a timestamp)."""
        Host = self._m.Host
        query = Host.select(Host.name).where(Host.heartbeat_at < older_than).order_by(Host.name)
        return [name for (name,) in query.tuples()]

    @guarded
    def hosts(self) -> list[dict[str, Any]]:
        """Every scheduler host that heartbeats: {host, info, heartbeat_at}, by name."""
        Host = self._m.Host
        return [
            {"host": h.name, "info": h.info, "heartbeat_at": h.heartbeat_at}
            for h in Host.select().order_by(Host.name)
        ]

    @guarded
    def forget_host(self, host: str) -> None:
        """Drop a host's heartbeat row (after its runs were reconciled)."""
        with self._write():
            self._m.Host.delete().where(self._m.Host.name == host).execute()
