"""The spill file's direct writes (storage/spill.py, `direct`): large payloads written with O_DIRECT
through an aligned buffer, their tails and small payloads through the page cache, land as the same
bytes as buffered writes; where the file system refuses O_DIRECT (tmpfs) the page cache takes them
all; and `quant`, verified or not, which writes that way, writes the same files as through the page cache."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
from onnxsurgery.storage import spill
from onnxsurgery.storage.spill import SpillFile

# bytes: direct with a tail, small (page cache only), across several bounce buffers, whole blocks
SIZES = [spill.DIRECT_FROM_BYTES + 12_345, 5_000, 2 * spill.BOUNCE_BYTES + 700_001, spill.DIRECT_FROM_BYTES * 2]


def folders(tmp_path):
    yield tmp_path
    shm = Path("/dev/shm")
    if shm.is_dir():  # tmpfs: O_DIRECT refused
        yield shm


def test_direct_writes_land_as_the_payloads_bytes(tmp_path):
    written_back(tmp_path)


def test_a_refused_direct_write_goes_through_the_page_cache(tmp_path, monkeypatch):
    opened = spill._Direct.opened

    def refusing(fd):  # a handle every write to fails, as a file system refusing O_DIRECT at the first
        direct = opened(fd)
        if direct is not None:
            os.close(direct.fd)
            direct.fd = os.open(os.devnull, os.O_RDONLY)
        return direct

    monkeypatch.setattr(spill._Direct, "opened", staticmethod(refusing))
    written_back(tmp_path)


def written_back(tmp_path):
    """Payloads of SIZES spilled with `direct`, read back as they were."""
    rng = np.random.default_rng(0)
    # one byte in: no payload's memory is aligned, as a quantized array's is not
    backing = rng.integers(0, 256, sum(SIZES) + len(SIZES), dtype=np.uint8)
    payloads, start = [], 1
    for n in SIZES:
        payloads.append(memoryview(backing[start:start + n]).cast("B"))
        start += n
    for folder in folders(tmp_path):
        file = SpillFile(Path(folder), write_back=True, direct=True)
        try:
            batches = [[(p, file.place(len(p)))] for p in payloads[:2]], [(p, file.place(len(p))) for p in payloads[2:]]
            for batch in [*batches[0], batches[1]]:
                file.write(batch)
            fd = file.fd()
            for batch in [*batches[0], batches[1]]:
                for payload, offset in batch:
                    assert os.pread(fd, len(payload), offset) == payload.tobytes()
        finally:
            file.close()


def decoder_like(path: Path) -> Path:
    """One MatMul over a [1024, 2048] float weight (its int8: 2 MiB, written direct), in a data file."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((1024, 2048)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2048])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path), save_as_external_data=True, location=path.name + ".data", size_threshold=0)
    return path


def test_quant_writes_direct_the_page_caches_files(tmp_path, monkeypatch):
    src = decoder_like(tmp_path / "m.onnx")
    for folder in "abc":
        (tmp_path / folder).mkdir()
    onnxsurgery.quant_file(src, tmp_path / "a" / "q.onnx", verify=False)  # direct writes
    report = onnxsurgery.quant_file(src, tmp_path / "b" / "q.onnx")  # verified: direct too, read back from the disk
    monkeypatch.setattr(spill._Direct, "opened", staticmethod(lambda fd: None))  # the page cache throughout
    cached = onnxsurgery.quant_file(src, tmp_path / "c" / "q.onnx")
    assert report.verification["rel_l2_error"] == cached.verification["rel_l2_error"]
    for name in ("q.onnx", "q.onnx.data"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes() == \
            (tmp_path / "c" / name).read_bytes()
