"""One weight the plan changes, as the planner's stages see it (planner.py): each stage reads
the candidates and returns them, changed where it decides. A weight refused for a reason
(refusals.py) never becomes one: its record stays float with that reason. A Form is what the
per-weight rules (forms.site_form) choose for a weight before it is one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ...graph_utils import ConstantSite
from ..options import QuantOptions, Scheme


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
    scheme: Scheme  # its grouping (forms.choose_scheme)
    lowering: str  # rules.lowering_for; `lean`: lean form or accurate chain, measured later (lean.py)
    float16: bool = False  # stored as float16 with a Cast back instead of integers
    why: str = ""  # why float16, said in its record (records.py words an integer record's why)
    reason: str = ""  # a per-weight rule's reason (Form), said whole as an integer record's why

    @property
    def name(self) -> str:
        return self.site.name
