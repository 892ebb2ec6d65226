"""What every pass is, and the one manager that runs a list of them (as onnx-ir's `PassBase`
and `PassManager` do).

A pass is one class (a frozen dataclass holding its options, so that a pipeline is data and a
step can key a memo) with two methods:

- `apply(graph, overridable=...)`: do it, in place, and return its result, a PassReport: what
  changed (`changed`, `details`), the bytes saved, each skip with its reason.
- `estimate(graph, overridable=..., removed=...)`: the bytes it would save (the figure `info`
  shows), without changing the graph, and the constants it would remove, so that the next
  pass's estimate leaves them out (quant's estimate does not count a weight that the merge
  before it removes).

Calling a pass runs it on a gs graph, as a script does (`MergeDuplicates()(graph)`); the
functions scripts know (`merge_duplicate_constants(graph, min_elements=...)`) are the same
classes called that way (`as_function`). A pipeline is a list of passes (pipeline.py:
shrink_pipeline, quant_pipeline); `PassManager` runs, estimates, or runs up to one of them, so
`quant`, `shrink` and `info` go through the same lists, and `info` asks the passes instead of
reaching into their internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import onnx_graphsurgeon as gs

from ..graph_names import overridable_initializers
from ..live_nodes import all_used
from ..report import PassReport


@dataclass
class Estimate:
    """What a pass would do to a graph. `removes` holds `id()`s of the gs.Constant objects
    it would merge away; `details` pass-specific figures (e.g. the duplicate groups)."""

    name: str
    bytes_saved: int = 0
    removes: frozenset[int] = frozenset()
    details: dict[str, Any] = field(default_factory=dict)


class PassBase:
    """One pass (module doc). Subclasses are frozen dataclasses of their options, and set `name`
    (the report's) and, where needed, `needs_cleanup`."""

    name: ClassVar[str]
    # True for a pass that must not see what earlier passes left dead (a constant merged away
    # still looks like a weight with no reader): the manager cleans up the graph before it.
    needs_cleanup: ClassVar[bool] = False

    def apply(self, graph: gs.Graph, *, overridable: frozenset[str]) -> PassReport:
        raise NotImplementedError

    def estimate(self, graph: gs.Graph, *, overridable: frozenset[str],
                 removed: frozenset[int] = frozenset()) -> Estimate:
        raise NotImplementedError

    def __call__(self, graph: gs.Graph, *, overridable: frozenset[str] | None = None) -> PassReport:
        """Run on `graph`, in place; `overridable` (default: the constants listed among the
        graph's inputs) is never touched."""
        return self.apply(graph, overridable=overridable_initializers(graph) if overridable is None else overridable)


def as_function(kind: type[PassBase]) -> Callable[..., PassReport]:
    """The pass `kind` as the function scripts call: `f(graph, overridable=None, **options)`."""

    def run(graph: gs.Graph, *, overridable: frozenset[str] | None = None, **options) -> PassReport:
        return kind(**options)(graph, overridable=overridable)

    run.__doc__ = f"`{kind.__name__}(**options)(graph, overridable=...)`: {(kind.__doc__ or '').strip()}"
    return run


@dataclass(frozen=True)
class PassManager:
    """Runs a list of passes on one graph, in order (onnx-ir's PassManager). `overridable` (None:
    the constants listed among the graph's inputs) is never touched by any of them."""

    passes: tuple[PassBase, ...]
    overridable: frozenset[str] | None = None

    def _overridable(self, graph: gs.Graph) -> frozenset[str]:
        return overridable_initializers(graph) if self.overridable is None else self.overridable

    def run(self, graph: gs.Graph) -> list[PassReport]:
        """Each pass applied in order, in place; the graph cleaned up before a pass that needs it."""
        overridable = self._overridable(graph)
        reports = []
        for step in self.passes:
            if step.needs_cleanup:
                remove_dead(graph)
            reports.append(step.apply(graph, overridable=overridable))
        return reports

    def estimate(self, graph: gs.Graph, memo: dict | None = None) -> list[Estimate]:
        """What each pass would save, the graph unchanged: each estimate leaves out the constants
        the passes before it would remove. Managers estimating one graph may share a `memo`, so
        that a pass they have in common (the merge) reads the weights once."""
        overridable = self._overridable(graph)
        memo = {} if memo is None else memo
        removed: frozenset[int] = frozenset()
        estimates = []
        for step in self.passes:
            key = (step, removed)
            if key not in memo:
                memo[key] = step.estimate(graph, overridable=overridable, removed=removed)
            removed |= memo[key].removes
            estimates.append(memo[key])
        return estimates

    def run_until(self, graph: gs.Graph, kind: type[PassBase]) -> PassBase:
        """The passes before the first of `kind` applied, the graph cleaned up, and that pass
        returned, not run (`quant --dry-run` then asks it for its plan)."""
        at = next(i for i, step in enumerate(self.passes) if isinstance(step, kind))
        PassManager(self.passes[:at], self._overridable(graph)).run(graph)
        remove_dead(graph)
        return self.passes[at]


def remove_dead(graph: gs.Graph) -> None:
    """Remove what the passes left dead (e.g. Constant nodes merged away), in all scopes,
    keeping every graph input: a caller may still feed one the graph no longer reads. Skipped
    where nothing is dead (live_nodes.py)."""
    if not all_used(graph):
        graph.cleanup(remove_unused_graph_inputs=False, recurse_subgraphs=True)
