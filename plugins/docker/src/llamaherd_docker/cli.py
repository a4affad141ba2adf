"""``al setup docker``: build the project base image agent Dockerfiles build on."""

from __future__ import annotations

import click

from llamaherd_docker.images import AL_BASE, BASE_IMAGE_ENV, DEFAULT_BASE_IMAGE


@click.command("docker")
@click.option(
    "--base-image",
    default=DEFAULT_BASE_IMAGE,
    envvar=BASE_IMAGE_ENV,
    show_default=True,
    help="Image to start from (must be present locally or pullable by the daemon's FROM).",
)
@click.option(
    "--tag",
    default=AL_BASE,
    show_default=True,
    help="Name of the image to build; agents use [local].image (default al-agent:latest).",
)
def setup_docker(base_image: str, tag: str) -> None:
    """Build the base image agents run in: a `node` user (uid 1000), python3, `USER node`.

    Agent Dockerfiles written for Action Llama (`FROM al-agent:latest`) build on it.
    """
    from llamaherd_docker.daemon import connect
    from llamaherd_docker.images import build_base

    client = connect()
    click.echo(f"building {tag} from {base_image}")
    build_base(client, base_image, tag, progress=click.echo)
    click.echo(f"built {tag}")
