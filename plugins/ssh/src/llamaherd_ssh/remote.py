"""What runs on the remote host: the shell scripts of the ``ssh`` runtime, and its layout there.

::

    <cwd>/.al-runs/                 0700, created on first use, removed when left empty
      <run-id>/                     0700: the run's private dir (removed by cleanup)
        owner.json                  which project and scheduler process started the run
        bin/                        the language-skill commands, first on $PATH
        credentials/<type>/<instance>/<field>   0700 dirs, files 0400: $AL_CREDENTIALS_PATH
        shared/                     the project's shared/ files, read-only: $AL_SHARED_PATH
        tmp/                        $TMPDIR
        work/                       the working dir (kept with keepWorkdir)
        gw.sock                     the scheduler's gateway, forwarded over the connection
                                    (when that path is too long for a socket: a link to
                                    /tmp/al-gw-<random>.sock, removed with the run dir)

Each script is run by ``SshMaster.script``/``popen`` with ``/bin/sh``; every value in it is
quoted here (``shlex.quote``), and secrets only ever appear in the scripts, which travel on the
session's stdin, never on a command line. Processes of a run are found by their process group
(each exec is a session of its own) and, for those that left it, by ``AL_RUN_ID`` in their
environment or a working dir inside the run's dir (Linux ``/proc``).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path

from llamaherd.api import StagedFile, tar_archive

RUNS_DIR = ".al-runs"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
q = shlex.quote


def cd_cwd(cwd: str) -> str:
    """Shell lines entering ``cwd`` (``~``, ``~/x`` and relative paths from the home dir)."""
    home = 'cd -- "$HOME"'
    if cwd in ("~", ""):
        return home
    if cwd.startswith("~/"):
        return f"{home}/{q(cwd[2:])}"
    return f"{home} && cd -- {q(cwd)}"


def start_script(cwd: str, run_id: str) -> str:
    """Create the run's dir under ``cwd`` from the tar archive on stdin; print its path."""
    return f"""set -e
umask 077
{cd_cwd(cwd)}
base="$(pwd -P)/{RUNS_DIR}"
mkdir -p -- "$base"
run="$base"/{q(run_id)}
mkdir -- "$run"
cd -- "$run"
tar -xpf -
mkdir work tmp
printf '%s\\n' "$run"
"""


def archive(
    owner: Mapping[str, object],
    bin_dir: Path | None,
    files: list[StagedFile],
    shared: list[StagedFile] | None = None,
) -> bytes:
    """The tar archive ``start_script`` unpacks: ``owner.json``, ``bin/``, ``credentials/``
    and, when the project has any, ``shared/`` (read-only copies of its ``shared/`` files)."""
    entries: list[tuple[str, int, bytes | None]] = [
        ("owner.json", 0o600, json.dumps(owner).encode() + b"\n"),
        ("bin", 0o755, None),
    ]
    if bin_dir is not None and bin_dir.is_dir():
        entries += [
            (f"bin/{path.name}", 0o755, path.read_bytes())
            for path in sorted(bin_dir.iterdir())
            if path.is_file()
        ]
    entries.append(("credentials", 0o700, None))
    entries += [(f"credentials/{f.path}", f.mode, f.content) for f in files]
    if shared:  # readable by anyone the login user lets in, as in a container
        dirs = {
            "/".join(f.path.split("/")[:n]) for f in shared for n in range(1, f.path.count("/") + 1)
        }
        entries += [("shared", 0o755, None), *((f"shared/{d}", 0o755, None) for d in sorted(dirs))]
        entries += [(f"shared/{f.path}", 0o444, f.content) for f in shared]
    return tar_archive(entries, parents=0o700)


def exports(env: Mapping[str, str]) -> str:
    """``export`` lines for ``env`` (names that are not shell identifiers are left out)."""
    return "\n".join(
        f"export {name}={q(value)}" for name, value in env.items() if ENV_NAME.fullmatch(name)
    )


def exec_script(command: str, workdir: str, cwd: str, bin_dir: str, env: Mapping[str, str]) -> str:
    """Run ``command`` in ``cwd`` (relative to ``workdir``) with ``env``; stdout and stderr
    merged on stdout. On the session's stderr: ``al-pid <pid>`` first (the exec's process
    group: sshd makes every session one of its own), ``al-exit <code>`` when it exits."""
    return f"""exec </dev/null
{{ cd -- {q(workdir)} && cd -- {q(cwd)}; }} 2>&1 || {{ echo "al-exit 1" >&2; exit 1; }}
{exports(env)}
export PATH={q(bin_dir)}:"$PATH"
echo "al-pid $$" >&2
/bin/sh -c {q(command)} 2>&1
echo "al-exit $?" >&2
"""


