"""The server side of ``al push``: one standard-library script run by the server's ``python3``.

``llamaherd_deploy.ssh`` sends this file's source over the SSH session's stdin and runs it with
``python3 -c`` (see ``BOOTSTRAP`` there), followed by one JSON request line and, for ``upload``,
a tar archive. It answers one JSON line on stdout; progress goes to stderr. Nothing needs to be
installed on the server beforehand, which is why it imports only the standard library and parses
on old Pythons (``probe`` reports the version before anything else runs). ``al service`` (in the
deployed venv) imports ``service_mode`` from here, so both judge systemd the same way.

The layout of a deployment, under its base directory (``basePath``, default
``/opt/action-llama``), all 0700 and owned by the SSH user::

    releases/<id>/project/    the project's files (no .al/); project/.al -> ../../../state
    releases/<id>/venv        -> ../../venvs/<key>: llamaherd and exactly the plugins it uses
    venvs/<key>/              one virtualenv per set of requirements, shared by releases
    credsets/<id>/            the credentials the project references (<type>/<instance>/<field>)
    state/                    the project's .al/: database, control token, logs (never synced)
    current -> releases/<id>  what the scheduler runs; flipped atomically by ``activate``
    credentials -> credsets/<id>
    project -> current/project, bin/al   conveniences for humans on the server
    incoming/<id>/            what a push uploaded, until its release is assembled

A push stages a complete new release beside the running one, validates it there with its own
venv and credentials, and only then stops the scheduler, flips ``current`` and starts it again;
if the new release does not come up, the links are flipped back and the old one is started. So
a failed step never changes what the running scheduler uses.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tarfile
import time

MIN_PYTHON = (3, 11)
COMPLETE = ".llamaherd-venv.json"  # written last into a venv that installed completely
STALE_INCOMING = 86400.0  # an upload older than this belongs to a push that died
FRESH_VENV = 3600.0  # a venv this young may belong to a push in progress: never pruned
START_TIMEOUT = 120.0
UPLOAD_TOPS = ("files", "credentials", "wheels")
# What the first-boot script of `al env prov` leaves (llamaherd_deploy.cloud.DONE, FAILED).
PROVISION_DONE = "/var/lib/llamaherd/provisioned"
PROVISION_FAILED = "/var/lib/llamaherd/provision-failed"


class Failure(Exception):
    """A step failed: its message is shown to the user as one line."""


def say(text):
    """A progress line for the user (a dropped SSH connection must not stop the step)."""
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


# --------------------------------------------------------------------------- layout


class Layout:
    """The paths of one deployment (see the module docstring)."""

    def __init__(self, base):
        self.base = os.path.abspath(os.path.expanduser(base))
        join = os.path.join
        self.releases = join(self.base, "releases")
        self.venvs = join(self.base, "venvs")
        self.credsets = join(self.base, "credsets")
        self.state = join(self.base, "state")
        self.incoming = join(self.base, "incoming")
        self.current = join(self.base, "current")
        self.credentials = join(self.base, "credentials")

    def release_dir(self, release):
        return os.path.join(self.releases, _plain(release))

    def project(self, release):
        return os.path.join(self.release_dir(release), "project")

    def current_release(self):
        return _link_name(self.current)

    def current_credset(self):
        return _link_name(self.credentials)

    def al(self):
        """The current release's ``al``, by the stable path through ``current``."""
        return [os.path.join(self.current, "venv", "bin", "al"), "--project",
                os.path.join(self.current, "project")]  # fmt: skip

    def venv_of(self, release):
        return _link_name(os.path.join(self.release_dir(release), "venv"))


def _plain(name):
    """A release id or venv key is one plain path segment."""
    if not name or "/" in name or name.startswith(".") or name != name.strip():
        raise Failure(f"invalid name {name!r}")
    return name


def _link_name(path):
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def _mkdir(path):
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)


def _flip(link, target):
    """Point ``link`` at ``target`` atomically (a new symlink renamed over the old one)."""
    tmp = f"{link}.{os.getpid()}.tmp"
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    os.symlink(target, tmp)
    os.replace(tmp, link)


def _remove(path):
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)


