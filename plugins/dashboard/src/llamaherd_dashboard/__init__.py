"""llamaherd-dashboard: web pages and a JSON API on the scheduler's HTTP server.

Only the hooks live here; Starlette, Jinja2 and the routes load inside them so ``al --help``
stays fast.
"""

from typing import Any

from llamaherd import hookimpl


class DashboardKey:
    """The project's ``[dashboard]`` table. It holds no password: ``al dashboard password``
    keeps one as a verifier in ``.al/`` (``llamaherd_dashboard.password``)."""

    name = "dashboard"
    description = "The web dashboard on the scheduler's server."
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "password_sha256": {
                "not": {},
                "x-removed": "no longer accepted: an unsalted SHA-256 in config.toml, which "
                "other local users can read, is cracked offline. Set the password with "
                "`al dashboard password` (kept as a salted scrypt verifier in "
                ".al/dashboard-password, private), then remove this key",
                "description": "Removed: set the dashboard password with `al dashboard "
                "password` instead (a salted scrypt verifier in `.al/dashboard-password`).",
            }
        },
        "additionalProperties": False,
    }


@hookimpl
def register_project_keys(register):
    register(DashboardKey())


@hookimpl
def register_tables(register):
    from llamaherd_dashboard.sessions import TABLES

    register(TABLES)


@hookimpl
def register_commands(cli):
    from llamaherd_dashboard.commands import dashboard

    cli.add_command(dashboard)


@hookimpl
def register_routes(app):
    from llamaherd_dashboard.routes import add_routes

    add_routes(app)
