"""A trace per run and run metrics, built from what core tells plugins about a run.

The trace of a run: a root span ``run <agent>`` from the trigger to the run's end, and under it
``trigger <kind>`` (when it was queued), ``queue wait`` (queued to claimed), ``sandbox start``
(claimed to the sandbox being up: image, user, credentials), one ``hook <phase>`` per hook
command, one ``model_call <model>`` per model call (model, tokens, cost) and one
``tool <name>`` per tool call. Spans are made from the run events with their own recorded times
and durations (``run_event`` arrives on core's delivery thread, possibly after the run ended),
so a child may be exported after its root: the tree is whole once the last one arrives.

Metrics: ``llamaherd.runs`` (count by agent, state, trigger), ``llamaherd.run.duration``
(seconds from claim to end), ``llamaherd.model.tokens`` (by agent, model, type),
``llamaherd.model.cost`` (USD) and ``llamaherd.queue.depth`` (queued items by agent, observed
at each export).

The SDK's own providers are used, never the global ones, so another library's OpenTelemetry
setup in the same process is left alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from llamaherd.api import __version__, host_id
from llamaherd_otel.settings import Settings

log = logging.getLogger("llamaherd.otel")

FINISHED_KEPT = 512  # finished runs whose spans late events may still attach to
TEXT_LIMIT = 1000  # characters of a command or reason kept in an attribute


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


@dataclass
class RunTrace:
    """One run's root span and what its children need."""

    root: Any
    context: Any
    agent: str
    models: dict[str, str] = field(default_factory=dict)  # [models.<name>] -> model id
    ended: bool = False


