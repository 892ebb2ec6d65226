"""Sizes as people read them; imported by report.py and render.py alike (render.py prints reports,
and a report prints itself through render.py: neither may import the other at the top)."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"
