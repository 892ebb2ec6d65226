"""Run two models in onnxruntime on the same inputs and compare their outputs.

Inputs are generated from the declared dtypes and shapes unless given (`feeds.py`); given
ones are checked against the model's inputs first.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import numpy as np
import onnx

from .errors import InputError, UnsafeLocationError, VerificationError
from .progress import progress
# inputs for a model (generated, read, checked) live in feeds.py; imported here too, as before
from .feeds import (DEFAULT_BATCH, DEFAULT_DIM, check_samples, has_dynamic_batch, load_input_samples,  # noqa: F401
                      make_inputs, parse_shapes)

RUNTIMES = ("onnxruntime", "onnxruntime-web", "tensorrt")


def runtime_label(runtime: str, model: onnx.ModelProto | str | os.PathLike | None = None) -> str:
    """How a comparison for `runtime` is computed, for the report. With `model` (the candidate),
    onnxruntime's DequantizeLinear -> MatMul fusion is named only where the model has such an
    edge (or MatMulNBits nodes of its own)."""
    import onnxruntime as ort

    fused, nbits = _matmul_fusions(model) if model is not None else (True, False)
    if runtime == "tensorrt":
        return (f"onnxruntime {ort.__version__} CPU as TensorRT computes weight-only quantized layers: weights "
                "dequantized, arithmetic in float (qdq_matmulnbits_accuracy_level 0)")
    if runtime == "onnxruntime-web":
        how = "DequantizeLinear -> MatMul fused with float activations (qdq_matmulnbits_accuracy_level 0)"
        return f"onnxruntime {ort.__version__} CPU as onnxruntime-web computes" + (f": {how}" if fused else "")
    label = f"onnxruntime {ort.__version__} CPU, default graph optimizations"
    if fused:
        return label + " (DequantizeLinear -> MatMul fused into MatMulNBits with int8 activations)"
    if nbits:
        return label + " (MatMulNBits at the accuracy_level its nodes give)"
    return label


def _matmul_fusions(model: onnx.ModelProto | str | os.PathLike) -> tuple[bool, bool]:
    """(a DequantizeLinear output read by a MatMul, a MatMulNBits node), in any scope. A path
    is read without its weights' payloads."""
    from .io import graphs_everywhere

    if not isinstance(model, onnx.ModelProto):
        from .lazy import read_model_skipping_weights

        try:
            model = read_model_skipping_weights(Path(model))
        except (OSError, ValueError):  # the session that read it already checked the file
            return False, False
    nodes = [n for g in graphs_everywhere(model.graph) for n in g.node]
    dequantized = {n.output[0] for n in nodes if n.op_type == "DequantizeLinear" and n.output}
    fused = any(n.op_type == "MatMul" and dequantized.intersection(n.input) for n in nodes)
    return fused, any(n.op_type == "MatMulNBits" for n in nodes)


