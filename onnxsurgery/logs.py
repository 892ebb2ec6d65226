"""Logging: what the passes do (logger "onnxsurgery"), and onnx-graphsurgeon's own messages.

gs prints its log lines ("[W] colored module is not installed ...", "[W] Model does not
contain ONNX domain opset information!") straight to stdout, where they break `--json` and
clutter the report. `route_gs_logging` sends them through `logging` instead (logger
"onnx_graphsurgeon"), at INFO at most: hidden by default, shown with `-v`. gs's own errors
still raise as before.
"""

from __future__ import annotations

import logging

from onnx_graphsurgeon.logger import G_LOGGER

GS_LOGGER = logging.getLogger("onnx_graphsurgeon")


def _forward(message, severity, mode=None, stack_depth=2) -> None:  # gs's Logger.log signature
    level = logging.DEBUG if severity < G_LOGGER.INFO else logging.INFO
    if not GS_LOGGER.isEnabledFor(level) or severity < G_LOGGER.severity:
        return
    GS_LOGGER.log(level, "%s", message() if callable(message) else message)


def route_gs_logging() -> None:
    """Send gs's messages through `logging` (module docstring). Idempotent."""
    G_LOGGER.log = _forward
