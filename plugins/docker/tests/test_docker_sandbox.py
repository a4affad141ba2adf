"""The container sandbox against a real daemon: isolation, limits, exec, files, lifecycle."""

from __future__ import annotations

import errno
import http.server
import os
import socketserver
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from llamaherd.api import SandboxError
from llamaherd.testing import wait_until

pytestmark = pytest.mark.docker


def sh(sandbox: Any, command: str, **kwargs: Any) -> tuple[int, str]:
    result = sandbox.exec(command, **kwargs)
    return result.exit_code, result.output


def test_root_fs_is_read_only_and_only_tmp_is_writable(start: Any) -> None:
    box = start()
    code, out = sh(box, "touch /x; touch /usr/x; touch /app/bin/x")
    assert code != 0
    assert out.count("Read-only file system") == 3
    assert sh(box, "pwd; touch f && echo wrote; touch $HOME/h && echo home") == (
        0,
        "/tmp/work\nwrote\nhome\n",
    )


def test_tmpfs_sizes_user_and_hardening(start: Any, docker_client: Any) -> None:
    box = start()
    code, out = sh(box, "cat /proc/mounts")
    mounts = {line.split()[1]: line.split()[3] for line in out.splitlines()}
    assert "size=32768k" in mounts["/tmp"]  # tmpSize = "32m"
    assert "size=8192k" in mounts["/home/node"]  # homeSize = "8m"
    assert mounts["/credentials"].startswith("ro") and mounts["/app/bin"].startswith("ro")
    code, out = sh(box, "id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status")
    assert out.split() == ["1000", "CapEff:", "0000000000000000", "NoNewPrivs:", "1"]
    host = docker_client.api.inspect_container(box.id)["HostConfig"]
    assert host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert (host["PidsLimit"], host["Memory"], host["NanoCpus"]) == (64, 256 << 20, 10**9)
    assert host["NetworkMode"] == "none"
    labels = docker_client.api.inspect_container(box.id)["Config"]["Labels"]
    assert labels["llamaherd.agent"] == "worker" and labels["llamaherd.run"].startswith("worker-")


def test_cap_drop_stops_even_root(tmp_project: Any, start: Any, debian_image: str) -> None:
    # The Debian image runs as root: only dropped capabilities stop it changing owners.
    tmp_project.config(f'[local]\nimage = "{debian_image}"\n')
    tmp_project.add_agent("rooty", '[runtime]\nnetwork = "none"\n')
    box = start(project=tmp_project, agent="rooty")
    code, out = sh(box, "id -u; touch /tmp/f; chown 1000 /tmp/f; chown 1000 /etc/passwd")
    assert code != 0
    assert out.startswith("0\n") and out.count("Operation not permitted") == 1
    assert "Read-only file system" in out


def test_skill_commands_on_path_and_run_env(start: Any) -> None:
    box = start()
    code, out = sh(box, "al-hello; echo $PATH; echo $AL_CREDENTIALS_PATH $AL_RUN_TOKEN")
    lines = out.splitlines()
    assert lines[0] == "hello from worker"
    assert lines[1].startswith("/app/bin:")
    assert lines[2].startswith("/credentials token-worker-")


def test_credentials_only_declared_read_only_and_not_in_container_config(
    start: Any, docker_client: Any
) -> None:
    box = start(
        credentials={"github_token/default": {"token": "s3cret-token"}},
        credential_env=lambda root: {"GITHUB_TOKEN_FILE": f"{root}/github_token/default/token"},
    )
    code, out = sh(box, 'find /credentials | sort; cat "$GITHUB_TOKEN_FILE"')
    assert out.splitlines() == [
        "/credentials",
        "/credentials/github_token",
        "/credentials/github_token/default",
        "/credentials/github_token/default/token",
        "s3cret-token",
    ]
    code, out = sh(box, "echo x > /credentials/github_token/default/token")
    assert code != 0 and "Read-only file system" in out
    inspected = str(docker_client.api.inspect_container(box.id))
    assert "s3cret-token" not in inspected and "token-worker-" not in inspected
    private = Path(box.handle()["credentials_dir"])
    assert private.stat().st_mode & 0o777 == 0o700  # no other host user reaches the files
    box.cleanup()
    assert not private.exists()


def test_exec_exit_codes_cwd_env_and_streaming(start: Any) -> None:
    box = start()
    chunks: list[str] = []
    result = box.exec(
        "echo out; echo err >&2; sleep 0.2; echo $GREETING; exit 3",
        env={"GREETING": "hi"},
        on_output=chunks.append,
    )
    assert (result.exit_code, result.output, result.timed_out) == (3, "out\nerr\nhi\n", False)
    assert len(chunks) >= 2 and "".join(chunks) == result.output
    assert sh(box, "mkdir -p sub && cd sub && pwd") == (0, "/tmp/work/sub\n")
    assert sh(box, "pwd", cwd="/tmp/work/sub") == (0, "/tmp/work/sub\n")


