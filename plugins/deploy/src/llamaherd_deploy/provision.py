"""``al env prov`` and ``al env deprov``: a server on Hetzner or Vultr as a named environment.

Provisioning, in order, each step printed:

1. the size (unless ``--size``: the cheapest with the peer's minimum in the region), the API
   key (``hetzner_api_key`` / ``vultr_api_key``) and the SSH key pair (``vps_ssh``, made with
   ``ssh-keygen`` when there is none), nothing created yet;
2. the environment file, written at once with ``host = "PENDING"`` and a new provision id, then
   again after each resource the cloud creates (the SSH key, unless one with that public key is
   registered already; the firewall, open to SSH and the gateway port only; the server, with
   the cloud-init script): whatever happens next, the file names everything made so far;
3. a failure while creating takes back what this run created, in reverse, and removes the
   file; what cannot be taken back stays in the file for ``al env deprov``;
4. once the server runs: its address in the file, then SSH and the first boot waited for (the
   helper's probe: Python with venv, the cloud-init script done); a server that does not get
   there in time (``--timeout``) stays, recorded, for ``al env check`` or ``al env deprov``.

Deprovisioning deletes exactly the resources the file records (server, then firewall, then
key: a firewall in use cannot go), each only after reading it back and finding this
environment's marks (``cloud.Owner``), each crossed out of the file once gone; then the file.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llamaherd.api import CommandFailed, CredentialStore, LlamaherdError
from llamaherd_deploy import environments
from llamaherd_deploy.cloud import Cloud, CloudError, Owner, Spec, TimedOut, wait_until
from llamaherd_deploy.environments import PENDING, Environment
from llamaherd_deploy.hetzner import Hetzner
from llamaherd_deploy.ssh import Connection
from llamaherd_deploy.vultr import Vultr

CLOUDS: dict[str, type[Cloud]] = {"hetzner": Hetzner, "vultr": Vultr}
KEY_TYPE = "vps_ssh"  # the peer's credential: private_key, public_key
POLL_VARIABLE = "AL_PROVISION_POLL"  # seconds between looks at a new server
DEFAULT_POLL = 5.0
READY_TIMEOUT = 600.0  # the peer's 10 minutes
DEFAULT_GATEWAY_PORT = 8080


@dataclass(frozen=True)
class Request:
    """What the user asked ``al env prov`` for."""

    name: str
    provider: str
    region: str | None = None
    size: str | None = None
    image: str | None = None
    ssh_port: int = environments.DEFAULT_PORT
    gateway_port: int = DEFAULT_GATEWAY_PORT
    user: str = environments.DEFAULT_USER
    path: str | None = None
    ssh_options: tuple[str, ...] = ()
    timeout: float = READY_TIMEOUT


def poll_seconds() -> float:
    try:
        return max(0.05, float(os.environ.get(POLL_VARIABLE) or DEFAULT_POLL))
    except ValueError:
        return DEFAULT_POLL


def cloud_of(provider: str) -> Cloud:
    """The provider's API with the stored key, or a one-line error saying how to add it."""
    kind = CLOUDS[provider]
    values = CredentialStore().read(kind.credential) or {}
    if not values.get("api_key"):
        raise LlamaherdError(
            f"no {kind.credential} credential: add the {kind.label} API token with "
            f"`al creds add {kind.credential}`"
        )
    return kind(values["api_key"], poll_seconds())


def key_pair(echo: Callable[[str], None]) -> tuple[Path, str]:
    """The ``vps_ssh`` key pair (its private key file, its public key); a new ed25519 pair
    when there is none."""
    store = CredentialStore()
    values = store.read(KEY_TYPE) or {}
    if not (values.get("private_key") and values.get("public_key")):
        with tempfile.TemporaryDirectory(prefix="al-keygen-") as tmp:
            key = Path(tmp) / "id_ed25519"
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "llamaherd", "-f", str(key)],
                check=True,
                capture_output=True,
            )
            values = {
                "private_key": key.read_text(),
                "public_key": key.with_suffix(".pub").read_text(),
            }
        store.write(KEY_TYPE, "default", values)
        echo(f"    generated an SSH key pair: the {KEY_TYPE} credential ({store.path(KEY_TYPE)})")
    return store.path(KEY_TYPE) / "private_key", values["public_key"].strip()


def known_hosts_option(name: str, given: tuple[str, ...]) -> tuple[str, ...]:
    """The environment's own known_hosts file, unless the user chose one: a new server's
    address may be a recycled one that the user's file knows with another key."""
    if any(option.lower().startswith("userknownhostsfile") for option in given):
        return given
    return (f"UserKnownHostsFile={known_hosts_file(name)}", *given)


