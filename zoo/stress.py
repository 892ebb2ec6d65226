"""Ukrainian words for luscinia's stress predictor (`luscinia_stress`, a 194 MB LightGBM ensemble
shipped gzipped): everyday words written for the zoo with their part of speech, each featurized by
the package's own featurizer.py (numpy only; loaded from the unpacked wheel, as the model is), 132
features a word. Tune on the even words, report on the odd ones, 16 words a sample. Decision: the
stressed vowel's index (the model's int64 `label`)."""

from __future__ import annotations

import importlib.util

import numpy as np

PACKAGE = "luscinia==1.0.0"

# (word, UD part of speech): nouns, verbs, adjectives and adverbs of every length the model reads
WORDS = [
    ("мама", "NOUN"), ("тато", "NOUN"), ("університет", "NOUN"), ("бібліотека", "NOUN"), ("місто", "NOUN"),
    ("вулиця", "NOUN"), ("дерево", "NOUN"), ("вікно", "NOUN"), ("стілець", "NOUN"), ("книжка", "NOUN"),
    ("годинник", "NOUN"), ("перемога", "NOUN"), ("весна", "NOUN"), ("літо", "NOUN"), ("осінь", "NOUN"),
    ("зима", "NOUN"), ("морква", "NOUN"), ("яблуко", "NOUN"), ("черешня", "NOUN"), ("хліб", "NOUN"),
    ("молоко", "NOUN"), ("сонце", "NOUN"), ("річка", "NOUN"), ("озеро", "NOUN"), ("гора", "NOUN"),
    ("поле", "NOUN"), ("дорога", "NOUN"), ("автобус", "NOUN"), ("потяг", "NOUN"), ("літак", "NOUN"),
    ("лікарня", "NOUN"), ("аптека", "NOUN"), ("школа", "NOUN"), ("учитель", "NOUN"), ("студент", "NOUN"),
    ("водій", "NOUN"), ("лікар", "NOUN"), ("робітник", "NOUN"), ("письменник", "NOUN"), ("музика", "NOUN"),
    ("пісня", "NOUN"), ("картина", "NOUN"), ("театр", "NOUN"), ("вистава", "NOUN"), ("кухня", "NOUN"),
    ("кімната", "NOUN"), ("подвір'я", "NOUN"), ("борщ", "NOUN"), ("вареники", "NOUN"), ("каша", "NOUN"),
    ("олія", "NOUN"), ("цукор", "NOUN"), ("перець", "NOUN"), ("капуста", "NOUN"), ("буряк", "NOUN"),
    ("цибуля", "NOUN"), ("часник", "NOUN"), ("огірок", "NOUN"), ("помідор", "NOUN"), ("картопля", "NOUN"),
    ("телефон", "NOUN"), ("комп'ютер", "NOUN"), ("вчителька", "NOUN"), ("батьківщина", "NOUN"),
    ("подорож", "NOUN"), ("відпустка", "NOUN"), ("залізниця", "NOUN"), ("громадянин", "NOUN"),
    ("читати", "VERB"), ("писати", "VERB"), ("говорити", "VERB"), ("ходити", "VERB"), ("бігати", "VERB"),
    ("думати", "VERB"), ("робити", "VERB"), ("бачити", "VERB"), ("чути", "VERB"), ("знати", "VERB"),
    ("любити", "VERB"), ("співати", "VERB"), ("танцювати", "VERB"), ("малювати", "VERB"), ("готувати", "VERB"),
    ("відпочивати", "VERB"), ("працювати", "VERB"), ("розповідати", "VERB"), ("запитувати", "VERB"),
    ("відповідати", "VERB"), ("будувати", "VERB"), ("купувати", "VERB"), ("продавати", "VERB"),
    ("перекладати", "VERB"), ("вчитися", "VERB"), ("прокинутися", "VERB"), ("зустрічати", "VERB"),
    ("подзвонити", "VERB"), ("відчинити", "VERB"), ("зачинити", "VERB"),
    ("гарний", "ADJ"), ("великий", "ADJ"), ("маленький", "ADJ"), ("новий", "ADJ"), ("старий", "ADJ"),
    ("зелений", "ADJ"), ("червоний", "ADJ"), ("синій", "ADJ"), ("теплий", "ADJ"), ("холодний", "ADJ"),
    ("веселий", "ADJ"), ("сумний", "ADJ"), ("розумний", "ADJ"), ("швидкий", "ADJ"), ("повільний", "ADJ"),
    ("дорогий", "ADJ"), ("дешевий", "ADJ"), ("цікавий", "ADJ"), ("важливий", "ADJ"), ("український", "ADJ"),
    ("сусідній", "ADJ"), ("світлий", "ADJ"), ("вечірній", "ADJ"), ("ранковий", "ADJ"),
    ("швидко", "ADV"), ("повільно", "ADV"), ("завжди", "ADV"), ("ніколи", "ADV"), ("сьогодні", "ADV"),
    ("завтра", "ADV"), ("вчора", "ADV"), ("тепер", "ADV"), ("далеко", "ADV"), ("близько", "ADV"),
]


def _featurizer():
    """luscinia's featurizer.py from the unpacked wheel (numpy and the standard library only)."""
    from zoo.fetch import _pip_package

    path = _pip_package(PACKAGE) / "luscinia" / "featurizer.py"
    spec = importlib.util.spec_from_file_location("zoo_luscinia_featurizer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.featurize


def stress_words(model, seed, n):
    """Batches of 16 words, featurized as LusciniaPredictor.predict_batch does ([16, 132] float32).
    Tune: the even words (seed 0); report: the odd ones; any other seed draws 16 of all."""
    featurize = _featurizer()
    if seed == 0:
        words = WORDS[0::2]
    elif seed == 1000:
        words = WORDS[1::2]
    else:
        rng = np.random.default_rng(seed)
        words = [WORDS[i] for i in rng.permutation(len(WORDS))]
    feeds = []
    for i in range(min(n, len(words) // 16)):
        batch = words[16 * i:16 * (i + 1)]
        feeds.append({"float_input": np.array([featurize(w, p) for w, p in batch], np.float32)})
    return feeds
