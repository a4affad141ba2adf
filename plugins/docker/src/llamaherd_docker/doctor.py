"""``al doctor``: the Docker daemon and the images container agents run in, with fixes that
build what is missing."""

from __future__ import annotations

from typing import Any

from llamaherd.api import ConfigError, Finding, Fix, SandboxError
from llamaherd_docker import images


class DockerCheck:
    name = "docker"
    description = "The Docker daemon, the base image and the agents' images (built if missing)."

    def check(self, project: Any, registry: Any) -> list[Finding]:
        agents = [a for a in project.agents.values() if a.runtime.get("type") == "container"]
        runtime = registry.runtimes.get("container")
        if not agents or runtime is None:
            return []
        engines: dict[str, tuple[Any, list[Any]]] = {}
        findings = []
        for agent in agents:
            try:
                engine = runtime.engine(agent)
            except ConfigError as exc:
                findings.append(Finding.error(f"agents/{agent.name}", str(exc)))
                continue
            engines.setdefault(engine.name, (engine, []))[1].append(agent)
        for engine, users in engines.values():
            findings += self._engine(engine, users, project, runtime)
        return findings

    def _engine(self, engine: Any, agents: list[Any], project: Any, runtime: Any) -> list[Finding]:
        subject = f"Docker daemon {engine.where}"
        unchecked = engine.unchecked()
        if unchecked is not None:  # al doctor runs none of an agent's commands
            return [Finding.warning(subject, unchecked)]
        try:
            client = engine.client()
        except SandboxError as exc:
            return [Finding.error(subject, str(exc))]
        version = client.version().get("Version", "?")
        findings = [Finding.ok(subject, f"answers (Docker {version})")]
        base = project.local["image"]
        if any(self._needs_base(agent, base) for agent in agents):
            findings.append(self._base(engine, base))
        for agent in agents:
            if (agent.path / "Dockerfile").is_file():
                findings.append(self._agent(client, agent, project, runtime))
        return findings

    @staticmethod
    def _needs_base(agent: Any, base: str) -> bool:
        dockerfile = agent.path / "Dockerfile"
        if not dockerfile.is_file():
            return True
        return images.uses_base(images.rewrite_from(images.project_text(dockerfile), base), base)

    @staticmethod
    def _base(engine: Any, base: str) -> Finding:
        subject = f"image {base}" + ("" if engine.name == "local" else f" on {engine.name}")
        if images.image_exists(engine.client(), base, subject):
            return Finding.ok(subject, "present")
        start = images.default_base_image()

        def build() -> str:
            images.build_base(engine.client(), start, base)
            return f"built {base} from {start}"

        return Finding.error(
            subject,
            # As the runtime's validate says it (`al doctor` then shows it once, with the fix).
            f"image {base} not found locally: build it with `al setup docker` "
            f"(or `docker pull {base}` and set [local].image)",
            Fix(f"build {base} from {start} (as `al setup docker` does)", build),
        )

    @staticmethod
    def _agent(client: Any, agent: Any, project: Any, runtime: Any) -> Finding:
        what = project.relative(agent.path / "Dockerfile")
        subject = f"agents/{agent.name} image"
        try:
            tag, _ = images.agent_image(client, agent.path, what, project.local["image"])
        except SandboxError as exc:
            return Finding.error(subject, str(exc))
        if images.image_exists(client, tag, what):
            return Finding.ok(subject, f"{tag} built from {what} as it is")

        def build() -> str:
            return f"built {runtime.prepare(agent, project)}"

        fix = Fix(f"build it from {what} now", build) if runtime is not None else None
        return Finding.warning(
            subject,
            f"not built for {what} as it is: its next run builds it first (and waits)",
            fix,
        )