def session(model: str | os.PathLike | onnx.ModelProto, *, optimize: bool = True,
            fold_constants: bool = True, map_weights: bool = False, extra_outputs: tuple[str, ...] = (),
            runtime: str = "onnxruntime", initializers: dict[str, np.ndarray] | None = None):
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
    `onnxsurgery run` gives a model its `.npy` arrays (`_mapped_session` says why)."""
    if not isinstance(model, onnx.ModelProto) and not Path(model).is_file():
        raise InputError(f"input not found: {model}")
    settings = session_settings(optimize=optimize, fold_constants=fold_constants, runtime=runtime)
    try:
        if isinstance(model, onnx.ModelProto):
            from .io import needs_external_data

            if not needs_external_data(model):
                return _load(model.SerializeToString(), settings)
            with tempfile.TemporaryDirectory() as d:
                from .io import save_model

                path = Path(d) / "model.onnx"
                save_model(model, path, external_data=True)
                return _load(str(path), settings)
        if initializers:
            return _mapped_session(Path(model), settings, extra_outputs, initializers)
        if map_weights:
            try:
                return _mapped_session(Path(model), settings, extra_outputs)
            except Exception:  # noqa: BLE001 - whatever the mapped copy trips on, load the file itself
                if extra_outputs:
                    raise
                settings = session_settings(optimize=optimize, fold_constants=fold_constants, runtime=runtime)
        _check_locations(Path(model))
        return _load(str(model), settings)
    except UnsafeLocationError:
        raise
    except Exception as e:  # onnxruntime raises its own exception types
        raise VerificationError(f"onnxruntime cannot load the model: {str(e).splitlines()[0]}") from e


def _check_locations(path: Path, model: onnx.ModelProto | None = None) -> None:
    """paths.py's rule before onnxruntime opens anything the model names (onnxruntime 1.32
    refuses the same files, older releases may not): `run` and `compare` read models that
    nothing else of onnxsurgery opened first."""
    from .lazy import read_model_skipping_weights
    from .paths import check_external_locations

    if model is None:
        try:
            model = read_model_skipping_weights(path)
        except (OSError, ValueError):  # not a model: onnxruntime says so in its own words
            return
    check_external_locations(model, path.parent, path.name)


def session_settings(*, optimize: bool = True, fold_constants: bool = True, runtime: str = "onnxruntime"):
    """onnxruntime SessionOptions and InferenceSession keyword arguments for `session`.

    The NCHWc layout transformer is off: at session creation it copies every Conv weight into
    a blocked layout, so a convolutional model's weights are held twice, for a speed-up that a
    few verification inferences do not recover (PP-OCRv4 det, quant as typed: 2.66x -> 2.33x
    the input above the interpreter's baseline in the bench). Both sessions of a comparison get the same
    settings, so shrink's results stay bit-identical.

    onnxruntime fuses DequantizeLinear -> MatMul into MatMulNBits, which on the CPU build
    quantizes activations to int8 by default; onnxruntime-web 1.30 (WASM) computes the same
    fused op in float. Measured on the sample encoder: the web's outputs are 2.4e-7 (relative)
    from a CPU session with accuracy level 0 and 1.3e-3 from one with the default, so
    "onnxruntime-web" sets level 0, and so does "tensorrt": TensorRT runs a layer whose weights
    alone are dequantized (no QuantizeLinear on its input) in float."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # errors reach the user once, as our own one-line message
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    kwargs = {"providers": ["CPUExecutionProvider"], "disabled_optimizers": ["NchwcTransformer"]}
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
                    initializers: dict[str, np.ndarray] | None = None):
    """A session on the model at `path` with its large payloads left in the file (`session`).

    Each graph input named in `initializers` becomes an initializer whose bytes are that array,
    handed to onnxruntime with `add_external_initializers` (the array's own buffer, no copy in
    the protobuf). Why not feed them as inputs: onnxruntime treats an initializer as a constant
    (weights pre-packed, constant subgraphs folded at load) and an input as data, and on some
    CPUs (AVX-512 seen) the two kernel paths round differently in the last bit. As initializers
    the graph is the one the original model had, so it computes exactly what it computed."""
    from .lazy import read_model_skipping_weights

    model = read_model_skipping_weights(path)
    _check_locations(path, model)
    model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(name) for name in extra_outputs)
    # np.require, not np.ascontiguousarray: that one makes a scalar 1-D
    arrays = {name: np.require(a, requirements="C") for name, a in (initializers or {}).items()}
    if arrays:
        _inputs_to_initializers(model.graph, arrays, path)
        large = {name: a for name, a in arrays.items() if not _inline(a)}
        values = {name: _ort_value(a) for name, a in large.items()}  # alive until the session holds them
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


# Arrays below this size go into the protobuf itself: onnxruntime's shape inference reads the
# values of small constants (a Reshape's shape, a Slice's starts) while it loads the graph,
# and fails on an external one ("Cannot parse data from external tensors").
INLINE_INITIALIZER_BYTES = 65536
# ml_dtypes' types numpy cannot hand to onnxruntime itself: their bits go with the ONNX type
_BITS_ONLY = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu")
# ... and those onnxruntime wants packed two to a byte (one per byte in numpy): inline, where
# numpy_helper.from_array packs them
_PACKED = ("int4", "uint4", "float4_e2m1fn")


def _inline(array: np.ndarray) -> bool:
    return array.nbytes < INLINE_INITIALIZER_BYTES or array.dtype.name in _PACKED


