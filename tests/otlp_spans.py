"""OTLP JSON (`lifecycle export --format otlp-json`, `logging.otel`) as spans to compare: one dict
per span, whichever line, resource and scope carried it."""

from __future__ import annotations

from typing import Any

import orjson


def flat_spans(lines: list[bytes]) -> dict[tuple[str, str], dict[str, Any]]:
    """(traceId, spanId) -> the span, its attributes as a dict, with its resource's and scope's."""
    out = {}
    for line in lines:
        for resource in orjson.loads(line)["resourceSpans"]:
            held = {a["key"]: a["value"] for a in resource["resource"]["attributes"]}
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    span = {
                        **span,
                        "attributes": {a["key"]: a["value"] for a in span.get("attributes", [])},
                        "resource": held,
                        "scope": scope["scope"],
                    }
                    out[(span["traceId"], span["spanId"])] = span
    return out
