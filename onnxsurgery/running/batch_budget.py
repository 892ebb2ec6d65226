"""How many samples' activations a generated comparison may hold in one run, decided from shapes
(arena.value_sizes: onnx's shape inference with the first sample's shapes).

Verification's batch-2 sample (reference_runs.run_reference; readers.py says why it exists) holds
a second sample's activations beside the first's, and a streamed model's batch of 3 (_merged_first)
two more. docs/memory.md's bound counts one run's activations, plus 128 MiB of slack and 8x the
largest tensor (the quantizer's room, let go by the time the extra samples run: they wait at
reference_ahead's gate); onnxruntime holds at least a node's input and output at once, so each
extra sample costs at least twice its largest activation. Where that exceeds the slack and the
weights' room, the extra samples do not run together: a batch of 3 becomes the first sample and
the batch-2 sample in two runs, and where even the batch-2 sample's one extra sample does not fit,
it is left out (its batch axis is then checked by nothing but the model's own declaration). So
only a model whose activations are large beside its weights changes: of the zoo and bench models,
czann_nucleus_det alone (quire_tagger's 85 MiB sit beside a 21 MiB weight: 298 MiB of room).

czann_nucleus_det (1024 x 1024 tiles, NHWC, 96 MiB activations, 3.5 MiB at most a weight):
`quant --dtype int4`, whose opset upgrade keeps the batch-2 sample, peaked at 547-617 MB against
bounds of 541-569 MB; without it, 291-301 MB. The largest value shape inference resolves is a
floor of the largest activation (however few resolve: as arena.py's verdict reads it), so a model
it does not show past the budget, and a ModelProto reference (inference would copy its weights),
runs as before.
"""

from __future__ import annotations

import onnx

from .arena import value_sizes
from .large_runs import EXTRA_ROOM, TIMES_LARGEST, largest_weight

# docs/memory.md's slack and times the largest tensor (zoo/memory_bounds.py): what samples beyond
# the first may hold
EXTRA_BUDGET = EXTRA_ROOM

# the buffers of a sample's largest activation onnxruntime holds at once (a node's input and output)
HELD = 2


def extra_samples_fit(model, first: dict, extra: int) -> bool:
    """Whether `extra` samples like `first` (feeds at batch 1) may run beside it in one run of
    `model` (a path): HELD x `extra` x the largest activation within EXTRA_BUDGET + TIMES_LARGEST x
    the largest weight. True where the shapes do not say (as before this rule)."""
    if extra < 1 or isinstance(model, onnx.ModelProto):
        return True
    found = value_sizes(model, first)
    largest = max(found[0].values(), default=0) if found is not None else 0
    return HELD * extra * largest <= EXTRA_BUDGET or (
        HELD * extra * largest <= EXTRA_BUDGET + TIMES_LARGEST * largest_weight(model))
