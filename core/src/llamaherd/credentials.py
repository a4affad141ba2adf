"""The credential store: ``<root>/<type>/<instance>/<field>``, one file per field.

The layout and file format are the ones existing Action Llama users already have on disk
(``~/.action-llama/credentials``; each file holds the value plus a newline, read back stripped),
so their credentials work as they are. Directories are 0700 and files 0600 whatever the umask;
every field is written atomically (temp file in the same directory, fsync, ``os.replace``), so a
crash leaves the old value or the new one, never half a file.

Also here: the helpers every caller needs to turn an agent's ``credentials = [...]`` list into
staged files and env vars, so runtimes, the runner and ``al validate`` agree on the rules.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from llamaherd.errors import ConfigError, LlamaherdError
from llamaherd.types import StagedFile

DEFAULT_INSTANCE = "default"
DEFAULT_FILE_MODE = 0o400
DIR_MODE = 0o700
FILE_MODE = 0o600
# Type, instance and field names become path components: keep them to one plain segment.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_TEMP_PREFIX = "."  # temp files are dotfiles so a crash leftover is never read as a field
_TEMP_SUFFIX = ".tmp"
# A temp file older than this is a crashed writer's leftover (a concurrent write takes far less).
STALE_TEMP_AGE = 600.0


class CredentialError(LlamaherdError):
    """A bad credential name or reference, or a missing credential."""


def default_root() -> Path:
    """``$AL_CREDENTIALS_DIR`` or ``~/.action-llama/credentials``."""
    override = os.environ.get("AL_CREDENTIALS_DIR")
    if override:
        return Path(override).expanduser()
    return Path.home() / ".action-llama" / "credentials"


def check_name(kind: str, name: str) -> str:
    """Return ``name`` if it is a safe single path segment, else raise CredentialError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise CredentialError(
            f"invalid credential {kind} name {name!r}: expected letters, digits, '_', '-' or '.',"
            " not starting with '.' or '-'"
        )
    return name


def parse_ref(ref: str) -> tuple[str, str]:
    """``"git_ssh:deploy"`` -> ``("git_ssh", "deploy")``; the instance defaults to "default"."""
    type_name, _, instance = ref.strip().partition(":")
    return check_name("type", type_name.strip()), check_name(
        "instance", instance.strip() or DEFAULT_INSTANCE
    )


def format_ref(type_name: str, instance: str) -> str:
    """The short form users type: ``git_ssh:deploy``, or just ``github_token`` for default."""
    return type_name if instance == DEFAULT_INSTANCE else f"{type_name}:{instance}"


