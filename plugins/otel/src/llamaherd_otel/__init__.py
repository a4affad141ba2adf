"""llamaherd-otel: the project's ``[telemetry]`` table acted on: a trace per run and run
metrics, exported with the OpenTelemetry SDK over OTLP/HTTP.

The SDK is imported only once a project enables telemetry, so ``al --help`` stays fast.
"""

from llamaherd import hookimpl


@hookimpl
def register_project_keys(register):
    from llamaherd_otel.settings import TelemetryKey

    register(TelemetryKey())


@hookimpl
def register_doctor_checks(register):
    from llamaherd_otel.doctor import TelemetryCheck

    register(TelemetryCheck())


@hookimpl
def register_routes(app):
    """The scheduler (or a foreground `al run`) is starting: export from now on."""
    from llamaherd_otel.telemetry import for_project

    engine = app.state.engine
    telemetry = for_project(engine.project)
    if telemetry is not None:
        telemetry.watch_queue(engine)


@hookimpl
def run_started(run):
    from llamaherd_otel.telemetry import for_project

    telemetry = for_project(run.project)
    if telemetry is not None:
        telemetry.started(run)


@hookimpl
def run_event(run, type, data, at):
    from llamaherd_otel.telemetry import current

    telemetry = current()
    if telemetry is not None:
        telemetry.event(run, type, data, at)


@hookimpl
def run_finished(run, result):
    from llamaherd_otel.telemetry import current

    telemetry = current()
    if telemetry is not None:
        telemetry.finished(run, result)
