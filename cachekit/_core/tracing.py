"""OpenTelemetry traces, off unless enabled: the facade every layer calls (docs/tracing.md).

While tracing is off (the default) :func:`span` returns :data:`NO_SPAN`, one shared object whose
``with`` and ``set_attribute`` do nothing, and opentelemetry is never imported. After
:func:`enable_tracing` it returns a :class:`Span`: a real OpenTelemetry span of the tracer
``cachekit``, started and made current on ``with``, ended on exit (an exception is recorded on
it). Both take attributes after the fact (``s.set_attribute("status", "HIT")``); an attribute
name without a dot is put under ``cachekit.`` (``status`` is ``cachekit.status``), a dotted one is
kept (``http.response.status_code``), and a ``None`` value is left out. Callers that would compute
attributes only for a span test ``s.recording`` first.

:func:`server_span` continues the trace of an incoming request's W3C ``traceparent`` /
``tracestate`` headers, and :meth:`Span.inject` writes the current span's into an outgoing
request's headers (``opentelemetry.propagate``, with the propagators ``OTEL_PROPAGATORS`` names).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping
from typing import Any

from cachekit._core.extras import require

__all__ = [
    "NO_SPAN",
    "NoSpan",
    "Span",
    "client_span",
    "disable_tracing",
    "enable_tracing",
    "server_span",
    "span",
    "tracing_enabled",
]

log = logging.getLogger("cachekit")

#: The instrumentation scope of every span cachekit makes.
TRACER_NAME = "cachekit"


class NoSpan:
    """What :func:`span` returns while tracing is off: one shared object, a context manager that
    does nothing (``with span(...) as s`` gives it back), nor does anything else it has."""

    __slots__ = ()

    #: Whether attributes set on it are kept (never, here).
    recording = False

    def __enter__(self) -> NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        """Nothing: tracing is off."""

    def inject(self, carrier: MutableMapping[str, str]) -> None:
        """Nothing: tracing is off (the outgoing headers stay as they are)."""


#: The one no-op span.
NO_SPAN = NoSpan()

_tracer: Any = None  # an opentelemetry Tracer while tracing is on
_otel: dict[str, Any] = {}  # what the spans use of opentelemetry, imported once when enabled


def _key(name: str) -> str:
    return name if "." in name else "cachekit." + name


def _attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {_key(k): v for k, v in attributes.items() if v is not None}


class Span:
    """A real OpenTelemetry span (tracing is on): started and made current by ``with``, ended
    on exit. ``kind`` is ``"internal"``, ``"server"`` or ``"client"``; ``context`` the parent
    (``None``: the current span)."""

    __slots__ = ("otel_attributes", "otel_context", "otel_kind", "otel_name", "otel_span", "scope")

    recording = True

    def __init__(
        self,
        name: str,
        attributes: Mapping[str, Any],
        kind: str = "internal",
        context: Any = None,
    ) -> None:
        self.otel_name = name
        self.otel_attributes = _attributes(attributes)
        self.otel_kind = kind
        self.otel_context = context
        #: The opentelemetry span once entered (None before).
        self.otel_span: Any = None
        self.scope: Any = None

    def __enter__(self) -> Span:
        tracer = _tracer
        if tracer is None:  # disabled since this object was made
            return self
        self.scope = tracer.start_as_current_span(
            self.otel_name,
            context=self.otel_context,
            kind=_otel[self.otel_kind],
            attributes=self.otel_attributes,
        )
        self.otel_span = self.scope.__enter__()
        self.otel_attributes = {}  # those set from now on: given to the span as it ends
        return self

    def __exit__(self, *exc: Any) -> None:
        scope, self.scope = self.scope, None
        if scope is not None:
            if self.otel_attributes:  # one call (one lock of the span) for all of them
                self.otel_span.set_attributes(self.otel_attributes)
            scope.__exit__(*exc)

    def set_attribute(self, key: str, value: Any) -> None:
        """Set one attribute (``None`` leaves it out), before or after the span started (then
        given to it as it ends)."""
        if value is not None:
            self.otel_attributes[_key(key)] = value

    def inject(self, carrier: MutableMapping[str, str]) -> None:
        """Write the current trace context (this span's, inside its ``with``) into ``carrier``,
        an outgoing request's headers: ``traceparent`` and ``tracestate``."""
        if _tracer is not None:
            _otel["propagate"].inject(carrier)


def span(name: str, **attributes: Any) -> NoSpan | Span:
    """A span named ``name`` around a ``with`` block: :data:`NO_SPAN` while tracing is off."""
    if _tracer is None:
        return NO_SPAN
    return Span(name, attributes)


def client_span(name: str, **attributes: Any) -> NoSpan | Span:
    """:func:`span` of kind client: a call to another service (inject its headers inside)."""
    if _tracer is None:
        return NO_SPAN
    return Span(name, attributes, "client")


def server_span(name: str, headers: Mapping[str, str], **attributes: Any) -> NoSpan | Span:
    """:func:`span` of kind server, in the trace that an incoming request's ``headers`` carry
    (``traceparent``/``tracestate``; none: a new trace)."""
    if _tracer is None:
        return NO_SPAN
    return Span(name, attributes, "server", _otel["propagate"].extract(headers))


def tracing_enabled() -> bool:
    """Whether :func:`enable_tracing` turned the spans on."""
    return _tracer is not None


def enable_tracing(tracer_provider: Any = None) -> None:
    """Make cachekit's spans (docs/tracing.md) with ``tracer_provider``'s tracer ``cachekit``.

    Without one: the global provider when the application set one (``trace.set_tracer_provider``,
    ``opentelemetry-instrument``); else an SDK ``TracerProvider`` from the standard ``OTEL_*``
    environment variables (service name and resource, sampler, ``OTEL_TRACES_EXPORTER``: ``otlp``
    by default, which needs ``opentelemetry-exporter-otlp``), set as the global one. Needs the
    ``otel`` extra. Calling it again replaces the provider."""
    global _tracer
    trace = require("opentelemetry.trace", extra="otel", feature="tracing")
    from opentelemetry import propagate

    kinds = trace.SpanKind
    _otel.update(
        internal=kinds.INTERNAL, server=kinds.SERVER, client=kinds.CLIENT, propagate=propagate
    )
    if tracer_provider is None:
        tracer_provider = trace.get_tracer_provider()
        if type(tracer_provider).__name__ in ("ProxyTracerProvider", "NoOpTracerProvider"):
            tracer_provider = _provider_from_environment()
            trace.set_tracer_provider(tracer_provider)
    from cachekit._version import __version__

    _tracer = tracer_provider.get_tracer(TRACER_NAME, __version__)


def disable_tracing() -> None:
    """Stop making spans (:func:`span` returns :data:`NO_SPAN` again). The provider is left as
    it is: flush or shut it down yourself."""
    global _tracer
    _tracer = None


def _provider_from_environment() -> Any:
    """An SDK ``TracerProvider`` as the ``OTEL_*`` variables describe it, with a batch span
    processor per exporter named in ``OTEL_TRACES_EXPORTER`` (comma separated; ``none``: none;
    ``otlp`` is gRPC, or HTTP when ``OTEL_EXPORTER_OTLP_PROTOCOL`` is ``http/protobuf``)."""
    sdk = require("opentelemetry.sdk.trace", extra="otel", feature="tracing")
    from importlib.metadata import entry_points

    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    named = "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    named = named or bool(os.environ.get("OTEL_SERVICE_NAME"))
    provider = sdk.TracerProvider(
        resource=Resource.create({} if named else {"service.name": "cachekit"})
    )
    wanted = os.environ.get("OTEL_TRACES_EXPORTER", "otlp")
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    )
    for name in (n.strip() for n in wanted.split(",")):
        if not name or name == "none":
            continue
        if name == "otlp" and protocol.strip() == "http/protobuf":
            name = "otlp_proto_http"  # as the SDK reads it: otlp alone is gRPC
        found = entry_points(group="opentelemetry_traces_exporter", name=name)
        if not found:
            log.warning(
                "OTEL_TRACES_EXPORTER names %r, which no installed package provides: spans are "
                "made but not exported (for otlp: pip install opentelemetry-exporter-otlp)",
                name,
            )
            continue
        exporter = next(iter(found)).load()
        provider.add_span_processor(BatchSpanProcessor(exporter()))
    return provider
