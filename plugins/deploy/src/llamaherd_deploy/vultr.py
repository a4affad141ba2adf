"""Vultr (API v2, https://api.vultr.com/v2): instances, firewall groups and their rules, SSH keys.

Errors answer ``{"error": "...", "status": N}``; lists are paged by cursor
(``?per_page=N&cursor=C``, ``meta.links.next``); an instance is created ``pending`` with
``main_ip`` 0.0.0.0 and becomes ``active`` with its address; user data is base64. Vultr has no
labels on firewall groups or keys: what ``al env prov`` creates is marked by its names (the
instance's label ``llamaherd-<name>`` and tag ``llamaherd-<provision id>``, the group's
description and the key's name both ``llamaherd-<name> <provision id>``).
"""

from __future__ import annotations

import base64
import time
from typing import Any
from urllib.parse import quote

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

GONE_TIMEOUT = 300.0  # a deleted instance leaves its firewall group within this


def _mark(environment: str, provision_id: str) -> str:
    return f"llamaherd-{environment} {provision_id}"


class Vultr(Cloud):
    name = "vultr"
    label = "Vultr"
    credential = "vultr_api_key"
    default_image = "2284"  # the peer's PREFERRED_OS_ID: Ubuntu 24.04 LTS x64
    default_region = "ewr"
    region_key = "vultrRegion"  # the peer's key
    server_key = "vultrInstanceId"  # the peer's key
    firewall_key = "vultrFirewallGroupId"
    ssh_key_key = "vultrSshKeyId"
    keys_path = "/ssh-keys"
    key_field = "ssh_key"

    base_url = "https://api.vultr.com/v2"
    url_variable = "AL_VULTR_API_URL"

    @staticmethod
    def error_of(body: dict[str, Any]) -> tuple[str, str]:
        return "", str(body["error"])

    # ------------------------------------------------------------------ reading
    def list_all(self, path: str, key: str) -> list[dict[str, Any]]:
        found, cursor = [], ""
        while True:
            sep = "&" if "?" in path else "?"
            page = f"{path}{sep}per_page=500" + (f"&cursor={quote(cursor)}" if cursor else "")
            data = self.api.request("GET", page)
            found += data.get(key) or []
            cursor = (((data.get("meta") or {}).get("links")) or {}).get("next") or ""
            if not cursor:
                return found

    def choose_size(self, region: str) -> str:
        """The cheapest plan sold in ``region`` with the peer's minimum (as its wizard sorts
        them: by monthly cost)."""
        offers = [
            (float(plan.get("monthly_cost", 0)), plan["id"])
            for plan in self.list_all("/plans", "plans")
            if region in (plan.get("locations") or [])
            and plan.get("vcpu_count", 0) >= MIN_CPUS
            and plan.get("ram", 0) >= MIN_RAM_MB
        ]
        if not offers:
            raise self.no_size(region, "plan", f"{MIN_CPUS} vCPUs and {MIN_RAM_MB} MB")
        return min(offers)[1]

    def server(self, server_id: str) -> Server:
        found = self.api.request("GET", f"/instances/{server_id}")["instance"]
        ip = found.get("main_ip")
        ready = found.get("status") == "active" and ip and ip != "0.0.0.0"
        return Server(str(found["id"]), found.get("status", "?"), ip if ready else None)

    # ------------------------------------------------------------------ creating
    def create_key(self, spec: Spec) -> str:
        body = {"name": _mark(spec.environment, spec.provision_id), "ssh_key": spec.public_key}
        return str(
            self.api.request("POST", "/ssh-keys", body, "creating the SSH key")["ssh_key"]["id"]
        )

    def create_firewall(self, spec: Spec) -> str:
        body = {"description": _mark(spec.environment, spec.provision_id)}
        group = self.api.request("POST", "/firewalls", body, "creating the firewall group")
        group_id = str(group["firewall_group"]["id"])
        for port, what in spec.ports:
            for ip_type, subnet in (("v4", "0.0.0.0"), ("v6", "::")):
                rule = {
                    "ip_type": ip_type,
                    "protocol": "tcp",
                    "subnet": subnet,
                    "subnet_size": 0,
                    "port": str(port),
                    "notes": what,
                }
                try:
                    self.api.request(
                        "POST", f"/firewalls/{group_id}/rules", rule, "adding a firewall rule"
                    )
                except CloudError:  # a group without all its rules is no use: take it back
                    self.api.request(
                        "DELETE",
                        f"/firewalls/{group_id}",
                        what="removing the half-made firewall group",
                    )
                    raise
        return group_id

    def create_server(self, spec: Spec, size: str, key: str, firewall: str) -> str:
        body: dict[str, Any] = {
            "region": spec.region,
            "plan": size,
            "label": spec.name,
            "hostname": spec.name,
            "sshkey_id": [key],
            "user_data": base64.b64encode(cloud_init(spec).encode()).decode(),
            "firewall_group_id": firewall,
            "tags": ["llamaherd", f"llamaherd-{spec.provision_id}"],
            "enable_ipv6": True,
            "backups": "disabled",
        }
        if spec.image.isdigit():
            body["os_id"] = int(spec.image)
        else:  # a snapshot or custom image
            body["image_id"] = spec.image
        answer = self.api.request("POST", "/instances", body, "creating the instance")
        return str(answer["instance"]["id"])

    # ------------------------------------------------------------------ deleting
    def delete_server(self, server_id: str, owner: Owner) -> bool:
        found = self.api.find(f"/instances/{server_id}", "instance")
        if found is None:
            return False
        tags = found.get("tags") or []
        ok = (
            f"llamaherd-{owner.provision_id}" in tags
            if owner.provision_id
            else found.get("label") in (owner.name, owner.peer_name)
        )
        if not ok:
            raise owner.refuse(
                self.label, f"instance {server_id}", f"label {found.get('label')!r}, tags {tags}"
            )
        self.api.request("DELETE", f"/instances/{server_id}", what=f"deleting instance {server_id}")
        deadline = time.monotonic() + GONE_TIMEOUT
        while self.api.find(f"/instances/{server_id}", "instance") is not None:
            if time.monotonic() > deadline:
                raise CloudError(
                    self.label, f"deleting instance {server_id}", 0, "timeout", "it is still there"
                )
            time.sleep(self.poll)
        return True

    def _check_mark(self, what: str, found: str, owner: Owner) -> None:
        if not owner.provision_id or found != _mark(owner.environment, owner.provision_id):
            raise owner.refuse(self.label, what, f"named {found!r}")

    def delete_firewall(self, firewall_id: str, owner: Owner) -> bool:
        found = self.api.find(f"/firewalls/{firewall_id}", "firewall_group")
        if found is None:
            return False
        self._check_mark(f"firewall group {firewall_id}", found.get("description", ""), owner)
        self.api.request(
            "DELETE", f"/firewalls/{firewall_id}", what=f"deleting firewall group {firewall_id}"
        )
        return True

    def delete_key(self, key_id: str, owner: Owner) -> bool:
        found = self.api.find(f"/ssh-keys/{key_id}", "ssh_key")
        if found is None:
            return False
        self._check_mark(f"SSH key {key_id}", found.get("name", ""), owner)
        self.api.request("DELETE", f"/ssh-keys/{key_id}", what=f"deleting SSH key {key_id}")
        return True