def known_hosts_file(name: str) -> Path:
    return environments.path_of(name).with_suffix(".known_hosts")


class Provision:
    def __init__(self, request: Request, cloud: Cloud, echo: Callable[[str], None]):
        self.request = request
        self.cloud = cloud
        self.echo = echo
        self.made: dict[str, Any] = {}  # the [server] keys of what this run created

    def step(self, text: str) -> None:
        self.echo(f"==> {text}")

    def run(self) -> Environment:
        request, cloud = self.request, self.cloud
        region = request.region or cloud.default_region
        self.step(f"provisioning {request.name} on {cloud.label} ({region})")
        size = request.size or cloud.choose_size(region)
        key_file, public_key = key_pair(self.echo)
        spec = Spec(
            environment=request.name,
            provision_id=secrets.token_hex(6),
            region=region,
            image=request.image or cloud.default_image,
            size=size,
            ssh_port=request.ssh_port,
            gateway_port=request.gateway_port,
            user=request.user,
            base=request.path or _default_base(request.user),
            public_key=public_key,
        )
        self.echo(f"    {spec.name}: {size}, image {spec.image}, SSH port {spec.ssh_port}, "
                  f"gateway port {spec.gateway_port}, user {spec.user}")  # fmt: skip
        self.env = Environment(
            name=request.name,
            host=PENDING,
            user=request.user,
            port=request.ssh_port,
            key=str(key_file),
            path=request.path,
            ssh_options=known_hosts_option(request.name, request.ssh_options),
            expose=True,
            extra={
                "provider": cloud.name,
                cloud.region_key: region,
                "provisionId": spec.provision_id,
            },
        )
        self.save()
        server_id = self.create(spec, size)
        return self.wait(server_id, spec)

    # ------------------------------------------------------------------ creating
    def create(self, spec: Spec, size: str) -> str:
        cloud = self.cloud
        try:
            key = cloud.find_key(spec.public_key)
            if key is None:
                key = self.record(cloud.ssh_key_key, cloud.create_key(spec), "SSH key")
            else:
                self.echo(f"    SSH key: {key} (registered already; not ours to delete)")
            ports = ", ".join(f"{port}/tcp ({what})" for port, what in spec.ports)
            firewall = cloud.create_firewall(spec)
            self.record(cloud.firewall_key, firewall, "firewall", f": in {ports} only")
            server_id = cloud.create_server(spec, size, key, firewall)
            self.record(cloud.server_key, server_id, "server")
            return server_id
        except BaseException as exc:  # Ctrl-C too: take back what this run created
            self.roll_back(exc)
            raise

    def record(self, key: str, resource_id: str, what: str, detail: str = "") -> str:
        """Note a resource this run created in the environment file, at once."""
        self.made[key] = int(resource_id) if self.cloud.numeric_ids else resource_id
        self.save()
        self.echo(f"    created {what} {resource_id}{detail}")
        return resource_id

    def roll_back(self, cause: BaseException) -> None:
        self.echo(
            f"    failed: {cause}" if isinstance(cause, LlamaherdError) else "    interrupted"
        )
        owner = Owner(self.env.name, self.env.extra["provisionId"])
        left = remove_resources(self.cloud, self.made, owner, self.echo, self.save)
        if left:
            raise CommandFailed(
                f"{self.cloud.label}: could not take back {', '.join(left)} after the failure "
                f"above: `al env deprov {self.env.name}` deletes what is left"
            ) from cause
        environments.remove(self.env.name)
        self.echo(f"    nothing is left on {self.cloud.label}; environment {self.env.name} removed")

    def save(self, **changes: Any) -> None:
        """Write the environment as it is now, with the ids of what is made so far."""
        self.env = replace(self.env, **changes)
        environments.save(replace(self.env, extra={**self.env.extra, **self.made}), replace=True)

    # ------------------------------------------------------------------ waiting
    def wait(self, server_id: str, spec: Spec) -> Environment:
        deadline = time.monotonic() + self.request.timeout
        poll = self.cloud.poll
        name = self.env.name
        self.step(f"waiting for server {server_id} to run")
        later = f"`al env check {name}` looks again, `al env deprov {name}` deletes it"
        try:
            server = wait_until(lambda: _ready(self.cloud.server(server_id)), deadline, poll,
                                f"server {server_id} did not run")  # fmt: skip
        except TimedOut as exc:  # it may yet: kept, recorded
            raise CommandFailed(f"{exc}; {later}") from None
        except BaseException as exc:  # its creation failed (or Ctrl-C): all taken back
            self.roll_back(exc)
            raise
        # The gateway where senders reach it, and where it listens (the port the firewall opens).
        gateway = {"url": f"http://{server.ip}:{spec.gateway_port}", "port": spec.gateway_port}
        self.save(host=server.ip, layers={"gateway": gateway})
        self.step(f"server {server_id} runs at {server.ip}; waiting for SSH and its first boot")
        waited = Readiness(self.env)
        try:
            info = wait_until(waited.check, deadline, poll, f"{self.env.where} was not ready")
        except TimedOut as exc:
            raise CommandFailed(f"{exc} (last: {waited.last}); {later}") from None
        python = ".".join(map(str, info["python"]))
        self.echo(
            f"    ready: Python {python}, {info['free'] / 2**30:.1f} GiB free at {info['base']}"
        )
        return self.env