class CredentialStore:
    """Credentials on disk at ``root/<type>/<instance>/<field>``."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else default_root()

    def path(self, type_name: str, instance: str = DEFAULT_INSTANCE) -> Path:
        """Directory of one instance (names are checked, so it is always under ``root``)."""
        return self.root / check_name("type", type_name) / check_name("instance", instance)

    def read(self, type_name: str, instance: str = DEFAULT_INSTANCE) -> dict[str, str] | None:
        """All fields of an instance, or None when it has none."""
        directory = self.path(type_name, instance)
        values = {name: _read_field(directory / name) for name in _entries(directory, files=True)}
        return values or None

    def signature(self) -> tuple[Any, ...]:
        """Changes whenever a credential is added, replaced or removed (each write renames a
        file into its instance directory, which changes that directory's mtime): a running
        scheduler re-checks a config that lacked one."""
        found: list[Any] = []
        for directory in (self.root, *self.root.glob("*"), *self.root.glob("*/*")):
            try:
                found.append((str(directory), directory.stat().st_mtime_ns))
            except OSError:  # absent, or removed meanwhile
                continue
        return tuple(found)

    def exists(self, type_name: str, instance: str = DEFAULT_INSTANCE) -> bool:
        return bool(_entries(self.path(type_name, instance), files=True))

    def write(self, type_name: str, instance: str, values: Mapping[str, str]) -> None:
        """Store each field atomically; fields not in ``values`` are left as they are."""
        directory = self.path(type_name, instance)
        for name in values:
            check_name("field", name)
        self._make_dirs(directory)
        _remove_stale_temps(directory)
        for name, value in values.items():
            _atomic_write(directory / name, (value.strip() + "\n").encode("utf-8"))

    def remove(self, type_name: str, instance: str = DEFAULT_INSTANCE) -> bool:
        """Delete an instance; drop its type dir when empty. Returns whether it existed."""
        directory = self.path(type_name, instance)
        if not directory.is_dir():
            return False
        shutil.rmtree(directory)
        try:
            directory.parent.rmdir()
        except OSError:  # other instances remain
            pass
        return True

    def list(self) -> list[tuple[str, str, list[str]]]:
        """``(type, instance, [field, ...])`` for every stored instance, sorted."""
        return [
            (type_name, instance, fields)
            for type_name in _entries(self.root, files=False)
            for instance in _entries(self.root / type_name, files=False)
            if (fields := _entries(self.root / type_name / instance, files=True))
        ]

    def _make_dirs(self, directory: Path) -> None:
        # mkdir's mode is filtered by the umask, so set 0700 explicitly on every level we own.
        for level in (self.root, directory.parent, directory):
            level.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            os.chmod(level, DIR_MODE)


def _entries(directory: Path, *, files: bool) -> list[str]:
    """Sorted names of the files (or dirs) in ``directory`` that are valid names.

    Symlinks are followed: users may link a field to a file they keep elsewhere (``~/.ssh``).
    """
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise CredentialError(f"cannot read {directory}: {exc.strerror}") from None
    return sorted(
        entry.name
        for entry in entries
        if _NAME.fullmatch(entry.name) and (entry.is_file() if files else entry.is_dir())
    )


def _read_field(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise CredentialError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CredentialError(f"cannot read {path}: not UTF-8 text") from None


def _remove_stale_temps(directory: Path) -> None:
    """Delete temp files that crashed writers left: they may hold part of a secret."""
    cutoff = time.time() - STALE_TEMP_AGE
    for temp in directory.glob(f"{_TEMP_PREFIX}*{_TEMP_SUFFIX}"):
        try:
            if temp.stat().st_mtime < cutoff:
                temp.unlink()
        except FileNotFoundError:  # another writer finished or cleaned it
            pass


def _atomic_write(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` via a 0600 temp file in the same dir, fsync, rename."""
    fd, temp = tempfile.mkstemp(
        prefix=f"{_TEMP_PREFIX}{target.name}.", suffix=_TEMP_SUFFIX, dir=target.parent
    )
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), FILE_MODE)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, target)
    except BaseException:
        os.unlink(temp)
        raise
    _fsync_dir(target.parent)


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- agents and runs


def is_staged(credential_type: Any) -> bool:
    """Types with ``sandbox = False`` (model keys, webhook secrets) never enter a sandbox."""
    return getattr(credential_type, "sandbox", True)


def file_mode(credential_type: Any, field: str) -> int:
    """Mode of a staged field file: the type's ``file_modes`` entry, else 0400."""
    return getattr(credential_type, "file_modes", {}).get(field, DEFAULT_FILE_MODE)


def staged_files(credential_type: Any, values: Mapping[str, str]) -> list[tuple[str, bytes, int]]:
    """``(field, content, mode)`` for each file a runtime writes for one instance.

    Content is the value plus a newline, as in the store (an SSH key needs its final newline).
    """
    return [
        (name, (value + "\n").encode("utf-8"), file_mode(credential_type, name))
        for name, value in values.items()
    ]


