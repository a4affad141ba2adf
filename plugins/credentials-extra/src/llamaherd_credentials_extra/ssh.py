"""``vps_ssh``: the SSH key pair for VPS instances (Action Llama provisions them with it).

As in Action Llama it exports no environment variable: an agent that declares it gets the two
files, the private key with mode 0600 so ``ssh -i`` accepts it. ``al creds test`` checks,
offline, that the private key parses, is not encrypted, and matches the public key.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

from llamaherd.api import CredentialField, CredentialInvalid


def load_private_key(text: str) -> Any:
    """A private key from OpenSSH or PEM text."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    data = text.strip().encode() + b"\n"
    loader = (
        serialization.load_ssh_private_key
        if b"BEGIN OPENSSH PRIVATE KEY" in data
        else serialization.load_pem_private_key
    )
    try:
        return loader(data, password=None)
    except TypeError:  # cryptography's way of saying the key needs a passphrase
        raise CredentialInvalid(
            "private_key is encrypted: store a key without a passphrase (ssh-keygen -p)"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise CredentialInvalid(
            "private_key is not an SSH private key (store the whole file with "
            "--file private_key=PATH)"
        ) from None


def public_line(private_key: Any) -> str:
    """``<type> <base64>`` of the key's public half, as in an authorized_keys line."""
    from cryptography.hazmat.primitives import serialization

    return (
        private_key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )


def fingerprint(public: str) -> str:
    """``SHA256:...`` as ``ssh-keygen -l`` prints it."""
    blob = base64.b64decode(public.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


class VpsSsh:
    name = "vps_ssh"
    description = "SSH key pair for the VPS instances an agent connects to"
    fields = [
        CredentialField(
            "private_key", secret=True, description="SSH private key (use --file private_key=PATH)"
        ),
        CredentialField("public_key", secret=False, description="SSH public key (the .pub line)"),
    ]
    # ssh refuses a key that others can read.
    file_modes = {"private_key": 0o600}

    def env(self, values: dict[str, str], path: Path) -> dict[str, str]:
        return {}

    def context(self, values: dict[str, str]) -> str:
        return (
            "SSH key pair for the VPS instances: connect with "
            "`ssh -i <that directory>/private_key -o IdentitiesOnly=yes root@HOST`; "
            "`public_key` is the line to put in a server's authorized_keys."
        )

    def validate(self, values: dict[str, str]) -> str:
        derived = public_line(load_private_key(values["private_key"]))
        stored = values["public_key"].split()
        if stored[:2] != derived.split()[:2]:
            raise CredentialInvalid("public_key does not belong to private_key")
        return f"key pair matches ({derived.split()[0]} {fingerprint(derived)})"