class Readiness:
    """Whether a new server can take a push: SSH answers, its first boot is done, the probe
    finds nothing missing. ``last`` says what was missing at the last look."""

    def __init__(self, env: Environment):
        self.env = env
        self.last = "no answer yet"

    def check(self) -> dict[str, Any] | None:
        from llamaherd_deploy.push import server_problems

        try:
            with Connection(self.env) as conn:
                info = conn.call("probe", {"base": self.env.base, "nonce": "prov"}, timeout=60)
        except LlamaherdError as exc:
            self.last = str(exc)
            return None
        state = info.get("provisioning")
        if state and state.startswith("failed"):
            raise CommandFailed(
                f"{self.env.where}: its first boot {state} (cloud-init; /var/log/cloud-init-output.log "
                f"there says more); `al env deprov {self.env.name}` deletes it"
            )
        if state == "running":
            self.last = "cloud-init still runs"
            return None
        missing = [line for ok, line in server_problems(info) if not ok]
        if missing:
            self.last = missing[0]
            return None
        return info


def _ready(server: Any) -> Any:
    return server if server.ready else None


def _default_base(user: str) -> str:
    return environments.ROOT_BASE if user == "root" else environments.USER_BASE


# ---------------------------------------------------------------------- deprov


def cloud_of_environment(env: Environment) -> Cloud:
    """The provider that made ``env`` (the peer writes provider = "vps": its ids say which)."""
    for kind in CLOUDS.values():
        if env.extra.get("provider") == kind.name or kind.server_key in env.extra:
            return cloud_of(kind.name)
    raise LlamaherdError(
        f"environment {env.name} was not made by `al env prov` (its [server] names no cloud "
        f"server): `al env rm {env.name}` forgets it and leaves the server alone"
    )


def remove_resources(
    cloud: Cloud,
    made: dict[str, Any],
    owner: Owner,
    echo: Callable[[str], None],
    saved: Callable[[], None],
) -> list[str]:
    """Delete what ``made`` records (server, firewall, key: in that order), each crossed out
    of ``made`` and ``saved()`` once gone; the ones that could not be deleted, described."""
    left = []
    steps = (
        (cloud.server_key, "server", cloud.delete_server),
        (cloud.firewall_key, "firewall", cloud.delete_firewall),
        (cloud.ssh_key_key, "SSH key", cloud.delete_key),
    )
    for key, what, delete in steps:
        if key not in made:
            continue
        resource = str(made[key])
        try:
            deleted = delete(resource, owner)
        except CloudError as exc:
            echo(f"    {exc}")
            left.append(f"{what} {resource}")
            continue
        echo(f"    {'deleted' if deleted else 'already gone:'} {what} {resource}")
        del made[key]
        saved()
    return left


def deprovision(env: Environment, echo: Callable[[str], None]) -> None:
    cloud = cloud_of_environment(env)
    ids = (cloud.server_key, cloud.firewall_key, cloud.ssh_key_key)
    made = {k: v for k, v in env.extra.items() if k in ids}
    rest = {k: v for k, v in env.extra.items() if k not in ids}
    echo(f"==> deleting what `al env prov {env.name}` made on {cloud.label}")

    def saved() -> None:
        environments.save(replace(env, extra={**rest, **made}), replace=True)

    owner = Owner(env.name, env.extra.get("provisionId"))
    left = remove_resources(cloud, made, owner, echo, saved)
    if left:
        raise CommandFailed(
            f"{', '.join(left)} not deleted (above); the environment keeps them: fix the cause, "
            f"then `al env deprov {env.name}` again"
        )
    environments.remove(env.name)
    known_hosts_file(env.name).unlink(missing_ok=True)