# Signals every process of a run (or of one exec): the process groups given, then each process
# of this user (``-O``: its /proc dir is ours) whose environment holds the marker or whose working dir is inside the run's dir
# (what left its group: a double-forked daemon). SIGKILL is repeated until none is left, so
# what was forking meanwhile goes too.
_SIGNAL = """nl='
'
for group in $groups; do kill -"$sig" -- "-$group" 2>/dev/null; done
for _ in 1 2 3 4 5 6 7 8 9 10; do
  found=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$$" ] || [ ! -O "$d" ] && continue
    hit=
    case "$nl$(tr '\\0' '\\n' <"$d/environ" 2>/dev/null)$nl" in *"$nl$marker$nl"*) hit=1 ;; esac
    if [ -z "$hit" ] && [ -n "$dir" ]; then
      case "$(readlink "$d/cwd" 2>/dev/null)" in "$dir"|"$dir"/*) hit=1 ;; esac
    fi
    [ -n "$hit" ] && kill -"$sig" "$p" 2>/dev/null && found=1
  done
  [ "$sig" = KILL ] && [ -n "$found" ] || break
done
"""


def signal_script(sig: str, marker: str, groups: Iterable[int] = (), run_dir: str = "") -> str:
    """Send ``sig`` (KILL, STOP, CONT) to the processes of a run or an exec (``marker``:
    ``NAME=value`` in their environment)."""
    ids = " ".join(str(int(g)) for g in groups)
    return f"sig={q(sig)}\nmarker={q(marker)}\ndir={q(run_dir)}\ngroups={q(ids)}\n{_SIGNAL}"


# The gateway socket of a run whose dir's path is too long for one lives in /tmp (``SOCKETS``),
# named by a link at ``gw.sock``: removed through it (only ever such a name: the agent, which
# can change the link, can remove nothing its login user could not remove anyway).
SOCKETS = "/tmp/al-gw-"
_UNLINK_SOCKET = """link={link}
if [ -h "$link" ]; then
  target=$(readlink -- "$link")
  case "$target" in {sockets}*/*) ;; {sockets}*.sock) rm -f -- "$target" ;; esac
fi
"""


def link_socket_script(run_dir: str, socket_path: str) -> str:
    """Name the run's gateway socket, kept in /tmp for a long run dir, at ``gw.sock``."""
    return f"ln -s -- {q(socket_path)} {q(run_dir + '/gw.sock')}\n"


def remove_script(marker: str, run_dir: str, keep_workdir: bool) -> str:
    """Kill what is left of the run, then remove its gateway socket, its dir (all but
    ``work/`` when kept) and the runs dir if that left it empty."""
    unlink = _UNLINK_SOCKET.format(link=q(run_dir + "/gw.sock"), sockets=q(SOCKETS))
    remove = (
        f"cd -- {q(run_dir)} 2>/dev/null && rm -rf -- bin credentials tmp owner.json gw.sock"
        if keep_workdir
        else f"rm -rf -- {q(run_dir)}\nrmdir -- {q(str(Path(run_dir).parent))} 2>/dev/null"
    )
    return f"{signal_script('KILL', marker, (), run_dir)}{unlink}{remove}\ntrue\n"


def list_script(cwd: str) -> str:
    """One line per run dir under ``cwd``: ``<dir>\\t<owner.json>``."""
    return f"""{cd_cwd(cwd)} 2>/dev/null || exit 0
base="$(pwd -P)/{RUNS_DIR}"
[ -d "$base" ] || exit 0
for f in "$base"/*/owner.json; do
  [ -f "$f" ] && printf '%s\\t%s\\n' "${{f%/owner.json}}" "$(cat -- "$f")"
done
true
"""


def probe_script(cwd: str) -> str:
    """What ``al doctor`` checks on a host: ``key=value`` lines."""
    return f"""printf 'shell=%s\\n' "$(getent passwd "$(id -un)" 2>/dev/null | cut -d: -f7)"
printf 'python3=%s\\n' "$(command -v python3)"
printf 'tar=%s\\n' "$(command -v tar)"
printf 'proc=%s\\n' "$([ -r /proc/self/environ ] && echo yes)"
if {cd_cwd(cwd)} 2>/dev/null; then
  printf 'cwd=%s\\n' "$(pwd -P)"
  [ -w . ] && printf 'writable=yes\\n'
fi
true
"""
