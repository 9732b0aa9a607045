"""`lifecycle export` and `lifecycle report`: a startup as a Chrome/Perfetto trace, as OpenTelemetry
spans (OTLP JSON), and as one self-contained HTML page.

Everything is derived from the hash-chained per-rank logs, read by `lifecycle.audit`. Imports
neither torch nor megatron; the OpenTelemetry SDK (extra `otel`) is imported by the functions that
need it.
"""

from __future__ import annotations

from lifecycle.export._chrome import write_chrome as write_chrome
from lifecycle.export._details import Collect
from lifecycle.export._follow import follow as follow
from lifecycle.export._live import attach as attach_live_spans
from lifecycle.export._model import load
from lifecycle.export._otlp import write_otlp as write_otlp
from lifecycle.export._report import render
from lifecycle.export._report import rules_url_problem as rules_url_problem
from lifecycle.export._report import write_report as write_report

__all__ = [
    "Collect",
    "attach_live_spans",
    "load",
    "render",
]
