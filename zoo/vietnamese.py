"""Vietnamese pages for trueocr 0.1.1's three page models (a wheel of 7 MB: det.onnx, rec.onnx,
order.onnx, meta.json; torch 2.10 exports at opset 17), as its page.py, preprocess.py and order.py
prepare them (cv2 there; Pillow and numpy here):

- `vi_pages_det`: a rendered page (title, paragraphs, a two-column part, a footer) in grey, its long
  side 1024 (meta.json's det_long_side), an ink map (1 - gray / 255) padded to a multiple of 32.
- `vi_lines_rec`: 4 lines of a rendered paragraph a sample, each cropped with the line above and
  below it (its WINDOW of 3: 96 pixels high), an ink map, padded to one width with the declared
  `widths` beside it, as pad_batch lays them out; its CTC greedy decoding is in the graph.
- `vi_layouts_order`: the lines of a laid-out page (title, page header, one or two columns of
  paragraphs, a bulleted list, a small table, a footer), as line_features computes them from each
  line's box and text: [1, N, 16] and an all-true mask.

Sentences written for the zoo (everyday Vietnamese, NFC); tune on the first 12, report on the last
12. Decisions: `line_cores`, `ctc_text`, `reading_order` (zoo/decisions.py)."""

from __future__ import annotations

import math
import unicodedata

import numpy as np

from zoo.sources import seeded

SENTENCES = [
    "Hôm nay trời nắng đẹp, chúng tôi đi dạo trong công viên.",
    "Mẹ tôi nấu phở bò rất ngon vào sáng chủ nhật.",
    "Xe buýt số mười tám dừng ở trước cổng trường.",
    "Học sinh phải nộp bài tập trước thứ sáu tuần này.",
    "Chợ Bến Thành mở cửa từ sáu giờ sáng đến tối.",
    "Anh ấy làm việc ở một công ty phần mềm tại Hà Nội.",
    "Thư viện thành phố có hơn năm mươi nghìn cuốn sách.",
    "Giá vé tàu từ Huế vào Đà Nẵng là một trăm nghìn đồng.",
    "Bác sĩ khuyên tôi nên uống nhiều nước và ngủ sớm.",
    "Mùa mưa ở miền Nam thường bắt đầu vào tháng năm.",
    "Cô giáo đọc một câu chuyện cổ tích cho cả lớp nghe.",
    "Chúng ta cần họp lại để bàn về kế hoạch năm sau.",
    "Quán cà phê đầu ngõ bán bánh mì và sữa đậu nành.",
    "Ông bà tôi sống ở một ngôi làng nhỏ ven sông Hồng.",
    "Vui lòng giữ trật tự trong phòng đọc của thư viện.",
    "Đội bóng của trường đã thắng trận chung kết hôm qua.",
    "Bưu điện đóng cửa lúc năm giờ chiều vào thứ bảy.",
    "Em gái tôi đang học tiếng Anh ở trung tâm ngoại ngữ.",
    "Hóa đơn tiền điện tháng này cao hơn tháng trước.",
    "Con đường này sẽ được sửa chữa trong hai tuần tới.",
    "Bạn có thể chỉ cho tôi đường đến ga Sài Gòn không?",
    "Nhà hàng phục vụ món chay vào ngày rằm hằng tháng.",
    "Buổi hòa nhạc bắt đầu lúc tám giờ tối tại nhà hát lớn.",
    "Trẻ em dưới sáu tuổi được miễn phí vé vào cửa.",
]
TITLES = ["Thông báo", "Kế hoạch năm học", "Báo cáo tháng", "Lịch làm việc", "Tin tức địa phương", "Hướng dẫn"]
LINE_HEIGHT, WINDOW, WIDTH_MULTIPLE, CONTEXT_HALO = 32, 3, 8, 8  # preprocess.py's
DET_SIDE = 1024  # meta.json's det_long_side


def _sentences(seed: int) -> list[str]:
    half = SENTENCES[:12] if seed == 0 else SENTENCES[12:]
    return [unicodedata.normalize("NFC", s) for s in half]


def _wrap(words: list[str], font, width: float) -> list[str]:
    lines, cur = [], ""
    for w in words:
        nxt = f"{cur} {w}".strip()
        if cur and font.getlength(nxt) > width:
            lines.append(cur)
            cur = w
        else:
            cur = nxt
    return lines + ([cur] if cur else [])


def _paragraph_words(rng: np.random.Generator, sentences: list[str], k: int) -> list[str]:
    return " ".join(sentences[int(i)] for i in rng.choice(len(sentences), k)).split()


