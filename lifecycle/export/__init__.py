"""`lifecycle export` and `lifecycle report`: a startup as a Chrome/Perfetto trace, as OpenTelemetry
spans (OTLP JSON), and as one self-contained HTML page.

Everything is derived from the hash-chained per-rank logs, read by `lifecycle.audit`. Imports
neither torch nor megatron; the OpenTelemetry SDK (extra `otel`) is imported by the functions that
need it.
"""

from __future__ import annotations

from lifecycle.export._chrome import chrome_document, chrome_events, write_chrome
from lifecycle.export._details import Attempt, Collect, Details, Mark, read_details
from lifecycle.export._encode import encode
from lifecycle.export._follow import follow
from lifecycle.export._live import LiveSpans, live_spans
from lifecycle.export._live import attach as attach_live_spans
from lifecycle.export._model import Cycle, RankTrace, Trace, load
from lifecycle.export._otlp import MEGATRON_SPANS, ROOT, spans, write_otlp
from lifecycle.export._report import RULES_URL, render, report_data, rules_url_problem, write_report
from lifecycle.export._rows import Row, rows

__all__ = [
    "MEGATRON_SPANS",
    "ROOT",
    "RULES_URL",
    "Attempt",
    "Collect",
    "Cycle",
    "Details",
    "LiveSpans",
    "Mark",
    "RankTrace",
    "Row",
    "Trace",
    "attach_live_spans",
    "chrome_document",
    "chrome_events",
    "encode",
    "follow",
    "live_spans",
    "load",
    "read_details",
    "render",
    "report_data",
    "rows",
    "rules_url_problem",
    "spans",
    "write_chrome",
    "write_otlp",
    "write_report",
]
