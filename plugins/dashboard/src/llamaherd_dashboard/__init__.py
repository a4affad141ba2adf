"""llamaherd-dashboard: web pages and a JSON API on the scheduler's HTTP server.

Only the hooks live here; Starlette, Jinja2 and the routes load inside them so ``al --help``
stays fast.
"""

from typing import Any

from llamaherd import hookimpl


class DashboardKey:
    """The project's ``[dashboard]`` table: a password to sign in with besides the token."""

    name = "dashboard"
    description = "The web dashboard on the scheduler's server."
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "password_sha256": {
                "type": "string",
                "pattern": "^[0-9a-fA-F]{64}$",
                "description": "SHA-256 (hex) of a password the dashboard's sign-in accepts "
                "besides the control token: `printf %s 'long passphrase' | sha256sum`. Without "
                "it, sign in with `.al/control-token`.",
            }
        },
        "additionalProperties": False,
    }


@hookimpl
def register_project_keys(register):
    register(DashboardKey())


@hookimpl
def register_routes(app):
    from llamaherd_dashboard.routes import add_routes

    add_routes(app)