def _inputs_to_initializers(graph: onnx.GraphProto, arrays: dict[str, np.ndarray], path: Path) -> None:
    """Graph inputs named in `arrays` -> initializers: small ones hold their bytes, large ones
    are external references whose payload onnxruntime takes from the session options
    (add_external_initializers)."""
    inputs = {i.name for i in graph.input}
    unknown = sorted(set(arrays) - inputs)
    if unknown:
        raise InputError(f"{path.name} has no input '{unknown[0]}' for its .npy array (is the manifest from "
                         "another model?)")
    kept = [i for i in graph.input if i.name not in arrays]
    del graph.input[:]
    graph.input.extend(kept)
    for name, array in arrays.items():
        if _inline(array):
            graph.initializer.append(onnx.numpy_helper.from_array(array, name))
            continue
        t = graph.initializer.add()
        t.name, t.data_type = name, onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
        t.dims.extend(array.shape)
        t.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", path.name), ("offset", "0"), ("length", str(array.nbytes))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value


def _ort_value(array: np.ndarray):
    import onnxruntime as ort

    if array.dtype.name in _BITS_ONLY:  # no copy: the OrtValue keeps the uint view (and so the array) alive
        bits = array.view(f"<u{array.dtype.itemsize}")
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, onnx.helper.np_dtype_to_tensor_dtype(array.dtype))
    return ort.OrtValue.ortvalue_from_numpy(array)


def load_error(model: onnx.ModelProto | str | os.PathLike) -> str | None:
    """None when onnxruntime loads `model`, else the first line of its error. Cheap: graph
    optimizations off, weights memory-mapped where they can be."""
    try:
        session(model, optimize=False, map_weights=True)
    except VerificationError as e:
        return _first_line(e.__cause__ if e.__cause__ is not None else e)
    return None


def _first_line(error: BaseException) -> str:
    """onnxruntime's message, its first line, without the prefix that repeats the file's name
    ("[ONNXRuntimeError] : 1 : FAIL : Load model from m.onnx failed:")."""
    line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : (Load model from .* failed:)?", "", line).strip() or line