def credential_files(
    types: Mapping[str, Any], credentials: Mapping[str, Mapping[str, str]]
) -> list[StagedFile]:
    """The files a runtime stages for ``credentials`` (``"type/instance" -> {field: value}``),
    leaving out the types that never enter a sandbox."""
    files = []
    for key, values in credentials.items():
        type_name, _, instance = key.partition("/")
        credential_type = types.get(type_name)
        if not is_staged(credential_type):
            continue
        base = f"{check_name('type', type_name)}/{check_name('instance', instance)}"
        files += [
            StagedFile(f"{base}/{check_name('field', name)}", content, mode)
            for name, content, mode in staged_files(credential_type, values)
        ]
    return files


def problems(agent: Any, registry: Any, store: CredentialStore) -> list[ConfigError]:
    """Every declared credential of ``agent`` that is unknown, malformed or not in the store."""
    found: list[ConfigError] = []
    where = str(agent.config_file)
    for index, ref in enumerate(agent.credentials):
        key = f"credentials[{index}]"
        try:
            type_name, instance = parse_ref(ref)
        except CredentialError as exc:
            found.append(ConfigError(where, key, str(exc)))
            continue
        if type_name not in registry.credential_types:
            found.append(ConfigError(where, key, unknown_type_message(type_name)))
        elif not store.exists(type_name, instance):
            found.append(
                ConfigError(
                    where,
                    key,
                    f"credential {ref!r} is not in {store.root}; add it with "
                    f"`al creds add {format_ref(type_name, instance)}`",
                )
            )
    return found


def referenced(
    project: Any, registry: Any, agents: Iterable[str] | None = None
) -> set[tuple[str, str]]:
    """``(type, instance)`` of every credential the project (or only ``agents``) uses
    (``users``). What a deployment must carry; nothing else."""
    return set(users(project, registry, agents))


def users(
    project: Any, registry: Any, agents: Iterable[str] | None = None
) -> dict[tuple[str, str], list[str]]:
    """Every credential the project (or only ``agents``) uses, with who uses it: the agents
    that list it in ``credentials`` (by name), the models they use whose key it is
    (``models.<name>``), and the webhook sources it signs (``webhooks.<name>``; with
    ``agents``, of the sources they subscribe to).

    Malformed references are skipped (``al validate`` reports them).
    """
    chosen = [a for name, a in project.agents.items() if agents is None or name in set(agents)]
    found: dict[tuple[str, str], list[str]] = {}

    def use(key: tuple[str, str] | None, user: str) -> None:
        if key is not None and user not in found.setdefault(key, []):
            found[key].append(user)

    for agent in chosen:
        for ref in agent.credentials:
            try:
                use(parse_ref(str(ref)), agent.name)
            except CredentialError:
                continue
    models = _tables(project.config.get("models"))
    for name in sorted({m for agent in chosen for m in agent.models if isinstance(m, str)}):
        table = models.get(name)
        provider = registry.providers.get(table.get("provider")) if table else None
        if provider is not None and getattr(provider, "key_required", True):
            ref = table.get("credential", DEFAULT_INSTANCE)
            use(_owned_ref(ref, getattr(provider, "credential_type", None), True), f"models.{name}")
    sources = _tables(project.config.get("webhooks"))
    # The scheduler checks signatures of every source (waits take unsubscribed deliveries too).
    subscribed = (
        set(sources)
        if agents is None
        else {
            hook.get("source")
            for agent in chosen
            for hook in agent.config.get("webhooks", [])
            if isinstance(hook, dict) and isinstance(hook.get("source"), str)
        }
    )
    for name in sorted(subscribed & set(sources)):
        table = sources[name]
        source = registry.webhook_sources.get(table.get("type", "generic"))
        if source is None or table.get("allowUnsigned", False):
            continue
        ctype = getattr(source, "credential_type", None)
        # Action Llama's spelling names the instance under the credential type's own name.
        named = table.get(ctype) if ctype else None
        ref = named if isinstance(named, str) else table.get("credential", DEFAULT_INSTANCE)
        use(_owned_ref(ref, ctype, False), f"webhooks.{name}")
    return found


def _tables(value: Any) -> dict[str, dict[str, Any]]:
    """The well-formed ``[x.<name>]`` tables of a config value (``al validate`` reports the rest)."""
    if not isinstance(value, dict):
        return {}
    return {name: table for name, table in value.items() if isinstance(table, dict)}


