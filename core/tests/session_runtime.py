"""A minimal subprocess runtime for the session tests (until host-user is available).

Runs every exec as the current user in its own process group, in a private temp dir, with a
clean environment (PATH with the commands dir first, the spec's env, the staged credentials).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from llamaherd import hookimpl
from llamaherd.credentials import staged_files
from llamaherd.types import ExecResult


class ProcSandbox:
    def __init__(self, workdir: str, env: dict[str, str]):
        self.id = os.path.basename(workdir)
        self.workdir = workdir
        self.env = env
        self.groups: set[int] = set()
        self.killed = False

    def exec(self, command, cwd=None, env=None, timeout=None, on_output=None) -> ExecResult:
        if self.killed:
            return ExecResult(137, "sandbox killed")
        started = time.monotonic()
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=cwd or self.workdir,
            env={**self.env, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            text=True,
            errors="replace",
        )
        self.groups.add(proc.pid)
        try:
            out, _ = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            self._killpg(proc.pid)
            out, _ = proc.communicate()
            timed_out = True
        finally:
            self.groups.discard(proc.pid)
        code = 124 if timed_out else proc.returncode
        return ExecResult(code, out, timed_out, time.monotonic() - started)

    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        Path(path).write_bytes(data)
        os.chmod(path, mode)

    def get_file(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def pause(self) -> None:
        for pgid in list(self.groups):
            self._killpg(pgid, signal.SIGSTOP)

    def resume(self) -> None:
        for pgid in list(self.groups):
            self._killpg(pgid, signal.SIGCONT)

    def alive(self) -> bool:
        return os.path.isdir(self.workdir) and not self.killed

    def kill(self) -> None:
        self.killed = True
        for pgid in list(self.groups):
            self._killpg(pgid)

    def cleanup(self) -> None:
        shutil.rmtree(os.path.dirname(self.workdir), ignore_errors=True)

    def handle(self) -> dict[str, Any]:
        return {"workdir": self.workdir}

    @staticmethod
    def _killpg(pgid: int, sig: int = signal.SIGKILL) -> None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass


class ProcRuntime:
    name = "proc"
    description = "test runtime: subprocesses of the current user"
    schema: dict[str, Any] = {}

    def prepare(self, agent, project) -> None:
        pass

    def start(self, spec) -> ProcSandbox:
        root = tempfile.mkdtemp(prefix="al-proc-")
        workdir = os.path.join(root, "work")
        os.mkdir(workdir)
        return ProcSandbox(workdir, self._env(spec, root))

    def attach(self, handle, spec):
        workdir = handle.get("workdir", "")
        if not os.path.isdir(workdir):
            return None
        return ProcSandbox(workdir, self._env(spec, os.path.dirname(workdir)) if spec else {})

    def cleanup_orphans(self, live_run_ids) -> int:
        return 0

    def _env(self, spec, root: str) -> dict[str, str]:
        creds = os.path.join(root, "credentials")
        from llamaherd.plugins import registry

        for key, values in spec.credentials.items():
            type_name = key.split("/")[0]
            directory = os.path.join(creds, key)
            os.makedirs(directory, exist_ok=True)
            for name, data, mode in staged_files(registry().credential_types[type_name], values):
                Path(directory, name).write_bytes(data)
                os.chmod(os.path.join(directory, name), mode)
        env = {
            "PATH": f"{spec.bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": root,
            "LANG": "C.UTF-8",
            "AL_CREDENTIALS_PATH": creds,
        }
        env.update(spec.credential_env(creds))
        env.update(spec.env)
        return env


class Plugin:
    @hookimpl
    def register_runtimes(self, register):
        register(ProcRuntime())