class _Lock:
    """One push at a time changes a deployment (an exclusive flock on ``push.lock``)."""

    def __init__(self, layout):
        _mkdir(layout.base)
        self.fd = os.open(os.path.join(layout.base, "push.lock"), os.O_RDWR | os.O_CREAT, 0o600)

    def __enter__(self):
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise Failure(
                "another push to this deployment is in progress; try again later"
            ) from None
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


# --------------------------------------------------------------------------- what is there


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _prefixes(scope):
    """A push's scope (a path prefix, or a list of them) for ``str.startswith``."""
    return scope if isinstance(scope, str) else tuple(scope)


def manifest(root, scope=None):
    """``{relative path: [sha256, executable]}`` of the regular files under ``root``, the
    project's ``.al`` left out; with ``scope``, only paths under those prefixes."""
    found = {}
    if not os.path.isdir(root):
        return found
    for directory, dirs, names in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        if rel_dir == ".":
            dirs[:] = [d for d in dirs if d != ".al"]
        for name in names:
            path = os.path.join(directory, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            if scope and not rel.startswith(_prefixes(scope)):
                continue
            found[rel] = [sha256_file(path), bool(os.stat(path).st_mode & 0o100)]
    return found


def credential_digests(root, nonce):
    """``{type/instance/field: HMAC(nonce, content)}``: enough to tell what changed, useless to
    anyone who reads it later (the nonce is new for every push)."""
    found = {}
    if not os.path.isdir(root):
        return found
    key = nonce.encode()
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root)
            if name.startswith(".") or rel.count(os.sep) != 2:
                continue
            with open(path, "rb") as fh:
                found[rel] = hmac.new(key, fh.read(), hashlib.sha256).hexdigest()
    return found


