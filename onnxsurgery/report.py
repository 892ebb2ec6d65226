"""Reports: what a pass touched, what it skipped and why, and the bytes before and after."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .units import human_bytes  # noqa: F401  (here first: plan.py, pipeline.py and others import it from here)


@dataclass
class Skipped:
    name: str
    reason: str


@dataclass
class PassReport:
    """What one pass did. `details` holds pass-specific figures (JSON-serialisable)."""

    name: str
    changed: int = 0
    bytes_saved: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)

    def __str__(self) -> str:
        saved = f", saving {human_bytes(self.bytes_saved)}" if self.bytes_saved else ""
        skipped = f", {len(self.skipped)} skipped" if self.skipped else ""
        return f"{self.name}: {self.changed} changed{saved}{skipped}"

    def skip(self, name: str, reason: str) -> None:
        self.skipped.append(Skipped(name, reason))


@dataclass
class RunReport:
    """What one command did to one model."""

    command: str
    input: str
    output: str | None = None
    bytes_before: int = 0
    bytes_after: int = 0
    passes: list[PassReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verification: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)  # a result written, but worth a second look
    target_check: dict[str, Any] | None = None  # --target tensorrt: what its parser would refuse
    allocation: dict[str, str] | None = None  # --target-error / --target-size: weight -> format
    weights: list[dict[str, Any]] | None = None  # quant: the plan's records applied (quantization/plan.py)

    def __str__(self) -> str:
        """What the CLI prints for this run (a few lines); `repr` and the attributes hold the rest."""
        from .render import render_run, render_verification

        lines = [render_run(self)]
        if self.verification is not None:
            lines.append(render_verification(self.verification))
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def pass_report(self, name: str) -> PassReport | None:
        return next((p for p in self.passes if p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