def _layout(rng: np.random.Generator, sentences: list[str], size: tuple[int, int]):
    """A page's lines as (box, text, bold, font size) in reading order: a page header, a title,
    paragraphs (one column, then maybe two), a bulleted list or a small table, a footer."""
    from zoo.images import _font  # Pillow: only where inputs are built (make test has none)

    w, h = size
    base = int(rng.integers(13, 19))
    body, small, big = _font(base), _font(max(10, base - 3)), _font(int(base * 1.7), True)
    lines = []

    def put(x, y, text, font, size_px, bold=False):
        x0, y0, x1, y1 = font.getbbox(text)
        lines.append(((x + x0, y + y0, x + x1, y + y1), text, bold, size_px))

    margin, y = int(w * 0.08), int(h * 0.03)
    put(margin, y, f"Số {int(rng.integers(1, 99))}/TB - {TITLES[int(rng.integers(len(TITLES)))]}", small, base - 3)
    y += int(base * 2.5)
    title = TITLES[int(rng.integers(len(TITLES)))].upper()
    put((w - big.getlength(title)) / 2, y, title, big, int(base * 1.7), True)
    y += int(base * 3)
    lead = base * 1.5
    for _ in range(int(rng.integers(1, 3))):
        for t in _wrap(_paragraph_words(rng, sentences, int(rng.integers(2, 4))), body, w - 2 * margin):
            put(margin, y, t, body, base)
            y += lead
        y += lead * 0.8
    if rng.random() < 0.6:  # two columns, the left read first
        col = (w - 2 * margin - base * 2) / 2
        top, bottom = y, y
        for c in range(2):
            yy = top
            for t in _wrap(_paragraph_words(rng, sentences, int(rng.integers(2, 4))), body, col):
                put(margin + c * (col + base * 2), yy, t, body, base)
                yy += lead
            bottom = max(bottom, yy)
        y = bottom + lead * 0.8
    if rng.random() < 0.5:
        for s in rng.choice(len(sentences), int(rng.integers(2, 5)), replace=False):
            put(margin + base, y, "• " + sentences[int(s)], body, base)
            y += lead
    else:
        for r in range(int(rng.integers(2, 5))):
            cells = ["Mục", "Số lượng", "Đơn giá"] if r == 0 else [
                sentences[int(rng.integers(len(sentences)))].split()[0], str(int(rng.integers(1, 50))),
                f"{int(rng.integers(10, 900))}.000"]
            for c, t in enumerate(cells):
                put(margin + c * (w - 2 * margin) / 3, y, t, body, base, r == 0)
            y += lead
    put(w / 2 - base, h - int(h * 0.04), f"- {int(rng.integers(1, 40))} -", small, base - 3)
    return [ln for ln in lines if ln[0][3] < h]


def _page(rng: np.random.Generator, sentences: list[str], size: tuple[int, int]) -> np.ndarray:
    """The laid-out page rendered in grey (uint8), a scan's paper and ink."""
    from PIL import Image, ImageDraw

    from zoo.images import _font

    img = Image.new("L", size, int(rng.integers(225, 256)))
    d = ImageDraw.Draw(img)
    ink = int(rng.integers(0, 60))
    for (x0, y0, _, _), text, bold, px in _layout(rng, sentences, size):
        font = _font(px, bold)
        ox, oy = font.getbbox(text)[:2]
        d.text((x0 - ox, y0 - oy), text, fill=ink, font=font)
    g = np.asarray(img, np.float32) + rng.normal(0, 4, (size[1], size[0]))
    return np.clip(g, 0, 255).astype(np.uint8)


def vi_pages_det(model, seed, n):
    """A page with its long side 1024, as det_input lays it out: an ink map, padded to 32."""
    rng, sentences = seeded(seed), _sentences(seed)
    feeds = []
    for _ in range(n):
        w = int(rng.choice([724, 768, 800]))
        gray = _page(rng, sentences, (w, DET_SIDE))
        out = np.zeros((DET_SIDE, math.ceil(w / 32) * 32), np.float32)
        out[:, :w] = 1.0 - gray.astype(np.float32) / 255.0
        feeds.append({"x": out[None, None]})
    return feeds


def _crop_line(gray: np.ndarray, box, max_width: int = 768, pad_y: float = 0.2, pad_x: float = 0.3) -> np.ndarray:
    """preprocess.crop_line with window=3 (dark text on light paper): the line and the image above
    and below it, resized to 96 high (area when shrinking, bilinear when growing), as ink."""
    from PIL import Image

    pad_y = (WINDOW * (1 + 2 * pad_y) - 1) / 2
    height = LINE_HEIGHT * WINDOW
    x0, y0, x1, y1 = box
    hh = max(1.0, y1 - y0)
    ix0, iy0 = math.floor(x0 - pad_x * hh), math.floor(y0 - pad_y * hh)
    ix1, iy1 = math.ceil(x1 + pad_x * hh), math.ceil(y1 + pad_y * hh)
    cw, ch = max(1, ix1 - ix0), max(1, iy1 - iy0)
    H, W = gray.shape
    crop = np.full((ch, cw), 255, np.uint8)
    sx0, sy0, sx1, sy1 = max(0, ix0), max(0, iy0), min(W, ix1), min(H, iy1)
    crop[sy0 - iy0:sy1 - iy0, sx0 - ix0:sx1 - ix0] = gray[sy0:sy1, sx0:sx1]
    out_w = max(WIDTH_MULTIPLE, min(max_width, round(cw * height / ch)))
    resample = Image.BOX if ch > height else Image.BILINEAR
    resized = np.asarray(Image.fromarray(crop).resize((out_w, height), resample), np.float32)
    return 1.0 - resized / 255.0