def scheduler(layout):
    """What the deployment's running scheduler wrote about itself, if its process lives."""
    try:
        with open(os.path.join(layout.state, "scheduler.json")) as fh:
            info = json.load(fh)
        pid = int(info.get("pid", 0))
    except (OSError, ValueError, TypeError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return {"pid": pid, "url": info.get("url"), "started_at": info.get("started_at")}


def service_mode(user=None):
    """How this host keeps a scheduler running: ``{"mode": "system" | "user" | "supervised",
    "why": ...}``. systemd when it runs (a system unit as root; a user unit for another user
    whose lingering is on, else the user manager stops at logout), else a supervisor process."""
    user = user or pwd.getpwuid(os.geteuid()).pw_name
    if not os.path.isdir("/run/systemd/system") or shutil.which("systemctl") is None:
        return {"mode": "supervised", "why": "systemd is not running on this host"}
    if os.geteuid() == 0:
        return {"mode": "system", "why": "systemd runs and the user is root"}
    if os.path.exists(os.path.join("/var/lib/systemd/linger", user)):
        return {"mode": "user", "why": f"systemd runs and lingering is on for {user}"}
    return {
        "mode": "supervised",
        "why": f"lingering is off for {user} (`sudo loginctl enable-linger {user}` gives a systemd user "
        "service)",
    }


def unit_name(root):
    """The systemd unit (without ``.service``) of the project or deployment at ``root``."""
    import re

    return "llamaherd-" + (re.sub(r"[^A-Za-z0-9]+", "-", str(root)).strip("-") or "root")


def op_logs(request):
    """Become the command that prints the deployed scheduler's log (``al env logs``): its
    unit's journal under systemd, else the supervisor's ``state/scheduler.log``."""
    layout = Layout(request["base"])
    lines = str(int(request.get("lines") or 50))
    follow = bool(request.get("follow"))
    mode = service_mode()["mode"]
    unit = unit_name(layout.base) + ".service"
    units = {
        "system": "/etc/systemd/system",
        "user": os.path.join(os.path.expanduser("~"), ".config", "systemd", "user"),
    }
    if mode in units and os.path.exists(os.path.join(units[mode], unit)):
        which = "--user-unit" if mode == "user" else "--unit"
        command = ["journalctl", which, unit, "-n", lines, "--no-pager", "-o", "short-iso"]
        command += ["-f"] if follow else []
    else:
        log = os.path.join(layout.state, "scheduler.log")
        if not os.path.exists(log):
            raise Failure(f"no scheduler log in {layout.state} yet (deploy with `al push`)")
        command = ["tail", "-n", lines] + (["-F"] if follow else []) + [log]
    sys.stdout.flush()
    os.execvp(command[0], command)


def _deployed(layout):
    release = layout.current_release()
    if release is None:
        return None
    venv = layout.venv_of(release)
    requirements = None
    try:
        with open(os.path.join(layout.venvs, venv or "-", COMPLETE)) as fh:
            requirements = json.load(fh).get("requirements")
    except (OSError, ValueError):
        pass
    return {"release": release, "venv": venv, "requirements": requirements,
            "credset": layout.current_credset()}  # fmt: skip


def _free_space(path):
    """Free bytes and whether we may create ``path`` (judged at its nearest existing parent)."""
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    usage = shutil.disk_usage(probe)
    return usage.free, os.access(probe, os.W_OK | os.X_OK)


def provisioning():
    """Where the first-boot script of ``al env prov`` is (``llamaherd_deploy.cloud``): "done",
    "failed: <step>", "running" while cloud-init runs, None on a server without cloud-init."""
    try:
        with open(PROVISION_FAILED) as fh:
            return "failed: " + fh.read().strip()
    except OSError:
        pass
    if os.path.exists(PROVISION_DONE):
        return "done"
    if os.path.exists("/var/lib/cloud/instance") and not os.path.exists(
        "/var/lib/cloud/instance/boot-finished"
    ):
        return "running"
    return None


def op_probe(request):
    """The server as a push needs to know it; changes nothing."""
    entry = pwd.getpwuid(os.geteuid())
    answer = {
        "python": list(sys.version_info[:3]),
        "executable": sys.executable,
        "user": entry.pw_name,
        "home": entry.pw_dir,
        "provisioning": provisioning(),
    }
    if tuple(sys.version_info[:2]) < MIN_PYTHON:
        return answer
    import importlib.util

    layout = Layout(request["base"])
    free, writable = _free_space(layout.base)
    deployed = _deployed(layout)
    answer.update(
        base=layout.base,
        venv_support=importlib.util.find_spec("ensurepip") is not None,
        free=free,
        writable=writable,
        service=service_mode(entry.pw_name),
        deployed=deployed,
        scheduler=scheduler(layout),
    )
    if deployed:
        answer["files"] = manifest(layout.project(deployed["release"]), request.get("scope"))
        answer["credentials"] = credential_digests(layout.credentials, request["nonce"])
    if os.path.isdir(layout.venvs):
        answer["venvs"] = sorted(
            name
            for name in os.listdir(layout.venvs)
            if os.path.exists(os.path.join(layout.venvs, name, COMPLETE))
        )
    return answer


def op_status(request):
    """The running scheduler's address and control token (for ``al stat --env``)."""
    layout = Layout(request["base"])
    running = scheduler(layout)
    if running is None:
        raise Failure(
            f"no scheduler is running in {layout.base} (deploy with `al push`; `al env check` says more)"
        )
    with open(os.path.join(layout.state, "control-token")) as fh:
        running["token"] = fh.read().strip()
    return running


# --------------------------------------------------------------------------- staging


def _safe_member(member):
    """Refuse archive members that would land outside the upload dir or are not plain."""
    parts = member.name.split("/")
    if member.name.startswith("/") or ".." in parts or parts[0] not in UPLOAD_TOPS:
        raise Failure(f"refusing archive member {member.name!r}")
    if not (member.isfile() or member.isdir()):
        raise Failure(f"refusing archive member {member.name!r} (not a regular file)")


def op_upload(request):
    """Unpack the tar archive on stdin into ``incoming/<release>/``."""
    layout = Layout(request["base"])
    _mkdir(layout.base)
    dest = os.path.join(layout.incoming, _plain(request["id"]))
    _mkdir(layout.incoming)
    _remove(dest)
    _mkdir(dest)
    count = 0
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as tar:
        for member in tar:
            _safe_member(member)
            if member.isdir():
                continue
            target = os.path.join(dest, *member.name.split("/"))
            _mkdir(os.path.dirname(target))
            source = tar.extractfile(member)
            mode = 0o700 if member.mode & 0o100 else 0o600
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(source, out)
            os.chmod(target, mode)
            count += 1
    return {"files": count}


def _run(command, env=None, relay=lambda line: False):
    """Run ``command``; its output lines for which ``relay(line)`` holds are passed on as
    progress. Returns (exit code, all its output)."""
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env=env, universal_newlines=True,
    )  # fmt: skip
    lines = []
    for line in proc.stdout:
        line = line.rstrip()
        lines.append(line)
        if line and relay(line):
            say("    " + line)
    return proc.wait(), "\n".join(lines)


