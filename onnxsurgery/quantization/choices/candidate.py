"""One weight the plan changes, as the planner's stages see it (planner.py): each stage is a
function of the candidates and the run's PlanContext that returns the candidates, changed where
it decides; what a later stage reads of an earlier one's outcome is on the Candidate or the
context, never imported. A weight refused for a reason (refusals.py) is dropped: its record
stays float with that reason. A Form is what the per-weight rules (forms.site_form) choose for
a weight's own options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite
from ..calibration import Calibration
from ..options import QuantOptions, Scheme
from ..plan import WeightPlan


class Form(NamedTuple):
    """A weight's own options, as a per-weight rule chose them, and the rule's reason (said whole
    as its record's why); no reason where the run's options stand."""

    options: QuantOptions
    reason: str = ""


def form(options: QuantOptions, reason: str, **changes) -> Form:
    """`options` changed as a rule chooses (QuantOptions.changed), with the rule's reason."""
    return Form(options.changed(**changes), reason)


@dataclass(frozen=True)
class Candidate:
    site: ConstantSite
    # this weight's options (forms.site_form): the run's, or what a per-weight rule chose for it
    # (4 bits allocated by the budget, int8 where 4 bits run slowly, ...)
    options: QuantOptions
    scheme: Scheme | None = None  # its grouping (forms.choose_scheme), from forms.group on
    lowering: str = ""  # rules.lowering_for; `lean`: lean form or accurate chain, measured later (lean.py)
    float16: bool = False  # stored as float16 with a Cast back instead of integers
    why: str = ""  # why float16, said in its record (records.py words an integer record's why)
    reason: str = ""  # a per-weight rule's reason (Form), said whole as an integer record's why
    decoder_nbits: bool = False  # lowered 8-bit MatMulNBits by rules.decoder_nbits (a KV-cache decoder)

    @property
    def name(self) -> str:
        return self.site.name


@dataclass
class PlanContext:
    """What every stage of one plan reads (planner.py): the model, the run's options and opset,
    the planning run that answers each weight's questions once (planning.py), the measured
    inputs; and what earlier stages found that later ones read (the records of refused weights,
    the room at load, the measured choices)."""

    graph: gs.Graph
    options: QuantOptions
    opset: int
    overridable: frozenset[str]
    planning: Any  # planning.Planning (which imports the stages: not imported here)
    scopes: list
    activations: Calibration | None = None  # the readers' inputs, for the measured choices
    calibration: Calibration | None = None  # GPTQ's inputs
    records: dict[str, WeightPlan] = field(default_factory=dict)  # every float constant's, by name
    unchecked: set[str] | None = None  # not read for NaN/Inf yet (None: every weight checked first)
    details: dict = field(default_factory=dict)  # the plan's figures, in the order the stages add them
    room: float | None = None  # memory_at_load: what the accurate chain may spend at load (None: its share)
    lean: Any = None  # lean.LeanChoice
    symmetry: Any = None  # symmetry.SymmetryChoice
    gptq_skipped: dict[str, str] = field(default_factory=dict)  # weight -> why GPTQ leaves it
    again: bool = False  # a weight read to be measured held NaN or Inf: plan again, checking first
    held: Any = None  # held_roundings.HeldRoundings: the measurements' roundings kept for the pass

    @property
    def facts(self):
        """The model's facts (model_facts.py), the planning run's."""
        return self.planning.facts
