"""Book copyright pages for isbnx's ISBN detector (`isbnx_det`: an end-to-end YOLO exported by
torch 2.12 at opset 20, its top 300 boxes chosen inside the graph by TopK and GatherElements,
[1, 300, 6] out: x1, y1, x2, y2, score, class; classes 0 an ISBN line, 1 a cataloguing-in-
publication block, 2 a barcode).

A page as a book's copyright page lays it out (English: no CJK font here), rendered with Pillow:
the publisher's lines, a Library of Congress Cataloging-in-Publication block with its ISBN, an
"ISBN 978-..." line and, on most pages, the book's EAN-13 barcode (its bars computed from the
ISBN's digits, as a printer's are), the whole page photographed a little askew and greyed, then
letterboxed as isbnx's Detector._preprocess does (grey, fitted into 1280 x 1280 on 114 grey,
/255). Titles and publishers of the tune set are BOOKS' even ones, of the report set its odd
ones. Decision (decisions.end2end_boxes): each class's kept boxes on a 40 x 40 grid.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from zoo.sources import seeded

if TYPE_CHECKING:
    from PIL import Image

SIDE = 1280  # isbnx's DetectorConfig input_width / input_height
BOOKS = [("The Salt Road", "Harbour Press", "Morgan, Ellen"), ("A Field Guide to Mosses", "Kestrel Books", "Ito, Ken"),
         ("Winter Accounts", "Northgate Publishing", "Adeyemi, Tola"), ("Small Engines", "Lantern House", "Novak, Jan"),
         ("Letters from Porto", "Bluefin Editions", "Sousa, Rita"), ("The Quiet Census", "Meridian Books", "Hale, Sam"),
         ("Rivers of Clay", "Oakleaf Press", "Banerjee, Anil"), ("Notes on Glass", "Copper Lane", "Fischer, Ute"),
         ("The Last Timetable", "Greyhound Editions", "Ortiz, Luz"), ("Bread and Weather", "Saltmarsh Press",
         "Larsen, Per"), ("A House of Lamps", "Bellwether Books", "Okafor, Chidi"), ("Counting Birds", "Thistle Press",
         "Reyes, Ana")]
SUBJECTS = ["Fiction", "Natural history", "Economic history", "Engineering", "Travel", "Statistics", "Geology",
            "Art", "Railways", "Cooking", "Poetry", "Ornithology"]

# EAN-13: the first digit picks the parity of the left six, L (odd) or G (even); the right six are R
_L = ["0001101", "0011001", "0010011", "0111101", "0100011", "0110001", "0101111", "0111011", "0110111", "0001011"]
_G = ["".join("1" if b == "0" else "0" for b in code)[::-1] for code in _L]
_R = ["".join("1" if b == "0" else "0" for b in code) for code in _L]
_PARITY = ["LLLLLL", "LLGLGG", "LLGGLG", "LLGGGL", "LGLLGG", "LGGLLG", "LGGGLL", "LGLGLG", "LGLGGL", "LGGLGL"]


def _isbn13(rng: np.random.Generator) -> str:
    digits = [9, 7, 8] + [int(d) for d in rng.integers(0, 10, 9)]
    check = (10 - sum(d * (3 if i % 2 else 1) for i, d in enumerate(digits)) % 10) % 10
    return "".join(map(str, digits + [check]))


def _hyphenated(isbn: str) -> str:
    return f"{isbn[:3]}-{isbn[3]}-{isbn[4:8]}-{isbn[8:12]}-{isbn[12]}"


def _ean13_bits(isbn: str) -> str:
    d = [int(c) for c in isbn]
    left = "".join((_L if p == "L" else _G)[x] for p, x in zip(_PARITY[d[0]], d[1:7]))
    return "101" + left + "01010" + "".join(_R[x] for x in d[7:]) + "101"


def _barcode(isbn: str, module: int) -> Image.Image:
    """The EAN-13 symbol with its guard bars longer and the digits under it."""
    from PIL import Image, ImageDraw  # where pages are drawn only: make test's venv has no Pillow

    from zoo.images import _font
    bits = _ean13_bits(isbn)
    w, h = (len(bits) + 18) * module, 70 * module
    img = Image.new("RGB", (w, h + 12 * module), "white")
    d = ImageDraw.Draw(img)
    guards = {0, 1, 2, 45, 46, 47, 48, 49, 92, 93, 94}
    for i, b in enumerate(bits):
        if b == "1":
            x = (9 + i) * module
            d.rectangle([x, 8 * module, x + module - 1, h + (5 * module if i in guards else 0)], fill="black")
    font = _font(9 * module)
    d.text((2 * module, h + module), isbn[0], fill="black", font=font)
    d.text((13 * module, h + module), " ".join(isbn[1:7]), fill="black", font=font)
    d.text((59 * module, h + module), " ".join(isbn[7:]), fill="black", font=font)
    top = _font(7 * module)
    d.text((9 * module, 0), "ISBN " + _hyphenated(isbn), fill="black", font=top)
    return img


def _page(rng: np.random.Generator, book: tuple[str, str, str], subject: str) -> Image.Image:
    from PIL import Image, ImageDraw

    from zoo.images import _font
    title, publisher, author = book
    w, h = 1000, 1500
    page = Image.new("RGB", (w, h), tuple(int(v) for v in rng.integers(235, 256, 3)))
    d = ImageDraw.Draw(page)
    small, text = _font(17), _font(20)
    isbn = _isbn13(rng)
    year = int(rng.integers(1995, 2025))
    y = int(rng.integers(120, 260))
    for line in [f"Published by {publisher}", f"{int(rng.integers(1, 400))} {rng.choice(['Mill', 'Quay', 'Park'])} "
                 f"Street, {rng.choice(['Leeds', 'Boston', 'Dublin', 'Toronto'])}", "",
                 f"First published {year}", f"Copyright (c) {author.split(', ')[1]} {author.split(', ')[0]} {year}",
                 "", "All rights reserved. No part of this publication may be reproduced,",
                 "stored in a retrieval system, or transmitted, in any form or by any means,",
                 "without the prior permission in writing of the publisher."]:
        d.text((90, y), line, fill="black", font=text)
        y += 30
    y += 40
    cip = ["Library of Congress Cataloging-in-Publication Data", f"{author}, {year - int(rng.integers(30, 70))}-",
           f"  {title} / {author.split(', ')[1]} {author.split(', ')[0]}. -- 1st ed.",
           "     p. cm.", "  Includes bibliographical references and index.",
           f"  ISBN {_hyphenated(isbn)}", f"  1. {subject}. I. Title.",
           f"  {rng.choice(['PR', 'QH', 'HC', 'TJ'])}{int(rng.integers(100, 9999))} .{rng.choice(list('ABCMN'))}"
           f"{int(rng.integers(10, 99))} {year}", f"  {int(rng.integers(100, 999))}.{int(rng.integers(1, 99))}--dc23"]
    for line in cip:
        d.text((90, y), line, fill="black", font=small)
        y += 25
    y += 50
    d.text((90, y), f"ISBN {_hyphenated(isbn)}", fill="black", font=_font(28, bold=True))
    y += 40
    if rng.random() < 0.5:
        d.text((90, y), f"ISBN {_hyphenated(_isbn13(rng))} (ebook)", fill="black", font=text)
        y += 32
    y += 30
    d.text((90, y), f"Printed in {rng.choice(['Great Britain', 'Canada', 'the United States'])}", fill="black",
           font=small)
    if rng.random() < 0.75:
        code = _barcode(isbn, int(rng.integers(2, 4)))
        page.paste(code, (int(rng.integers(90, w - code.width - 60)), int(min(h - code.height - 60, y + 60))))
    return page.rotate(float(rng.uniform(-2.5, 2.5)), resample=Image.BICUBIC, expand=True,
                       fillcolor=(int(rng.integers(60, 120)),) * 3)


def _letterbox(img: Image.Image) -> np.ndarray:
    """isbnx's Detector.detect: grey (L, back to RGB), fitted into SIDE x SIDE centred on 114 grey."""
    from PIL import Image

    from zoo.images import _nchw
    img = img.convert("L").convert("RGB")
    scale = min(SIDE / img.width, SIDE / img.height)
    resized = img.resize((round(img.width * scale), round(img.height * scale)), Image.BILINEAR)
    canvas = Image.new("RGB", (SIDE, SIDE), (114, 114, 114))
    canvas.paste(resized, ((SIDE - resized.width) // 2, (SIDE - resized.height) // 2))
    return _nchw(canvas)


def isbn_pages_1280(model, seed, n):
    rng = seeded(seed)
    books = BOOKS[0::2] if seed == 0 else BOOKS[1::2]
    subjects = SUBJECTS[0::2] if seed == 0 else SUBJECTS[1::2]
    return [{"images": _letterbox(_page(rng, books[i % len(books)], subjects[i % len(subjects)]))}
            for i in range(n)]