def _owned_ref(ref: Any, default_type: str | None, typed: bool) -> tuple[str, str] | None:
    """The credential a model or webhook table names: an instance of ``default_type``, or
    (``typed``: models, as ``llamaherd.models`` reads them) ``"type:instance"``; None when
    malformed."""
    if not isinstance(ref, str) or not ref:
        return None
    type_name, instance = ref.rpartition(":")[::2] if typed else ("", ref)
    type_name = type_name or default_type or ""
    try:
        return check_name("type", type_name), check_name("instance", instance or "default")
    except CredentialError:
        return None


def unknown_type_message(type_name: str) -> str:
    """Say which distribution provides a credential type that no installed plugin registers."""
    from llamaherd.install import install_command
    from llamaherd.plugins import PROVIDED_BY

    dist = PROVIDED_BY.get(("credential_types", type_name))
    if dist:
        return (
            f"unknown credential type {type_name!r}: it is provided by {dist} "
            f"({install_command(dist)})"
        )
    return f"unknown credential type {type_name!r}: no installed plugin provides it (see `al creds types`)"


def load_for_agent(agent: Any, registry: Any, store: CredentialStore) -> dict[str, dict[str, str]]:
    """The sandbox-staged credentials of ``agent``: ``"type/instance" -> {field: value}``.

    Raises the first problem as a ConfigError (unknown type, missing credential).
    """
    errors = problems(agent, registry, store)
    if errors:
        raise errors[0]
    loaded: dict[str, dict[str, str]] = {}
    for ref in agent.credentials:
        type_name, instance = parse_ref(ref)
        if is_staged(registry.credential_types[type_name]):
            loaded[f"{type_name}/{instance}"] = store.read(type_name, instance) or {}
    return loaded


def credential_env(
    types: Mapping[str, Any], credentials: Mapping[str, Mapping[str, str]], root: str
) -> dict[str, str]:
    """Env vars the staged credentials export, given the staged root as the sandbox sees it."""
    env: dict[str, str] = {}
    for key, values in credentials.items():
        type_name, instance = key.split("/", 1)
        env.update(types[type_name].env(dict(values), PurePosixPath(root) / type_name / instance))
    return env


def secret_values(
    types: Mapping[str, Any], credentials: Mapping[str, Mapping[str, str]]
) -> Iterable[str]:
    """The values of secret fields (unknown types: every field), for the redactor."""
    for key, values in credentials.items():
        credential_type = types.get(key.split("/", 1)[0])
        secret = {f.name for f in credential_type.fields if f.secret} if credential_type else None
        yield from (value for name, value in values.items() if secret is None or name in secret)


def test_credential(credential_type: Any, values: Mapping[str, str]) -> str:
    """Check stored ``values`` of a credential: every field present, then the type's online
    ``validate`` (when it has one). Returns its one-line summary; raises ``CredentialInvalid``
    with a message whose secret values are masked (``al creds test``, ``al doctor``)."""
    from llamaherd.errors import CredentialInvalid
    from llamaherd.redact import Redactor

    missing = [f.name for f in credential_type.fields if f.name not in values]
    if missing:
        raise CredentialInvalid(f"missing field(s) {', '.join(missing)}")
    validate = getattr(credential_type, "validate", None)
    if validate is None:
        return f"all fields present ({credential_type.name} has no online check)"
    # A plugin's text must not leak a secret; non-secret fields (a username) may be shown.
    redactor = Redactor(values[field.name] for field in credential_type.fields if field.secret)
    try:
        detail = validate(dict(values))
    except CredentialInvalid as exc:
        raise CredentialInvalid(redactor.redact(str(exc))) from None
    except Exception as exc:  # a plugin bug or a network error is still a failed check
        raise CredentialInvalid(redactor.redact(f"{type(exc).__name__}: {exc}")) from None
    return redactor.redact(str(detail)) if detail else ""