def test_timeout_kills_the_command_and_everything_it_started(start: Any) -> None:
    box = start()
    begun = time.monotonic()
    result = box.exec(
        "echo started; (sleep 301 &); sleep 302 & sleep 303", timeout=1, on_output=None
    )
    assert result.timed_out and result.exit_code == 124
    assert result.output == "started\n"
    assert time.monotonic() - begun < 4
    code, out = sh(box, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    assert "sleep 30" not in out  # daemonised, background and foreground: all gone
    assert sh(box, "echo still usable") == (0, "still usable\n")


def test_interrupt_ends_the_running_command_and_keeps_the_container(start: Any) -> None:
    box = start()
    timer = threading.Timer(0.5, box.interrupt)
    timer.start()
    begun = time.monotonic()
    result = box.exec("echo started; sleep 301 & sleep 302", on_output=None)
    assert result.output == "started\n" and result.exit_code != 0
    assert time.monotonic() - begun < 10
    code, out = sh(box, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    assert "sleep 30" not in out
    assert sh(box, "echo still usable") == (0, "still usable\n")


FORK_BOMB = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""


def test_pids_limit_contains_a_fork_bomb(start: Any, docker_client: Any) -> None:
    box = start()
    box.put_file("bomb.py", FORK_BOMB.encode())
    result = box.exec("python3 bomb.py", timeout=1)
    # Every pid is taken, so even the kill may not start: the call still returns on time.
    assert result.timed_out and result.duration < 1 + 4
    pids = docker_client.api.stats(box.id, stream=False, one_shot=True)["pids_stats"]
    # The limit holds ([runtime] pids = 64). Processes docker exec moves into the container
    # (e.g. the kill's attempts) are not forks and can pass it by a few.
    assert pids["limit"] == 64 and 30 < pids["current"] <= 64 + 16
    begun = time.monotonic()
    box.kill()  # the run's kill ends it all at once
    assert not box.alive() and time.monotonic() - begun < 2


def test_a_self_limiting_fork_bomb_leaves_the_sandbox_usable(start: Any) -> None:
    box = start()
    result = box.exec("bomb() { bomb | bomb & }; bomb", timeout=5)
    assert "Cannot fork" in result.output
    wait_until(lambda: sh(box, "echo survived") == (0, "survived\n"), 5, 0.2, what="a usable box")


def test_put_and_get_files(start: Any) -> None:
    box = start()
    data = bytes(range(256)) * 1000
    box.put_file("/tmp/work/blob.bin", data, mode=0o600)
    assert box.get_file("blob.bin") == data
    assert sh(box, "stat -c '%a %U' blob.bin") == (0, "600 node\n")
    with pytest.raises(OSError) as missing:
        box.get_file("/tmp/work/nope")
    assert missing.value.errno == errno.ENOENT
    with pytest.raises(OSError) as readonly:
        box.put_file("/etc/evil", b"x")
    assert readonly.value.errno == errno.EACCES


def test_pause_freezes_and_resume_continues(start: Any) -> None:
    box = start()
    sh(box, "(while :; do date +%s%N >> ticks; sleep 0.05; done) >/dev/null 2>&1 &")
    wait_until(lambda: len(box.get_file("ticks").split()) >= 3, ignore=(OSError,), what="ticks")
    box.pause()
    assert box.alive()  # a paused sandbox is still there to resume
    with pytest.raises(SandboxError, match="paused"):
        box.exec("true")
    time.sleep(0.5)  # the scenario: paused for a while (the gap asserted below)
    box.resume()
    ticks = [int(t) for t in box.get_file("ticks").split()]
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert max(gaps) > 0.4e9  # nothing ran while paused
    box.resume()  # resuming a running sandbox is a no-op
    assert sh(box, "echo back") == (0, "back\n")


def test_kill_cleanup_and_attach(runtime: Any, start: Any, docker_client: Any) -> None:
    from docker.errors import NotFound

    box = start()
    handle = box.handle()
    again = runtime.attach(handle, None)
    assert again is not None and again.id == box.id and again.alive()
    box.kill()
    assert not box.alive() and runtime.attach(handle, None) is not None  # stopped, not gone
    box.kill()  # killing a dead sandbox is fine
    box.cleanup()
    with pytest.raises(NotFound):
        docker_client.api.inspect_container(box.id)
    assert runtime.attach(handle, None) is None
    assert not Path(handle["credentials_dir"]).exists()


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"gateway says hi")

    def log_message(self, *args: Any) -> None:
        pass


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def test_gateway_unix_socket_reachable_without_network(start: Any, tmp_path: Path) -> None:
    directory = tmp_path / "gw"
    directory.mkdir(mode=0o755)
    tmp_path.chmod(0o755)
    path = directory / "gateway.sock"
    server = _UnixHTTPServer(str(path), _Hello)
    os.chmod(path, 0o666)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        box = start(gateway_socket=str(path))
        client = (
            "import os, socket; u = os.environ['AL_GATEWAY_URL']; s = socket.socket(socket.AF_UNIX);"
            "s.connect(u.removeprefix('unix://')); s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n');"
            "reply = b''.join(iter(lambda: s.recv(4096), b''));"
            "print(u, reply.decode().split('\\r\\n\\r\\n')[1])"
        )
        code, out = sh(box, f'python3 -c "{client}"')
        assert (code, out) == (0, "unix:///run/al-gateway/gateway.sock gateway says hi\n")
    finally:
        server.shutdown()
        server.server_close()