def op_venv(request):
    """Create ``venvs/<key>`` with ``requirements`` unless a complete one exists."""
    layout = Layout(request["base"])
    key = _plain(request["key"])
    target = os.path.join(layout.venvs, key)
    if os.path.exists(os.path.join(target, COMPLETE)):
        return {"created": False}
    _mkdir(layout.venvs)
    _remove(target)  # a half-built one from a push that died
    code, output = _run([sys.executable, "-m", "venv", target])
    if code != 0:
        _remove(target)
        raise Failure("cannot create a virtualenv: " + _tail(output))
    pip = [os.path.join(target, "bin", "python"), "-m", "pip", "install",
           "--disable-pip-version-check", "--no-input", "--progress-bar", "off"]  # fmt: skip
    if request.get("no_index"):
        pip.append("--no-index")
    if request.get("find_links"):
        pip += [
            "--find-links",
            os.path.join(layout.incoming, _plain(request["find_links"]), "wheels"),
        ]
    # pip's per-package lines say little; its summary and its errors are worth showing.
    code, output = _run(pip + list(request["requirements"]), relay=_pip_summary)
    if code != 0:
        _remove(target)
        wanted = " ".join(request["requirements"])
        raise Failure(f"pip could not install {wanted}: {_tail(output)}")
    marker = {"requirements": sorted(request["requirements"]), "created_at": time.time()}
    with open(os.path.join(target, COMPLETE), "w") as fh:
        json.dump(marker, fh)
    return {"created": True}


