"""A streamed decoder's generated samples in one run of the reference: its first steps (the
prefixes) and its steps on the pasts those compute, as two copies of its graph in one session
(twinned.py), the second reading each past from the first's present output (`chain`), each
weight's MatMul run once for both (joined.py).

The reference ran twice before (reference_runs._merged_first): the prefixes as one batch, whose
presents are the samples' own pasts (generated.with_own_pasts), then the samples as one batch;
each run read every weight from the mapped file, and each MatMul packed its weight (no
pre-packing in a streamed session: dec-l4, 1.35 GB, 0.7 s of CPU for the two runs). The samples,
their pasts and every output are those two runs' (each copy's rows computed by the kernels its
own run used: joined.py); where the session cannot be had, or the presents are not the pasts
with_own_pasts would take, the caller runs twice as before.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import VerificationError
from .batched import _joined, batch_groups, split_batch
from .generated import _own_past_prefix
from .kv_cache import is_cache_input, present_names
from .twinned import joined_feeds, outputs_of, split_outputs

# the reference's session of 2 copies with a chain {past input: present output}, and a run of it
OpenTwins = Callable[[int, dict[str, str]], object]
RunTwins = Callable[[object, list[str], dict[str, np.ndarray]], list[np.ndarray]]


def chained_runs(sess, samples: list[dict[str, np.ndarray]], seeds: list[int], *, open_twins: OpenTwins,
                 run: RunTwins, shapes=None, model=None, length: int):
    """(the samples with their own pasts, their outputs, [(their prefixes, the prefixes' outputs)])
    as reference_runs._merged_first has them from two runs of `sess` (the reference's plain
    session: its inputs and outputs), here from one run of `open_twins(2, chain)`; None where that
    is not to be had (the caller runs twice then)."""
    names = [o.name for o in sess.get_outputs()]
    prefixes = [_own_past_prefix(sess, sample, shapes=shapes, seed=seed, model=model, length=length)
                for sample, seed in zip(samples, seeds)]
    if any(p is None for p in prefixes) or len(batch_groups(prefixes)) != 1 or len(batch_groups(samples)) != 1:
        return None
    chain = {}  # each past and the present with_own_pasts takes for it (the first of present_names given)
    for name in samples[0]:
        if "past" in name.lower() and is_cache_input(name):
            source = next((s for s in present_names(name) if s in names), None)
            if source is not None:
                chain[name] = source
    if not chain:
        return None
    everyone = list(range(len(samples)))
    firsts, steps = _joined(prefixes, everyone), _joined(samples, everyone)
    try:
        twins = open_twins(2, chain)
        outputs = run(twins, outputs_of(names, 2), joined_feeds([firsts, {k: v for k, v in steps.items()
                                                                           if k not in chain}]))
    except (VerificationError, ValueError):
        return None
    finally:
        twins = None  # noqa: F841 - freed before the caller's next session
    firsts_out, steps_out = split_outputs(outputs, 2)
    computed = dict(zip(names, firsts_out))
    # with_own_pasts' rule: a past is replaced only by a present of its shape and dtype
    if any(computed[s].shape != steps[p].shape or computed[s].dtype != steps[p].dtype for p, s in chain.items()):
        return None
    sizes = [next(iter(s.values())).shape[0] for s in samples]
    cut_firsts, cut_steps = split_batch(firsts_out, sizes), split_batch(steps_out, sizes)
    if cut_firsts is None or cut_steps is None:
        return None
    made = []
    for sample, outs in zip(samples, cut_firsts):
        own = dict(sample)
        own.update({past: dict(zip(names, outs))[source] for past, source in chain.items()})
        made.append(own)
    return made, cut_steps, [(prefixes, cut_firsts)]