def vi_lines_rec(model, seed, n):
    """4 lines a sample from a rendered paragraph (each the line and its neighbours above and
    below), padded as pad_batch pads them: x [4, 1, 96, W + 8], widths [4] int64."""
    from PIL import Image, ImageDraw

    from zoo.images import _font

    rng, sentences = seeded(seed), _sentences(seed)
    feeds = []
    for _ in range(n):
        px = int(rng.integers(18, 27))
        font, lead = _font(px), int(px * rng.uniform(1.35, 1.7))
        text = _wrap(_paragraph_words(rng, sentences, 4), font, 560)[:6]
        size = (640, lead * (len(text) + 2))
        img = Image.new("L", size, int(rng.integers(225, 256)))
        d = ImageDraw.Draw(img)
        boxes = []
        for i, t in enumerate(text):
            x, y = 30, lead * (i + 1)
            d.text((x, y), t, fill=int(rng.integers(0, 70)), font=font)
            bx0, by0, bx1, by1 = font.getbbox(t)
            boxes.append((x + bx0, y + by0, x + bx1, y + by1))
        gray = np.clip(np.asarray(img, np.float32) + rng.normal(0, 4, (size[1], size[0])), 0, 255).astype(np.uint8)
        picks = sorted(rng.choice(len(boxes), min(4, len(boxes)), replace=False))
        crops = [_crop_line(gray, boxes[i]) for i in picks]
        wm = math.ceil(max(c.shape[1] for c in crops) / WIDTH_MULTIPLE) * WIDTH_MULTIPLE
        x = np.zeros((len(crops), 1, LINE_HEIGHT * WINDOW, wm + CONTEXT_HALO), np.float32)
        for i, c in enumerate(crops):
            x[i, 0, :, :c.shape[1]] = c
        feeds.append({"x": x, "widths": np.array([c.shape[1] for c in crops], np.int64)})
    return feeds


N_TEXT_FEATURES = 6
SENTENCE_END = ".!?:;。！？：；．"


def line_features(boxes: np.ndarray, page_wh: tuple[float, float], texts: list[str]) -> np.ndarray:
    """order.line_features: [N, 4] boxes and their texts -> [N, 16] float32 (10 of the box's
    geometry, 6 of its text). Every text here is Latin: display_len is len."""
    W, H = page_wh
    b = boxes.astype(np.float32)
    w = np.maximum(b[:, 2] - b[:, 0], 1e-3)
    h = np.maximum(b[:, 3] - b[:, 1], 1e-3)
    med_h = float(np.median(h))
    geom = np.stack([b[:, 0] / W, b[:, 1] / H, b[:, 2] / W, b[:, 3] / H, (b[:, 0] + b[:, 2]) / (2 * W),
                     (b[:, 1] + b[:, 3]) / (2 * H), w / W, np.log(h / med_h), np.log(w / h) / 4.0,
                     np.full(len(b), med_h / H * 20.0)], 1)
    txt = np.zeros((len(b), N_TEXT_FEATURES), np.float32)
    for i, t in enumerate(texts):
        t = t.strip()
        if not t:
            continue
        txt[i] = [math.log1p(len(t)) / 5.0, sum(c.isdigit() for c in t) / len(t),
                  float(t[0] in "•-–▪◦*·→" or (t[:3].rstrip(".)").isdigit() and len(t) > 3)),
                  float(t.endswith("-")), float(t[-1] in SENTENCE_END), float(t[0].isupper())]
    return np.concatenate([geom, txt], 1).astype(np.float32)


def vi_layouts_order(model, seed, n):
    """A laid-out page's lines (A4 at 96 dpi, 794 x 1123), shuffled as a detector's boxes come:
    feats [1, N, 16], mask [1, N] all true."""
    rng, sentences = seeded(seed), _sentences(seed)
    feeds = []
    for _ in range(n):
        lines = _layout(rng, sentences, (794, 1123))
        order = rng.permutation(len(lines))
        boxes = np.array([lines[i][0] for i in order], np.float32)
        texts = [lines[i][1] for i in order]
        feeds.append({"feats": line_features(boxes, (794, 1123), texts)[None],
                      "mask": np.ones((1, len(lines)), bool)})
    return feeds
