"""One weight the plan changes, as the planner's stages see it (planner.py): each stage reads
the candidates and returns them, changed where it decides. A weight refused for a reason
(refusals.py) never becomes one: its record stays float with that reason."""

from __future__ import annotations

from dataclasses import dataclass

from ...graph_utils import ConstantSite
from ..options import QuantOptions, Scheme


@dataclass(frozen=True)
class Candidate:
    site: ConstantSite
    # this weight's options (forms.site_options): the run's, or what a per-weight rule chose for
    # it (4 bits allocated by the budget, int8 where 4 bits run slowly, ...), with its `reason`
    options: QuantOptions
    scheme: Scheme  # its grouping (forms.choose_scheme)
    lowering: str  # rules.lowering_for; `lean`: lean form or accurate chain, measured later (lean.py)
    float16: bool = False  # stored as float16 with a Cast back instead of integers
    why: str = ""  # why float16, said in its record (records.py words an integer record's why)

    @property
    def name(self) -> str:
        return self.site.name
