"""A stand-in for the Hetzner Cloud API (v1) and the Vultr API (v2) over real HTTP on
127.0.0.1: the only fake in the provisioning tests (the clouds cannot be reached from here).

It keeps state as the real APIs do (servers, firewalls, SSH keys; Hetzner's actions; Vultr's
firewall rules), answers in their documented request and response shapes (Hetzner's
``{"error": {"code", "message"}}`` and paging ``meta.pagination``; Vultr's ``{"error",
"status"}`` and cursor paging ``meta.links.next``), checks the bearer token and the fields it
requires, and records every request. A new server runs (at 127.0.0.1, where the tests' sshd
listens) after ``boot_polls`` looks at it; ``fail(method, pattern, status, body, times)``
makes the next matching requests fail.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

TOKEN = "cloud-token-for-tests"
ADDRESS = "127.0.0.1"


class FakeCloud(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, provider: str, boot_polls: int = 1) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.provider = provider
        self.boot_polls = boot_polls
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.servers: dict[str, dict[str, Any]] = {}
        self.firewalls: dict[str, dict[str, Any]] = {}
        self.keys: dict[str, dict[str, Any]] = {}
        self.actions: dict[str, dict[str, Any]] = {}
        self.failures: list[list[Any]] = []  # [method, pattern, status, body, times, after]
        self.polls: dict[str, int] = {}
        self.failing_actions: set[str] = set()  # Hetzner action commands that end in an error
        self.ids = itertools.count(1001)
        self.app = Hetzner(self) if provider == "hetzner" else Vultr(self)

    @property
    def url(self) -> str:
        prefix = "/v1" if self.provider == "hetzner" else "/v2"
        return f"http://127.0.0.1:{self.server_address[1]}{prefix}"

    def new_id(self) -> str:
        return str(next(self.ids)) if self.provider == "hetzner" else str(uuid.uuid4())

    def fail(
        self, method: str, pattern: str, status: int, body: Any, times: int = 1, after: int = 0
    ) -> None:
        """The next ``times`` requests matching ``method`` and ``pattern``, past the first
        ``after`` of them, answer ``status`` with ``body``."""
        self.failures.append([method, re.compile(pattern), status, body, times, after])

    def made(self, method: str, pattern: str = "") -> list[dict[str, Any]]:
        """The recorded requests of ``method`` whose path matches ``pattern``."""
        return [
            r
            for r in self.requests
            if r["method"] == method and re.fullmatch(pattern or ".*", r["path"])
        ]

    def handle(self, request: dict[str, Any]) -> tuple[int, Any]:
        with self.lock:
            self.requests.append(request)
            for failure in self.failures:
                method, pattern, status, body, times, after = failure
                if not times or method != request["method"]:
                    continue
                if pattern.fullmatch(request["path"]):
                    if after:
                        failure[5] -= 1
                        continue
                    failure[4] -= 1
                    return status, body
            return self.app.route(request)


class _Handler(BaseHTTPRequestHandler):
    server: FakeCloud

    def _answer(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length", 0) or 0))
        url = urlsplit(self.path)
        request = {
            "method": self.command,
            "path": url.path,
            "query": dict(parse_qsl(url.query)),
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": json.loads(raw) if raw else None,
        }
        status, answer = self.server.handle(request)
        data = b"" if answer is None else json.dumps(answer).encode()
        self.send_response(status)
        if data:
            self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PUT = _answer  # noqa: N815

    def log_message(self, *args: Any) -> None:
        pass


Route = Callable[..., tuple[int, Any]]


class _Api:
    """Routes ``(method, path pattern)`` to handlers taking the request and the pattern's
    groups; an unknown route is a 404, a missing or wrong token a 401."""

    def __init__(self, cloud: FakeCloud, routes: dict[tuple[str, str], Route]):
        self.cloud = cloud
        self.routes = [(m, re.compile(p), f) for (m, p), f in routes.items()]

    def route(self, request: dict[str, Any]) -> tuple[int, Any]:
        if request["headers"].get("authorization") != f"Bearer {TOKEN}":
            return self.error(401, "unauthorized", "unable to authenticate")
        for method, pattern, handler in self.routes:
            match = pattern.fullmatch(request["path"])
            if match and method == request["method"]:
                return handler(request, *match.groups())
        return self.error(404, "not_found", "no such route")

    def error(self, status: int, code: str, message: str) -> tuple[int, Any]:
        raise NotImplementedError


class Hetzner(_Api):
    SERVER_TYPES = [  # (name, cores, memory GB, architecture, deprecated, {location: gross})
        ("cx11", 1, 2.0, "x86", False, {"fsn1": "3.92", "nbg1": "3.92"}),
        ("cpx11", 2, 2.0, "x86", True, {"nbg1": "4.00"}),  # deprecated: never chosen
        ("cax11", 2, 4.0, "arm", False, {"nbg1": "4.50"}),  # arm: never chosen
        ("cx32", 4, 8.0, "x86", False, {"fsn1": "8.00", "nbg1": "8.00"}),
        ("cx22", 2, 4.0, "x86", False, {"fsn1": "4.59", "nbg1": "4.99"}),
    ] + [(f"ccx{i}", 8, 32.0, "x86", False, {"nbg1": "90.0"}) for i in range(60)]

    def __init__(self, cloud: FakeCloud):
        super().__init__(
            cloud,
            {
                ("GET", r"/v1/server_types"): self.server_types,
                ("GET", r"/v1/ssh_keys"): self.list_keys,
                ("POST", r"/v1/ssh_keys"): self.create_key,
                ("GET", r"/v1/ssh_keys/(\d+)"): self.get("keys", "ssh_key"),
                ("DELETE", r"/v1/ssh_keys/(\d+)"): self.delete_key,
                ("POST", r"/v1/firewalls"): self.create_firewall,
                ("GET", r"/v1/firewalls/(\d+)"): self.get("firewalls", "firewall"),
                ("DELETE", r"/v1/firewalls/(\d+)"): self.delete_firewall,
                ("POST", r"/v1/servers"): self.create_server,
                ("GET", r"/v1/servers/(\d+)"): self.get_server,
                ("DELETE", r"/v1/servers/(\d+)"): self.delete_server,
                ("GET", r"/v1/actions/(\d+)"): self.get_action,
            },
        )

    def error(self, status: int, code: str, message: str) -> tuple[int, Any]:
        return status, {"error": {"code": code, "message": message, "details": {}}}

    def page(self, request: dict[str, Any], key: str, items: list[Any]) -> tuple[int, Any]:
        page = int(request["query"].get("page", 1))
        per_page = int(request["query"].get("per_page", 25))
        last = max(1, -(-len(items) // per_page))
        pagination = {
            "page": page, "per_page": per_page, "previous_page": page - 1 or None,
            "next_page": page + 1 if page < last else None, "last_page": last,
            "total_entries": len(items),
        }  # fmt: skip
        chunk = items[(page - 1) * per_page : page * per_page]
        return 200, {key: chunk, "meta": {"pagination": pagination}}

    def server_types(self, request: dict[str, Any]) -> tuple[int, Any]:
        types = [
            {
                "id": i, "name": name, "cores": cores, "memory": memory, "disk": 40,
                "architecture": arch, "deprecated": deprecated, "cpu_type": "shared",
                "prices": [
                    {"location": loc, "price_monthly": {"net": gross, "gross": gross},
                     "price_hourly": {"net": "0.01", "gross": "0.01"}}
                    for loc, gross in prices.items()
                ],
            }
            for i, (name, cores, memory, arch, deprecated, prices) in enumerate(self.SERVER_TYPES)
        ]  # fmt: skip
        return self.page(request, "server_types", types)

    def list_keys(self, request: dict[str, Any]) -> tuple[int, Any]:
        return self.page(request, "ssh_keys", list(self.cloud.keys.values()))

    def add_key(self, name: str, public_key: str, labels: dict[str, str]) -> dict[str, Any]:
        key_id = self.cloud.new_id()
        key = {"id": int(key_id), "name": name, "fingerprint": f"fp:{key_id}",
               "public_key": public_key, "labels": labels, "created": "2025-01-01T00:00:00Z"}  # fmt: skip
        self.cloud.keys[key_id] = key
        return key

    def create_key(self, request: dict[str, Any]) -> tuple[int, Any]:
        body = request["body"] or {}
        if not body.get("name") or not body.get("public_key"):
            return self.error(422, "invalid_input", "name and public_key are required")
        body_of = lambda k: " ".join(k.split()[:2])  # noqa: E731
        for key in self.cloud.keys.values():
            if key["name"] == body["name"] or body_of(key["public_key"]) == body_of(
                body["public_key"]
            ):
                return self.error(
                    409, "uniqueness_error", "SSH key with the same fingerprint already exists"
                )
        return 201, {
            "ssh_key": self.add_key(body["name"], body["public_key"], body.get("labels") or {})
        }

    def get(self, table: str, key: str) -> Route:
        def handler(request: dict[str, Any], item: str) -> tuple[int, Any]:
            found = getattr(self.cloud, table).get(item)
            if found is None:
                return self.error(404, "not_found", f"{key} with ID '{item}' not found")
            return 200, {key: found}

        return handler

    def delete_key(self, request: dict[str, Any], key_id: str) -> tuple[int, Any]:
        if self.cloud.keys.pop(key_id, None) is None:
            return self.error(404, "not_found", f"ssh_key with ID '{key_id}' not found")
        return 204, None

    def add_firewall(self, name: str, rules: list[Any], labels: dict[str, str]) -> dict[str, Any]:
        firewall_id = self.cloud.new_id()
        firewall = {"id": int(firewall_id), "name": name, "labels": labels, "rules": rules,
                    "applied_to": [], "created": "2025-01-01T00:00:00Z"}  # fmt: skip
        self.cloud.firewalls[firewall_id] = firewall
        return firewall

    def create_firewall(self, request: dict[str, Any]) -> tuple[int, Any]:
        body = request["body"] or {}
        if not body.get("name"):
            return self.error(422, "invalid_input", "name is required")
        if any(f["name"] == body["name"] for f in self.cloud.firewalls.values()):
            return self.error(409, "uniqueness_error", "firewall with the same name already exists")
        for rule in body.get("rules") or []:
            if rule.get("direction") not in ("in", "out") or rule.get("protocol") not in (
                "tcp",
                "udp",
                "icmp",
                "esp",
                "gre",
            ):
                return self.error(422, "invalid_input", "invalid rule")
        rules = [{"destination_ips": [], **rule} for rule in body.get("rules") or []]
        firewall = self.add_firewall(body["name"], rules, body.get("labels") or {})
        return 201, {"firewall": firewall, "actions": []}

    def delete_firewall(self, request: dict[str, Any], firewall_id: str) -> tuple[int, Any]:
        firewall = self.cloud.firewalls.get(firewall_id)
        if firewall is None:
            return self.error(404, "not_found", f"firewall with ID '{firewall_id}' not found")
        if firewall["applied_to"]:
            return self.error(422, "resource_in_use", "firewall is still in use")
        del self.cloud.firewalls[firewall_id]
        return 204, None

    def action(self, command: str, resource: str, then: Callable[[], None]) -> dict[str, Any]:
        action_id = self.cloud.new_id()
        action = {"id": int(action_id), "command": command, "status": "running", "progress": 0,
                  "started": "2025-01-01T00:00:00Z", "finished": None, "error": None,
                  "resources": [{"id": int(resource), "type": "server"}]}  # fmt: skip
        self.cloud.actions[action_id] = action
        self.cloud.polls[action_id] = 0
        action["_then"] = then
        return action

    def public(self, action: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in action.items() if not k.startswith("_")}

    def add_server(
        self, name: str, labels: dict[str, str], status: str = "running"
    ) -> dict[str, Any]:
        server_id = self.cloud.new_id()
        server = {"id": int(server_id), "name": name, "status": status, "labels": labels,
                  "created": "2025-01-01T00:00:00Z",
                  "public_net": {"ipv4": {"ip": ADDRESS, "blocked": False},
                                 "ipv6": {"ip": "2001:db8::/64", "blocked": False},
                                 "firewalls": []}}  # fmt: skip
        self.cloud.servers[server_id] = server
        return server

    def create_server(self, request: dict[str, Any]) -> tuple[int, Any]:
        body = request["body"] or {}
        for field in ("name", "server_type", "image"):
            if not body.get(field):
                return self.error(422, "invalid_input", f"{field} is required")
        if any(s["name"] == body["name"] for s in self.cloud.servers.values()):
            return self.error(409, "uniqueness_error", "server name is already used")
        for key in body.get("ssh_keys") or []:
            if str(key) not in self.cloud.keys:
                return self.error(422, "invalid_input", f"ssh key {key} not found")
        server = self.add_server(body["name"], body.get("labels") or {}, "initializing")
        server_id = str(server["id"])
        for ref in body.get("firewalls") or []:
            firewall = self.cloud.firewalls.get(str(ref["firewall"]))
            if firewall is None:
                return self.error(422, "invalid_input", "firewall not found")
            firewall["applied_to"].append({"type": "server", "server": {"id": server["id"]}})
            server["public_net"]["firewalls"].append({"id": firewall["id"], "status": "applied"})
        server["_user_data"] = body.get("user_data")

        def running() -> None:
            server["status"] = "running"

        action = self.action("create_server", server_id, running)
        shown = {k: v for k, v in server.items() if not k.startswith("_")}
        return 201, {"server": shown, "action": self.public(action), "next_actions": [],
                     "root_password": None}  # fmt: skip

    def get_server(self, request: dict[str, Any], server_id: str) -> tuple[int, Any]:
        server = self.cloud.servers.get(server_id)
        if server is None:
            return self.error(404, "not_found", f"server with ID '{server_id}' not found")
        return 200, {"server": {k: v for k, v in server.items() if not k.startswith("_")}}

    def delete_server(self, request: dict[str, Any], server_id: str) -> tuple[int, Any]:
        if server_id not in self.cloud.servers:
            return self.error(404, "not_found", f"server with ID '{server_id}' not found")

        def gone() -> None:
            self.cloud.servers.pop(server_id, None)
            for firewall in self.cloud.firewalls.values():
                firewall["applied_to"] = [
                    a for a in firewall["applied_to"] if str(a["server"]["id"]) != server_id
                ]

        return 200, {"action": self.public(self.action("delete_server", server_id, gone))}

    def get_action(self, request: dict[str, Any], action_id: str) -> tuple[int, Any]:
        action = self.cloud.actions.get(action_id)
        if action is None:
            return self.error(404, "not_found", "action not found")
        self.cloud.polls[action_id] += 1
        needed = self.cloud.boot_polls if action["command"] == "create_server" else 1
        if action["status"] == "running" and self.cloud.polls[action_id] >= needed:
            action.update(progress=100, finished="2025-01-01T00:01:00Z")
            if action["command"] in self.cloud.failing_actions:
                error = {"code": "server_error", "message": "the host failed to start the server"}
                action.update(status="error", error=error)
            else:
                action.update(status="success")
                action["_then"]()
        return 200, {"action": self.public(action)}


class Vultr(_Api):
    PLANS = [  # (id, vcpus, ram MB, monthly cost, locations)
        ("vc2-1c-1gb", 1, 1024, 5, ["ewr", "ams"]),
        ("vc2-2c-4gb", 2, 4096, 20, ["ewr", "ams"]),
        ("vc2-2c-2gb", 2, 2048, 15, ["ams"]),
        ("vhf-2c-2gb", 2, 2048, 18, ["ewr", "ams"]),
    ] + [(f"vbm-{i}", 16, 65536, 400, ["ewr"]) for i in range(7)]

    def __init__(self, cloud: FakeCloud):
        uid = r"([0-9a-f-]+)"  # instances' and keys' UUIDs, firewall groups' short ids
        super().__init__(
            cloud,
            {
                ("GET", r"/v2/plans"): self.plans,
                ("GET", r"/v2/ssh-keys"): self.list_keys,
                ("POST", r"/v2/ssh-keys"): self.create_key,
                ("GET", rf"/v2/ssh-keys/{uid}"): self.get("keys", "ssh_key"),
                ("DELETE", rf"/v2/ssh-keys/{uid}"): self.delete("keys"),
                ("POST", r"/v2/firewalls"): self.create_firewall,
                ("GET", rf"/v2/firewalls/{uid}"): self.get_firewall,
                ("DELETE", rf"/v2/firewalls/{uid}"): self.delete_firewall,
                ("POST", rf"/v2/firewalls/{uid}/rules"): self.create_rule,
                ("POST", r"/v2/instances"): self.create_instance,
                ("GET", rf"/v2/instances/{uid}"): self.get_instance,
                ("DELETE", rf"/v2/instances/{uid}"): self.delete_instance,
            },
        )

    def error(self, status: int, code: str, message: str) -> tuple[int, Any]:
        return status, {"error": message, "status": status}

    def page(self, request: dict[str, Any], key: str, items: list[Any]) -> tuple[int, Any]:
        per_page = int(request["query"].get("per_page", 100))
        start = int(request["query"].get("cursor") or 0)
        chunk = items[start : start + per_page]
        more = start + per_page < len(items)
        links = {"next": str(start + per_page) if more else "", "prev": ""}
        return 200, {key: chunk, "meta": {"total": len(items), "links": links}}

    def plans(self, request: dict[str, Any]) -> tuple[int, Any]:
        plans = [
            {"id": pid, "vcpu_count": cpus, "ram": ram, "disk": 55, "disk_count": 1,
             "bandwidth": 2048, "monthly_cost": cost, "type": pid.split("-")[0],
             "locations": locations}
            for pid, cpus, ram, cost, locations in self.PLANS
        ]  # fmt: skip
        request["query"].setdefault("per_page", "3")  # paged even when asked for more
        request["query"]["per_page"] = str(min(3, int(request["query"]["per_page"])))
        return self.page(request, "plans", plans)

    def list_keys(self, request: dict[str, Any]) -> tuple[int, Any]:
        return self.page(request, "ssh_keys", list(self.cloud.keys.values()))

    def add_key(self, name: str, ssh_key: str) -> dict[str, Any]:
        key_id = self.cloud.new_id()
        key = {
            "id": key_id,
            "date_created": "2025-01-01T00:00:00+00:00",
            "name": name,
            "ssh_key": ssh_key,
        }
        self.cloud.keys[key_id] = key
        return key

    def create_key(self, request: dict[str, Any]) -> tuple[int, Any]:
        body = request["body"] or {}
        if not body.get("name") or not body.get("ssh_key"):
            return self.error(400, "", "name and ssh_key are required")
        return 201, {"ssh_key": self.add_key(body["name"], body["ssh_key"])}

    def get(self, table: str, key: str) -> Route:
        def handler(request: dict[str, Any], item: str) -> tuple[int, Any]:
            found = getattr(self.cloud, table).get(item)
            if found is None:
                return self.error(404, "", f"{key} not found")
            return 200, {key: {k: v for k, v in found.items() if not k.startswith("_")}}

        return handler

    def delete(self, table: str) -> Route:
        def handler(request: dict[str, Any], item: str) -> tuple[int, Any]:
            if getattr(self.cloud, table).pop(item, None) is None:
                return self.error(404, "", "not found")
            return 204, None

        return handler

    def add_firewall(self, description: str) -> dict[str, Any]:
        # Vultr's group ids are 8 hex digits; these are all decimal digits with leading zeros,
        # which a client that took them for numbers would change.
        group_id = f"{next(self.cloud.ids):08d}"
        group = {"id": group_id, "description": description, "date_created": "2025-01-01 00:00:00",
                 "date_modified": "2025-01-01 00:00:00", "instance_count": 0, "rule_count": 0,
                 "max_rule_count": 50, "_rules": []}  # fmt: skip
        self.cloud.firewalls[group_id] = group
        return group

    def create_firewall(self, request: dict[str, Any]) -> tuple[int, Any]:
        group = self.add_firewall((request["body"] or {}).get("description", ""))
        return 201, {"firewall_group": {k: v for k, v in group.items() if not k.startswith("_")}}

    def get_firewall(self, request: dict[str, Any], group_id: str) -> tuple[int, Any]:
        return self.get("firewalls", "firewall_group")(request, group_id)

    def delete_firewall(self, request: dict[str, Any], group_id: str) -> tuple[int, Any]:
        group = self.cloud.firewalls.get(group_id)
        if group is None:
            return self.error(404, "", "firewall group not found")
        if group["instance_count"]:
            return self.error(400, "", "firewall group is in use by instances")
        del self.cloud.firewalls[group_id]
        return 204, None

    def create_rule(self, request: dict[str, Any], group_id: str) -> tuple[int, Any]:
        group = self.cloud.firewalls.get(group_id)
        if group is None:
            return self.error(404, "", "firewall group not found")
        body = request["body"] or {}
        for field in ("ip_type", "protocol", "subnet", "subnet_size"):
            if field not in body:
                return self.error(400, "", f"{field} is required")
        rule = {"id": len(group["_rules"]) + 1, "type": body["ip_type"], "action": "accept",
                "source": "", **body}  # fmt: skip
        group["_rules"].append(rule)
        group["rule_count"] = len(group["_rules"])
        return 201, {"firewall_rule": rule}

    def add_instance(self, label: str, tags: list[str], status: str = "active") -> dict[str, Any]:
        instance_id = self.cloud.new_id()
        instance = {"id": instance_id, "label": label, "hostname": label, "tags": tags,
                    "status": status, "power_status": "running", "server_status": "ok",
                    "main_ip": ADDRESS if status == "active" else "0.0.0.0", "region": "ewr",
                    "plan": "vc2-2c-4gb", "os_id": 2284, "firewall_group_id": ""}  # fmt: skip
        self.cloud.servers[instance_id] = instance
        return instance

    def create_instance(self, request: dict[str, Any]) -> tuple[int, Any]:
        body = request["body"] or {}
        for field in ("region", "plan"):
            if not body.get(field):
                return self.error(400, "", f"{field} is required")
        for key in body.get("sshkey_id") or []:
            if key not in self.cloud.keys:
                return self.error(400, "", f"Invalid SSH key: {key}")
        group = self.cloud.firewalls.get(body.get("firewall_group_id") or "")
        if body.get("firewall_group_id") and group is None:
            return self.error(400, "", "Invalid firewall group")
        instance = self.add_instance(body.get("label", ""), body.get("tags") or [], "pending")
        instance["firewall_group_id"] = body.get("firewall_group_id") or ""
        instance["_user_data"] = body.get("user_data")
        if group is not None:
            group["instance_count"] += 1
        self.cloud.polls[instance["id"]] = 0
        return 202, {"instance": {k: v for k, v in instance.items() if not k.startswith("_")}}

    def get_instance(self, request: dict[str, Any], instance_id: str) -> tuple[int, Any]:
        instance = self.cloud.servers.get(instance_id)
        if instance is None:
            return self.error(404, "", "Invalid instance-id.")
        if instance.get("_deleting"):  # destroyed between two looks
            self.gone(instance_id)
            return self.error(404, "", "Invalid instance-id.")
        self.cloud.polls[instance_id] = self.cloud.polls.get(instance_id, 0) + 1
        if (
            instance["status"] == "pending"
            and self.cloud.polls[instance_id] >= self.cloud.boot_polls
        ):
            instance.update(status="active", main_ip=ADDRESS)
        return 200, {"instance": {k: v for k, v in instance.items() if not k.startswith("_")}}

    def gone(self, instance_id: str) -> None:
        instance = self.cloud.servers.pop(instance_id)
        group = self.cloud.firewalls.get(instance["firewall_group_id"])
        if group is not None:
            group["instance_count"] -= 1

    def delete_instance(self, request: dict[str, Any], instance_id: str) -> tuple[int, Any]:
        instance = self.cloud.servers.get(instance_id)
        if instance is None:
            return self.error(404, "", "Invalid instance-id.")
        instance["_deleting"] = True
        return 204, None


def start(provider: str, **options: Any) -> FakeCloud:
    server = FakeCloud(provider, **options)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    return server
