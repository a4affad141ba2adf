"""``--env NAME`` for the read commands: the deployed scheduler's control API through SSH.

The helper reads the scheduler's address and control token on the server (``op_status``);
then the SSH master forwards a unix socket in this process's private 0700 directory to that
loopback address. No port is opened on either machine, and only this user can use the socket.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from llamaherd.api import ControlChannel
from llamaherd_deploy import environments
from llamaherd_deploy.ssh import Connection


def open_channel(name: str) -> ControlChannel | None:
    if not environments.is_name(name) or not environments.exists(name):
        return None  # not ours: another plugin may know it
    env = environments.load(name)
    conn = Connection(env).open()
    try:
        status = conn.call("status", {"base": env.base})
        address = urlsplit(status["url"])
        local = os.path.join(conn.dir, "control.sock")
        conn.forward(local, address.hostname or "127.0.0.1", address.port or 80)
    except BaseException:
        conn.close()
        raise
    return ControlChannel(socket=local, token=status["token"], where=env.where, close=conn.close)