class Telemetry:
    """The exporters of one project's ``[telemetry]``, and the runs being traced."""

    def __init__(self, settings: Settings, project: Any):
        from opentelemetry.sdk.resources import Resource

        self.settings = settings
        self.resource = Resource.create(
            {
                "service.name": settings.service_name,
                "service.version": __version__,
                "service.instance.id": host_id(),
                "llamaherd.project": str(project.config.get("projectName") or project.root.name),
            }
        )
        self.tracer_provider = self._tracer_provider()
        self.tracer = self.tracer_provider.get_tracer("llamaherd", __version__)
        self.meter_provider = self._meter_provider()
        self._instruments()
        self.runs: OrderedDict[str, RunTrace] = OrderedDict()
        self._lock = threading.Lock()
        self._queue_depth: Any = None  # () -> {agent: depth}, once an engine is known

    def _tracer_provider(self) -> Any:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        sampler = ParentBased(TraceIdRatioBased(self.settings.sampling_rate))
        provider = TracerProvider(resource=self.resource, sampler=sampler)
        exporter = OTLPSpanExporter(
            endpoint=self.settings.url("traces"), headers=self.settings.headers or None
        )
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return provider

    def _meter_provider(self) -> Any:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        exporter = OTLPMetricExporter(
            endpoint=self.settings.url("metrics"), headers=self.settings.headers or None
        )
        reader = PeriodicExportingMetricReader(exporter)
        return MeterProvider(resource=self.resource, metric_readers=[reader])

    def _instruments(self) -> None:
        from opentelemetry.metrics import Observation

        meter = self.meter_provider.get_meter("llamaherd", __version__)
        self.run_count = meter.create_counter("llamaherd.runs", "{run}", "Runs that ended.")
        self.run_duration = meter.create_histogram(
            "llamaherd.run.duration", "s", "Seconds from a run's claim to its end."
        )
        self.tokens = meter.create_counter(
            "llamaherd.model.tokens", "{token}", "Model tokens, by type (input, output)."
        )
        self.cost = meter.create_counter("llamaherd.model.cost", "USD", "What model calls cost.")
        self.budget = meter.create_counter(
            "llamaherd.budget.threshold",
            "{crossing}",
            "Daily or monthly budgets that reached 80% or 100% (by agent, scope, period, "
            "threshold).",
        )

        def depth(_options: Any) -> list[Any]:
            reader = self._queue_depth
            if reader is None:
                return []
            try:
                found = reader()
            except Exception as exc:  # a closed store at shutdown: nothing to observe
                log.debug("queue depth unavailable: %s", exc)
                return []
            return [Observation(n, {"llamaherd.agent": agent}) for agent, n in found.items()]

        meter.create_observable_gauge(
            "llamaherd.queue.depth", [depth], "{item}", "Queued work items, by agent."
        )

    def watch_queue(self, engine: Any) -> None:
        """Observe the queue depth of ``engine``'s store at each metrics export (every agent,
        0 included: an empty queue is a value, not a gap)."""

        def depths() -> dict[str, int]:
            queued = engine.store.queue_depth()
            return {name: queued.get(name, 0) for name in engine.project.agents} | queued

        self._queue_depth = depths

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    # ------------------------------------------------------------------ a run

    def started(self, run: Any) -> None:
        """``run_started``: the root span from the trigger's time, and the three spans before
        the sandbox was up."""
        now = time.time()
        trigger = run.trigger or {}
        queued = float(trigger.get("queued_at") or now)
        claimed = float(trigger.get("claimed_at") or queued)
        trace = self._root(run, queued)
        kind, source = str(trigger.get("kind") or "?"), trigger.get("source")
        attributes = {"llamaherd.trigger.kind": kind}
        if source:
            attributes["llamaherd.trigger.source"] = str(source)
        self._child(trace, f"trigger {kind}", queued, queued, attributes)
        self._child(trace, "queue wait", queued, claimed, {})
        runtime = str(run.agent.runtime.get("type", "?"))
        self._child(trace, "sandbox start", claimed, now, {"llamaherd.runtime": runtime})

    def event(self, run: Any, kind: str, data: dict[str, Any], at: float) -> None:
        """``run_event``: a child span (or a root span event) per event that is a step."""
        trace = self._trace(run, at)
        if kind == "model_call":
            self._model_call(trace, data, at)
        elif kind == "tool_call":
            self._tool_call(trace, data, at)
        elif kind == "hook":
            duration = float(data.get("duration") or 0)
            attributes = {
                "llamaherd.hook.command": _clip(data.get("command")),
                "llamaherd.hook.exit_code": int(data.get("exit_code") or 0),
            }
            failed = data.get("exit_code") not in (0, None)
            self._child(trace, f"hook {data.get('phase')}", at - duration, at, attributes, failed)
        elif kind == "budget":
            self.budget.add(
                1,
                {
                    "llamaherd.agent": str(data.get("agent") or run.agent.name),
                    "llamaherd.budget.scope": str(data.get("scope")),
                    "llamaherd.budget.period": str(data.get("period")),
                    "llamaherd.budget.threshold": float(data.get("threshold") or 0),
                },
            )
        elif kind in ("wait", "suspended", "run_error", "provider_error") and not trace.ended:
            trace.root.add_event(kind, _flat(data), timestamp=_ns(at))

    def finished(self, run: Any, result: Any) -> None:
        """``run_finished``: the root span ends with the run's state; the run metrics."""
        from opentelemetry.trace import Status, StatusCode

        now = time.time()
        trace = self._trace(run, now)
        trigger = run.trigger or {}
        labels = {
            "llamaherd.agent": run.agent.name,
            "llamaherd.run.state": result.state,
            "llamaherd.trigger.kind": str(trigger.get("kind") or "?"),
        }
        self.run_count.add(1, labels)
        claimed = float(trigger.get("claimed_at") or now)
        self.run_duration.record(max(0.0, now - claimed), labels)
        root = trace.root
        root.set_attribute("llamaherd.run.state", result.state)
        root.set_attribute("llamaherd.run.exit_code", result.exit_code)
        if result.reason:
            root.set_attribute("llamaherd.run.reason", _clip(result.reason))
        if result.state != "done":
            root.set_status(Status(StatusCode.ERROR, _clip(result.reason or result.state)))
        root.end(end_time=_ns(now))
        trace.ended = True

    # ------------------------------------------------------------------ spans

    def _root(self, run: Any, start: float) -> RunTrace:
        from opentelemetry import trace as otel
        from opentelemetry.trace import SpanKind

        trigger = run.trigger or {}
        attributes = {
            "llamaherd.agent": run.agent.name,
            "llamaherd.run_id": run.run_id,
            "llamaherd.trigger.kind": str(trigger.get("kind") or "?"),
            # Action Llama's names for the same (its SpanAttributes).
            "agent.name": run.agent.name,
            "agent.run_id": run.run_id,
            "agent.trigger_type": str(trigger.get("kind") or "?"),
        }
        root = self.tracer.start_span(
            f"run {run.agent.name}", kind=SpanKind.CONSUMER, attributes=attributes,
            start_time=_ns(start),
        )  # fmt: skip
        models = run.project.config.get("models") or {}
        trace = RunTrace(
            root,
            otel.set_span_in_context(root),
            run.agent.name,
            {name: str(t.get("model", "")) for name, t in models.items() if isinstance(t, dict)},
        )
        with self._lock:
            self.runs[run.run_id] = trace
            while len(self.runs) > FINISHED_KEPT:
                self.runs.popitem(last=False)
        return trace

    def _trace(self, run: Any, at: float) -> RunTrace:
        """The run's trace; a run resumed in this process after a restart starts one here."""
        with self._lock:
            found = self.runs.get(run.run_id)
        if found is not None:
            return found
        trace = self._root(run, at)
        trace.root.set_attribute("llamaherd.resumed", True)
        return trace

    def _child(
        self,
        trace: RunTrace,
        name: str,
        start: float,
        end: float,
        attributes: dict[str, Any],
        failed: bool = False,
    ) -> Any:
        from opentelemetry.trace import Status, StatusCode

        span = self.tracer.start_span(
            name, context=trace.context, attributes=attributes, start_time=_ns(start)
        )
        if failed:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=_ns(max(start, end)))
        return span

    def _model_call(self, trace: RunTrace, data: dict[str, Any], at: float) -> None:
        name = str(data.get("model") or "?")
        model = trace.models.get(name) or name
        provider = str(data.get("provider") or "?")
        inputs, outputs = int(data.get("input_tokens") or 0), int(data.get("output_tokens") or 0)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": provider,
            "gen_ai.request.model": model,
            "llamaherd.model": name,
            "gen_ai.usage.input_tokens": inputs,
            "gen_ai.usage.output_tokens": outputs,
            "llamaherd.usage.cached_input_tokens": int(data.get("cached_input_tokens") or 0),
        }
        cost = data.get("cost_usd")
        if cost is not None:
            attributes["llamaherd.cost_usd"] = float(cost)
        if data.get("error_class"):
            attributes["error.type"] = str(data["error_class"])
        start = at - float(data.get("duration_ms") or 0) / 1000
        self._child(trace, f"model_call {model}", start, at, attributes, not data.get("ok", True))
        labels = {"llamaherd.agent": trace.agent, "gen_ai.request.model": model}
        self.tokens.add(inputs, {**labels, "gen_ai.token.type": "input"})
        self.tokens.add(outputs, {**labels, "gen_ai.token.type": "output"})
        if cost:
            self.cost.add(float(cost), labels)

    def _tool_call(self, trace: RunTrace, data: dict[str, Any], at: float) -> None:
        tool = str(data.get("tool") or "?")
        attributes: dict[str, Any] = {"gen_ai.tool.name": tool}
        arguments = data.get("arguments")
        if isinstance(arguments, dict) and isinstance(arguments.get("command"), str):
            attributes["llamaherd.tool.command"] = _clip(arguments["command"])
        if data.get("exit_code") is not None:
            attributes["llamaherd.tool.exit_code"] = int(data["exit_code"])
        if data.get("deferred"):
            attributes["llamaherd.tool.deferred"] = str(data["deferred"])
        start = at - float(data.get("duration") or 0)
        self._child(trace, f"tool {tool}", start, at, attributes, bool(data.get("is_error")))


def _clip(value: Any) -> str:
    text = str(value or "")
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 1] + "…"


def _flat(data: dict[str, Any]) -> dict[str, Any]:
    """An event's data as span-event attributes (scalars kept, the rest as text)."""
    return {
        str(k): v if isinstance(v, str | bool | int | float) else _clip(v)
        for k, v in data.items()
        if v is not None
    }


# ---------------------------------------------------------------------- the process's telemetry

_current: Telemetry | None = None
_current_lock = threading.Lock()


def for_project(project: Any) -> Telemetry | None:
    """This process's telemetry for ``project`` (made on first use, remade when its settings
    changed), or None when its ``[telemetry]`` exports nothing."""
    global _current
    settings = Settings.of(project)
    with _current_lock:
        if _current is not None and (settings is None or _current.settings != settings):
            _current.shutdown()
            _current = None
        if settings is not None and _current is None:
            _current = Telemetry(settings, project)
        return _current


def current() -> Telemetry | None:
    return _current