def compare_outputs(ref: list[np.ndarray], got: list[np.ndarray], names: list[str]) -> dict:
    """Per output: exact equality, max abs error, relative L2 error, argmax agreement. Outputs
    holding Inf or NaN give NaN errors (which no --max-error accepts), without numpy warnings."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return _compare_outputs(ref, got, names)


def _compare_outputs(ref: list[np.ndarray], got: list[np.ndarray], names: list[str]) -> dict:
    result = {}
    for name, a, b in zip(names, ref, got):
        a = np.asarray(a)
        b = np.asarray(b)
        entry: dict = {"shape": list(a.shape), "exact": a.shape == b.shape and a.tobytes() == b.tobytes()}
        if a.shape != b.shape:
            entry.update(max_abs_error=float("inf"), rel_l2_error=float("inf"))
        elif a.dtype.kind in "fc":
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            diff = np.abs(a64 - b64)
            entry["max_abs_error"] = float(np.nanmax(diff)) if diff.size else 0.0
            norm = float(np.linalg.norm(a64))
            entry["rel_l2_error"] = float(np.linalg.norm(a64 - b64) / norm) if norm > 0 else float(
                np.linalg.norm(b64))
            if a.ndim >= 1 and a.shape[-1] > 1:
                entry["argmax_agreement"] = float(np.mean(a.argmax(-1) == b.argmax(-1)))
        else:
            entry["max_abs_error"] = 0.0 if entry["exact"] else float(
                np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            entry["rel_l2_error"] = 0.0 if entry["exact"] else 1.0
        result[name] = entry
    return result


def compare_models(
    reference, candidate, *, samples: list[dict[str, np.ndarray]] | None = None,
    shapes: dict[str, list[int]] | None = None, seed: int = 0, fold_candidate: bool = True,
    runtime: str = "onnxruntime", outputs: tuple[str, ...] | None = None,
) -> dict:
    """Run both models on the same inputs; returns per-output figures and the worst ones.

    The headline (`rel_l2_error`, `max_abs_error`) is over `outputs` (`--outputs`), or by
    default over the model's outputs other than a KV cache's (`present*`), which a decoder's
    user does not read; the cache outputs are still listed, without an argmax agreement (their
    last axis is a head's features, not classes). `exact` is over every output.

    Across several samples, errors are the worst seen; argmax agreement is over all samples.
    The two sessions exist one after the other, never together: the reference's outputs are
    kept (they are small next to a model) and its session is freed before the candidate's is
    created, so the peak is the larger session's rather than their sum. The candidate runs
    as `runtime` computes it (`session_settings`); the result says which.
    """
    generated = samples is None
    if not generated:
        check_samples(reference, samples)
    ref_sess = _named_session(reference, map_weights=True)
    names = [o.name for o in ref_sess.get_outputs()]
    if generated:
        samples = [make_inputs(ref_sess, shapes=shapes, seed=seed, model=reference)]
    try:
        expected = [_run(ref_sess, names, feeds) for feeds in samples]
    except VerificationError as e:
        if not generated:
            raise
        made = ", ".join(f"{k}:{'x'.join(map(str, v.shape)) or 'scalar'}" for k, v in samples[0].items())
        raise VerificationError(f"the original model does not run on generated inputs ({made}): give real ones "
                                f"with --inputs, or dimensions with --shape NAME:DxD ({e})") from e
    if generated and has_dynamic_batch(ref_sess, shapes):
        # batch 2 as well: a rewrite can break what only another batch size exercises (an opset
        # upgrade that fixed a Reshape to batch 1 moved MiniLM's batch-4 outputs by 8.4%)
        wider = make_inputs(ref_sess, shapes=shapes, seed=seed + 1, model=reference, batch=2)
        try:
            expected.append(_run(ref_sess, names, wider))
            samples.append(wider)
        except VerificationError:  # the original itself takes batch 1 only, whatever it declares
            pass
    del ref_sess
    cand_sess = _named_session(candidate, fold_constants=fold_candidate, runtime=runtime)
    per_output: dict[str, dict] = {}
    agreements: dict[str, list[float]] = {}
    for feeds, ref in progress(list(zip(samples, expected)), "verify", unit="sample"):
        got = _run(cand_sess, names, feeds)
        for name, entry in compare_outputs(ref, got, names).items():
            if "argmax_agreement" in entry:
                agreements.setdefault(name, []).append(entry["argmax_agreement"])
            prev = per_output.get(name)
            if prev is None:
                per_output[name] = entry
                continue
            prev["exact"] = prev["exact"] and entry["exact"]
            for key in ("max_abs_error", "rel_l2_error"):
                prev[key] = max(prev[key], entry[key])
    headline = headline_outputs(names, outputs)
    for name, values in agreements.items():  # over all samples' positions (equal shapes)
        if is_cache_output(name) and name not in headline:
            del per_output[name]["argmax_agreement"]
        else:
            per_output[name]["argmax_agreement"] = float(np.mean(values))
    for name in names:
        per_output[name]["headline"] = name in headline
    chosen = [per_output[n] for n in headline]
    return {
        "runtime": runtime_label(runtime, candidate),
        "samples": len(samples),
        "generated": generated,  # inputs made from the declared shapes: errors on real data may differ
        "exact": all(e["exact"] for e in per_output.values()),
        "max_abs_error": max((e["max_abs_error"] for e in chosen), default=0.0),
        "rel_l2_error": max((e["rel_l2_error"] for e in chosen), default=0.0),
        "headline": headline,
        "outputs": per_output,
    }


def is_cache_output(name: str) -> bool:
    """A KV cache's output (optimum and the genai builder call them present.*, present_*)."""
    return name.lower().startswith("present")


def headline_outputs(names: list[str], asked: tuple[str, ...] | None) -> list[str]:
    """The outputs the headline error is over (compare_models)."""
    if asked:
        unknown = [a for a in asked if a not in names]
        if unknown:
            raise InputError(f"--outputs names '{unknown[0]}', which the model does not output; its outputs are: "
                             f"{', '.join(names)}")
        return [n for n in names if n in asked]
    return [n for n in names if not is_cache_output(n)] or list(names)


def _named_session(model, **options):
    """`session`, its error naming the model (a comparison loads two)."""
    try:
        return session(model, **options)
    except VerificationError as e:
        if isinstance(model, onnx.ModelProto) or e.__cause__ is None:
            raise
        raise VerificationError(f"onnxruntime cannot load {model}: {_first_line(e.__cause__)}") from e


def _run(sess, names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    try:
        return sess.run(names, feeds)
    except Exception as e:  # onnxruntime raises its own exception types
        raise VerificationError(f"onnxruntime failed to run: {str(e).splitlines()[0]}") from e
