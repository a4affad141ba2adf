"""llamaherd-dashboard: web pages and a JSON API on the scheduler's HTTP server.

Only the hook lives here; Starlette, Jinja2 and the routes load inside it so ``al --help``
stays fast.
"""

from llamaherd import hookimpl


@hookimpl
def register_routes(app):
    from llamaherd_dashboard.routes import add_routes

    add_routes(app)
