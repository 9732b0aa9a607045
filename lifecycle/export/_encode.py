"""OTLP JSON (`ExportTraceServiceRequest`) of finished SDK spans: ids in hex, enums as integers,
64-bit integers as strings; exactly what the SDK's protobuf encoder
(`opentelemetry-exporter-otlp-proto-common`) builds, without its per-field cost. Imports nothing of
the SDK at run time: it reads the spans it is given."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from lifecycle.log import JSONValue

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.util.types import Attributes, AttributeValue

_FLAGS = 256  # SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK: the parent (when any) is known to be local


def encode(finished: Sequence[ReadableSpan]) -> dict[str, JSONValue]:
    """The OTLP JSON document (`ExportTraceServiceRequest`) of SDK spans, grouped by resource and scope."""
    groups: dict[int, dict[InstrumentationScope | None, list[dict[str, JSONValue]]]] = {}
    resources: dict[int, Resource] = {}
    for span in finished:  # by identity: hashing a Resource serializes its attributes to JSON
        key = id(span.resource)
        resources.setdefault(key, span.resource)
        groups.setdefault(key, {}).setdefault(span.instrumentation_scope, []).append(_span(span))
    out: list[JSONValue] = []
    for key, scopes in groups.items():
        resource = resources[key]
        scope_spans: list[JSONValue] = [
            {"scope": _scope(scope), "spans": encoded, **_schema(scope.schema_url if scope else None)}
            for scope, encoded in scopes.items()
        ]
        out.append(
            {"resource": _attributes_of(resource.attributes), "scopeSpans": scope_spans, **_schema(resource.schema_url)}
        )
    return {"resourceSpans": out}


def _schema(url: str | None) -> dict[str, str]:
    return {"schemaUrl": url} if url else {}


def _scope(scope: InstrumentationScope | None) -> dict[str, str]:
    if scope is None:
        return {}
    return {k: str(v) for k, v in (("name", scope.name), ("version", scope.version)) if v}


def _attributes_of(attributes: Attributes) -> dict[str, JSONValue]:
    return {"attributes": _attrs(attributes)} if attributes else {}


def _span(span: ReadableSpan) -> dict[str, JSONValue]:
    context = span.get_span_context()
    if context is None:  # every span the SDK starts has one
        raise ValueError(f"span {span.name!r} has no span context: not a span the SDK made")
    out: dict[str, JSONValue] = {"traceId": f"{context.trace_id:032x}", "spanId": f"{context.span_id:016x}"}
    if span.parent is not None:
        out["parentSpanId"] = f"{span.parent.span_id:016x}"
    out |= {
        "name": span.name,
        "kind": span.kind.value + 1,
        "startTimeUnixNano": str(span.start_time),
        "endTimeUnixNano": str(span.end_time),
    }
    out |= _attributes_of(span.attributes)
    if span.events:
        out["events"] = [
            {"timeUnixNano": str(e.timestamp), "name": e.name} | _attributes_of(e.attributes) for e in span.events
        ]
    status = span.status
    code = status.status_code.value
    out["status"] = ({"code": code} if code else {}) | ({"message": status.description} if status.description else {})
    out["flags"] = _FLAGS
    return out


def _attrs(attributes: Mapping[str, AttributeValue]) -> list[dict[str, JSONValue]]:
    return [{"key": key, "value": _value(value)} for key, value in attributes.items()]


def _value(value: AttributeValue) -> dict[str, JSONValue]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if not isinstance(value, Iterable):
        raise TypeError(f"an attribute value of type {type(value).__name__} has no OTLP JSON encoding")
    return {"arrayValue": {"values": [_value(v) for v in value]}}