def _reason(output):
    """The line of a command's output that says why it failed: the last error of the log tail
    it shows (lines starting "|"), else its last error, else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    logged = [line.lstrip("| ").strip() for line in lines if line.startswith("|")]
    for candidates in (logged, lines):
        errors = [line for line in candidates if "error" in line.lower()]
        if errors:
            return errors[-1]
    return lines[-1] if lines else "no output"


def _pip_summary(line):
    return line.startswith(("Successfully installed", "ERROR", "WARNING"))


def _tail(text, lines=3):
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " / ".join(kept[-lines:]) or "no output"


def _place(source, target, executable, move):
    _mkdir(os.path.dirname(target))
    if move:
        os.replace(source, target)
    else:
        shutil.copyfile(source, target)
    os.chmod(target, 0o700 if executable else 0o600)


def _assemble_project(layout, request, current):
    """``releases/<id>/project``: the wanted files, from the upload or the current release."""
    release = _plain(request["id"])
    project = layout.project(release)
    uploaded = os.path.join(layout.incoming, release, "files")
    scope = request.get("scope")
    old = layout.project(current) if current else None
    _mkdir(project)
    if scope and old:  # a one-agent push: everything outside the agent stays as it is
        for rel, (_, executable) in manifest(old).items():
            if not rel.startswith(_prefixes(scope)):
                _place(os.path.join(old, rel), os.path.join(project, rel), executable, False)
    for rel, (digest, executable) in request["files"].items():
        if ".." in rel.split("/") or rel.startswith("/"):
            raise Failure(f"refusing path {rel!r}")
        fresh = os.path.join(uploaded, *rel.split("/"))
        if os.path.exists(fresh):
            _place(fresh, os.path.join(project, rel), executable, True)
            continue
        kept = os.path.join(old, rel) if old else None
        if not kept or not os.path.isfile(kept) or sha256_file(kept) != digest:
            raise Failure(f"{rel} changed on the server during the push; push again")
        _place(kept, os.path.join(project, rel), executable, False)
    _mkdir(layout.state)
    os.symlink(os.path.relpath(layout.state, project), os.path.join(project, ".al"))
    os.symlink(os.path.join("..", "..", "venvs", _plain(request["venv"])),
               os.path.join(layout.release_dir(release), "venv"))  # fmt: skip
    return project


def _assemble_credentials(layout, request, current_credset):
    """``credsets/<id>``: the uploaded credentials (a one-agent push keeps the others)."""
    release = _plain(request["id"])
    target = os.path.join(layout.credsets, release)
    _mkdir(layout.credsets)
    _remove(target)
    if request.get("scope") and current_credset:
        shutil.copytree(os.path.join(layout.credsets, current_credset), target)
    _mkdir(target)
    uploaded = os.path.join(layout.incoming, release, "credentials")
    for directory, _, names in os.walk(uploaded):
        for name in names:
            rel = os.path.relpath(os.path.join(directory, name), uploaded)
            _place(os.path.join(directory, name), os.path.join(target, rel), False, True)
    for directory, dirs, _ in os.walk(target):
        for name in dirs:
            os.chmod(os.path.join(directory, name), 0o700)
    return target


def op_release(request):
    """Assemble a release (its project and/or a credential set) beside the current one and
    validate it there with its own ``al``; a release that does not validate is removed."""
    layout = Layout(request["base"])
    with _Lock(layout):
        current = layout.current_release()
        release = _plain(request["id"])
        created = []
        try:
            if request.get("project"):
                created.append(layout.release_dir(release))
                project = _assemble_project(layout, request, current)
                al = os.path.join(layout.release_dir(release), "venv", "bin", "al")
            elif current:
                project = layout.project(current)
                al = os.path.join(layout.release_dir(current), "venv", "bin", "al")
            else:
                raise Failure("nothing is deployed here yet: push the project's files first")
            credentials = layout.credentials
            if request.get("credentials"):
                created.append(os.path.join(layout.credsets, release))
                credentials = _assemble_credentials(layout, request, layout.current_credset())
            env = dict(os.environ, AL_CREDENTIALS_DIR=credentials)
            say("validating the release with the server's plugins and credentials")
            command = [al, "--project", project, "validate"] + list(request.get("agents") or [])
            code, output = _run(command, env=env)
        except BaseException:
            for path in created:
                _remove(path)
            raise
        if code != 0:
            for path in created:
                _remove(path)
            _remove(os.path.join(layout.incoming, release))
        return {"ok": code == 0, "output": output}


def op_discard(request):
    """Remove what a push staged and did not activate."""
    layout = Layout(request["base"])
    release = _plain(request["id"])
    with _Lock(layout):
        if layout.current_release() != release:
            _remove(layout.release_dir(release))
        if layout.current_credset() != release:
            _remove(os.path.join(layout.credsets, release))
        _remove(os.path.join(layout.incoming, release))
    return {"ok": True}


# --------------------------------------------------------------------------- activation


def _service(layout, verb, request):
    """``al service VERB`` of the current release, with the deployment's credentials (``start``
    also installs or refreshes the systemd unit where systemd runs)."""
    command = layout.al() + ["service", verb]
    if verb == "start":
        command += ["--grace", str(request["grace"]),
                    "--timeout", str(request.get("start_timeout", START_TIMEOUT))]  # fmt: skip
    env = dict(os.environ, AL_CREDENTIALS_DIR=layout.credentials)
    code, output = _run(command, env=env, relay=bool)
    return code == 0, output


def _sh_quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


def _conveniences(layout):
    """``<base>/project`` and ``<base>/bin/al``: the deployment as a human on the server uses it."""
    link = os.path.join(layout.base, "project")
    if not os.path.lexists(link):
        os.symlink(os.path.join("current", "project"), link)
    _mkdir(os.path.join(layout.base, "bin"))
    wrapper = os.path.join(layout.base, "bin", "al")
    command = " ".join(_sh_quote(part) for part in layout.al())
    env_file = _sh_quote(os.path.join(layout.state, "service.env"))
    text = (
        "#!/bin/sh\n# Written by `al push`: this deployment's al, project, credentials and\n"
        "# service.env (the scheduler's environment).\n"
        f"if [ -r {env_file} ]; then set -a; . {env_file}; set +a; fi\n"
        f"AL_CREDENTIALS_DIR={_sh_quote(layout.credentials)}\nexport AL_CREDENTIALS_DIR\n"
        f'exec {command} "$@"\n'
    )
    with open(wrapper + ".tmp", "w") as fh:
        fh.write(text)
    os.chmod(wrapper + ".tmp", 0o700)
    os.replace(wrapper + ".tmp", wrapper)


def op_activate(request):
    """Stop the scheduler (gracefully), point ``current`` and ``credentials`` at the push's
    release and credential set, start it again; on failure flip back and start the old one.
    ``restart`` false (credentials only: they are read per run) starts only a stopped one."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a dropped connection must not stop us halfway
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    layout = Layout(request["base"])
    push = _plain(request["id"])
    with _Lock(layout):
        old_release, old_credset = layout.current_release(), layout.current_credset()
        wanted = [(request.get("project"), layout.current, layout.releases),
                  (request.get("credentials"), layout.credentials, layout.credsets)]  # fmt: skip
        for flag, _, directory in wanted:
            if flag and not os.path.isdir(os.path.join(directory, push)):
                raise Failure(f"release {push} is gone (another push removed it?); push again")
        running = scheduler(layout)
        restart = bool(request.get("restart")) or running is None
        if restart and running and old_release:
            say(f"stopping the scheduler (pid {running['pid']}; active runs finish first)")
            ok, output = _service(layout, "stop", request)
            if not ok:
                if scheduler(layout) is None:
                    _service(layout, "start", request)
                raise Failure(
                    f"could not stop the running scheduler ({_reason(output)}); nothing changed"
                )
        for flag, link, directory in wanted:
            if flag:
                _flip(link, os.path.join(os.path.basename(directory), push))
        _conveniences(layout)
        if restart:
            say("starting the scheduler")
            new_release = layout.current_release()
            ok, output = _service(layout, "start", request)
            if not ok:
                _rollback(layout, old_release, old_credset, running, request)
                raise Failure(
                    f"the scheduler did not start with release {new_release} ({_reason(output)}); "
                    + _rolled_back(old_release, running)
                )
        _remove(os.path.join(layout.incoming, push))
        _prune(layout)
        return {"ok": True, "scheduler": scheduler(layout), "restarted": restart}


