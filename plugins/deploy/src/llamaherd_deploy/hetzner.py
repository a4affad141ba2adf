"""Hetzner Cloud (API v1, https://api.hetzner.cloud/v1): servers, firewalls, SSH keys, actions.

Errors answer ``{"error": {"code", "message", "details"}}``; lists are paged
(``?page=N&per_page=50``, ``meta.pagination.last_page``); creating a server answers it with
its ``create_server`` action, deleting one with a ``delete_server`` action, and both are
followed through ``GET /actions/{id}`` until ``success`` or ``error``. What ``al env prov``
creates carries the labels ``managed-by=llamaherd``, ``llamaherd-environment=<name>`` and
``llamaherd-provision=<provision id>``.
"""

from __future__ import annotations

import time
from typing import Any

from llamaherd_deploy.cloud import (
    MIN_CPUS,
    MIN_RAM_MB,
    Cloud,
    CloudError,
    Owner,
    Server,
    Spec,
    cloud_init,
)

ACTION_TIMEOUT = 600.0
# A firewall still applied to a server being deleted answers 422 resource_in_use for a while.
IN_USE_TIMEOUT = 120.0


class Hetzner(Cloud):
    name = "hetzner"
    label = "Hetzner Cloud"
    credential = "hetzner_api_key"
    # The peer picks ubuntu-22.04 when it is offered; its Python (3.10) is too old for
    # llamaherd, so ours is the next LTS, as the peer's Vultr default is.
    default_image = "ubuntu-24.04"
    default_region = "fsn1"
    region_key = "hetznerLocation"  # the peer's key
    server_key = "hetznerServerId"  # the peer's key
    firewall_key = "hetznerFirewallId"
    ssh_key_key = "hetznerSshKeyId"
    numeric_ids = True
    keys_path = "/ssh_keys"
    key_field = "public_key"

    base_url = "https://api.hetzner.cloud/v1"
    url_variable = "AL_HETZNER_API_URL"

    def __init__(self, token: str, poll: float = 2.0):
        super().__init__(token, poll)
        self.creating: dict[str, dict[str, Any]] = {}  # server id -> its create_server action

    @staticmethod
    def error_of(body: dict[str, Any]) -> tuple[str, str]:
        error = body["error"]
        return str(error.get("code") or ""), str(error.get("message") or "")

    # ------------------------------------------------------------------ reading
    def list_all(self, path: str, key: str) -> list[dict[str, Any]]:
        found, page = [], 1
        while True:
            sep = "&" if "?" in path else "?"
            data = self.api.request("GET", f"{path}{sep}page={page}&per_page=50")
            found += data.get(key) or []
            last = ((data.get("meta") or {}).get("pagination") or {}).get("last_page") or page
            if page >= last:
                return found
            page += 1

    def choose_size(self, region: str) -> str:
        """The cheapest x86 server type sold in ``region`` with the peer's minimum."""
        offers = []
        for kind in self.list_all("/server_types", "server_types"):
            if kind.get("deprecated") or kind.get("architecture", "x86") != "x86":
                continue
            if kind.get("cores", 0) < MIN_CPUS or kind.get("memory", 0) * 1024 < MIN_RAM_MB:
                continue
            price = next((p for p in kind.get("prices") or [] if p.get("location") == region), None)
            if price is not None:
                offers.append((float(price["price_monthly"]["gross"]), kind["name"]))
        if not offers:
            minimum = f"{MIN_CPUS} cores and {MIN_RAM_MB // 1024} GB"
            raise self.no_size(region, "server type", minimum)
        return min(offers)[1]

    def server(self, server_id: str) -> Server:
        action = self.creating.get(server_id)
        if action is not None:  # its create_server action first: an error there is the answer
            what = f"creating server {server_id}"
            action = self.api.request("GET", f"/actions/{action['id']}", what=what)["action"]
            if action.get("status") == "running":
                return Server(server_id, "creating", None)
            _raise_if_failed(action, what)
            del self.creating[server_id]
        found = self.api.request("GET", f"/servers/{server_id}")["server"]
        ipv4 = ((found.get("public_net") or {}).get("ipv4") or {}).get("ip")
        ready = found.get("status") == "running" and ipv4
        return Server(str(found["id"]), found.get("status", "?"), ipv4 if ready else None)

    # ------------------------------------------------------------------ creating
    @staticmethod
    def _labels(spec: Spec) -> dict[str, str]:
        return {
            "managed-by": "llamaherd",
            "llamaherd-environment": spec.environment,
            "llamaherd-provision": spec.provision_id,
        }

    def create_key(self, spec: Spec) -> str:
        body = {"name": spec.name, "public_key": spec.public_key, "labels": self._labels(spec)}
        answer = self.api.request("POST", "/ssh_keys", body, "creating the SSH key")
        return str(answer["ssh_key"]["id"])

    def create_firewall(self, spec: Spec) -> str:
        rules = [
            {
                "direction": "in",
                "protocol": "tcp",
                "port": str(port),
                "source_ips": ["0.0.0.0/0", "::/0"],
                "description": what,
            }
            for port, what in spec.ports
        ]
        body = {"name": spec.name, "labels": self._labels(spec), "rules": rules}
        answer = self.api.request("POST", "/firewalls", body, "creating the firewall")
        return str(answer["firewall"]["id"])

    def create_server(self, spec: Spec, size: str, key: str, firewall: str) -> str:
        body = {
            "name": spec.name,
            "server_type": size,
            "image": spec.image,
            "location": spec.region,
            "ssh_keys": [int(key)],
            "firewalls": [{"firewall": int(firewall)}],
            "user_data": cloud_init(spec),
            "labels": self._labels(spec),
            "start_after_create": True,
            "public_net": {"enable_ipv4": True, "enable_ipv6": True},
        }
        answer = self.api.request("POST", "/servers", body, "creating the server")
        server_id = str(answer["server"]["id"])
        if answer.get("action"):
            self.creating[server_id] = answer["action"]
        return server_id

    def _finish(self, action: dict[str, Any], what: str) -> None:
        """Follow an action until it ends; its error, if it failed, as a CloudError."""
        deadline = time.monotonic() + ACTION_TIMEOUT
        while action.get("status") == "running":
            if time.monotonic() > deadline:
                raise CloudError(self.label, what, 0, "timeout", "the action is still running")
            time.sleep(self.poll)
            action = self.api.request("GET", f"/actions/{action['id']}", what=what)["action"]
        _raise_if_failed(action, what)

    # ------------------------------------------------------------------ deleting
    def _ours(self, kind: str, found: dict[str, Any], owner: Owner, names: tuple[str, ...]) -> None:
        labels = found.get("labels") or {}
        if owner.provision_id:
            ok = labels.get("llamaherd-provision") == owner.provision_id
        else:  # the peer's: named after the environment, labelled managed-by=action-llama
            ok = found.get("name") in names
        if not ok:
            raise owner.refuse(
                self.label,
                f"{kind} {found.get('id')}",
                f"name {found.get('name')!r}, labels {labels}",
            )

    def delete_server(self, server_id: str, owner: Owner) -> bool:
        found = self.api.find(f"/servers/{server_id}", "server")
        if found is None:
            return False
        self._ours("server", found, owner, (owner.name, owner.peer_name))
        answer = self.api.request(
            "DELETE", f"/servers/{server_id}", what=f"deleting server {server_id}"
        )
        if answer and answer.get("action"):
            self._finish(answer["action"], f"deleting server {server_id}")
        return True

    def delete_firewall(self, firewall_id: str, owner: Owner) -> bool:
        found = self.api.find(f"/firewalls/{firewall_id}", "firewall")
        if found is None:
            return False
        self._ours("firewall", found, owner, (owner.name,))
        deadline = time.monotonic() + IN_USE_TIMEOUT
        while True:
            try:
                self.api.request(
                    "DELETE", f"/firewalls/{firewall_id}", what=f"deleting firewall {firewall_id}"
                )
                return True
            except CloudError as exc:
                if exc.gone:
                    return False
                if exc.code != "resource_in_use" or time.monotonic() > deadline:
                    raise
            time.sleep(self.poll)

    def delete_key(self, key_id: str, owner: Owner) -> bool:
        found = self.api.find(f"/ssh_keys/{key_id}", "ssh_key")
        if found is None:
            return False
        self._ours("SSH key", found, owner, (owner.name,))
        self.api.request("DELETE", f"/ssh_keys/{key_id}", what=f"deleting SSH key {key_id}")
        return True


def _raise_if_failed(action: dict[str, Any], what: str) -> None:
    if action.get("status") == "error":
        error = action.get("error") or {}
        code, message = str(error.get("code", "")), str(error.get("message", ""))
        raise CloudError(Hetzner.label, what, 0, code or "error", message or "the action failed")