def _rollback(layout, old_release, old_credset, running, request):
    say("rolling back")
    if old_release:
        _flip(layout.current, os.path.join("releases", old_release))
    if old_credset:
        _flip(layout.credentials, os.path.join("credsets", old_credset))
    if old_release and running:
        _service(layout, "start", request)


def _rolled_back(old_release, running):
    if old_release and running:
        return f"rolled back to release {old_release}, which runs again"
    if old_release:
        return f"rolled back to release {old_release} (it was not running)"
    return "nothing runs there now"


def _prune(layout):
    """Keep the current release and credential set and the one before each (for a rollback),
    the venvs those use, and young venvs a concurrent push may be filling."""
    keep = set()
    for directory, current in ((layout.releases, layout.current_release()),
                               (layout.credsets, layout.current_credset())):  # fmt: skip
        if not os.path.isdir(directory) or current is None:
            continue
        ids = sorted(os.listdir(directory))
        older = [i for i in ids if i < current]
        kept = {current, *older[-1:]}
        for name in ids:
            if name < current and name not in kept:
                _remove(os.path.join(directory, name))
        if directory == layout.releases:
            keep = {layout.venv_of(name) for name in os.listdir(directory)}
    if os.path.isdir(layout.venvs):
        now = time.time()
        for name in os.listdir(layout.venvs):
            path = os.path.join(layout.venvs, name)
            if name not in keep and now - os.stat(path).st_mtime > FRESH_VENV:
                _remove(path)
    if os.path.isdir(layout.incoming):
        now = time.time()
        for name in os.listdir(layout.incoming):
            path = os.path.join(layout.incoming, name)
            if now - os.stat(path).st_mtime > STALE_INCOMING:
                _remove(path)


OPS = {
    "probe": op_probe,
    "status": op_status,
    "upload": op_upload,
    "venv": op_venv,
    "release": op_release,
    "discard": op_discard,
    "activate": op_activate,
    "logs": op_logs,
}


def main():
    os.umask(0o077)
    request = json.loads(sys.stdin.buffer.readline().decode())
    operation = OPS.get(request.pop("op", None))
    try:
        if operation is None:
            raise Failure("unknown step (the server's helper is older or newer than this al)")
        answer, code = operation(request), 0
    except Failure as exc:
        answer, code = {"error": str(exc)}, 1
    except OSError as exc:
        where = exc.filename or "the server"
        answer, code = {"error": f"{where}: {exc.strerror or exc}"}, 1
    try:
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    sys.exit(code)


if __name__ == "__main__":
    main()
