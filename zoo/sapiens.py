"""sapiens (PyPI 1.0.0, an sdist; Merck's human antibody language model, BioPhi's humanizer): a
fairseq RoBERTa masked language model (4 post-LN layers of 128, 8 heads, FFN 256, learned positions,
25 symbols) trained on human heavy-chain variable regions; its lm_head reads the token table (tied
input and output embeddings: the checkpoint's `lm_head.weight` equals `embed_tokens.weight`). Later
releases (1.0.1 on) download the checkpoints; 1.0.0 ships them (4.6 MB each, VH and VL).

fairseq is not installed here (and the package runs only through it), so the model is rebuilt from the
state dict's names as fairseq 0.10's RobertaModel computes it, and exported with torch's TorchScript
exporter (opset 14). One Parameter is the token table and the lm_head's weight, so the export holds it
once: a Gather and an Einsum read it (F.linear's MatMul would read a transposed copy that constant folding
stores apart).

- sapiens_vh: `tokens` [B, T] int64 (<s> residues </s>, padded with <pad> = 1; `*` as <mask> = 24) ->
  `logits` [B, T, 25]

The rebuild computes the package README's published scores (its first five rows, four residues each,
to 6 decimals) and its infilled sequence exactly; the export is checked against the rebuild (torch).

Inputs (`antibody_heavy_chains`): heavy-chain variable regions of 16 therapeutic antibodies (human,
humanized and chimeric), 4 a sample, padded; every seventh residue masked (the offset moves with the
sample), as Sapiens infills them. Tune on the first 8, report on the last 8. Decision (`residues`): the
most likely of the 20 residues at each residue position: the infilled residue where masked, the
humanized residue elsewhere (BioPhi's Sapiens humanization takes that argmax).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

PACKAGE = "sapiens==1.0.0"
SYMBOLS = ["<s>", "<pad>", "</s>", "<unk>", *"ACDEFGHIKLMNPQRSTVWY", "<mask>"]  # fairseq's Dictionary + dict.txt
PAD, MASK = 1, 24
TOLERANCE = 1e-4  # of the logits' largest magnitude, the export against the rebuild

# heavy-chain variable regions (IMGT/DrugBank sequences of marketed antibodies); the first is the README's
HEAVY = [
    "QVQLVQSGVEVKKPGASVKVSCKASGYTFTNYYMYWVRQAPGQGLEWMGGINPSNGGTNFNEKFKNRVTLTTDSSTTTAYMELKSLQFDDTAVYYCARRDYRFDMGFDYWGQGTTVTVSS",  # noqa: E501 pembrolizumab
    "EVQLVESGGGLVQPGGSLRLSCAASGFNIKDTYIHWVRQAPGKGLEWVARIYPTNGYTRYADSVKGRFTISADTSKNTAYLQMNSLRAEDTAVYYCSRWGGDGFYAMDYWGQGTLVTVSS",  # noqa: E501 trastuzumab
    "EVQLVESGGGLVQPGRSLRLSCAASGFTFDDYAMHWVRQAPGKGLEWVSAITWNSGHIDYADSVEGRFTISRDNAKNSLYLQMNSLRAEDTAVYYCAKVSYLSTASSLDYWGQGTLVTVSS",  # noqa: E501 adalimumab
    "QVQLVESGGGVVQPGRSLRLDCKASGITFSNSGMHWVRQAPGKGLEWVAVIWYDGSKRYYADSVKGRFTISRDNSKNTLFLQMNSLRAEDTAVYYCATNDDYWGQGTLVTVSS",  # noqa: E501 nivolumab
    "QVQLQQPGAELVKPGASVKMSCKASGYTFTSYNMHWVKQTPGRGLEWIGAIYPGNGDTSYNQKFKGKATLTADKSSSTAYMQLSSLTSEDSAVYYCARSTYYGGDWYFNVWGAGTTVTVSA",  # noqa: E501 rituximab
    "QVQLKQSGPGLVQPSQSLSITCTVSGFSLTNYGVHWVRQSPGKGLEWLGVIWSGGNTDYNTPFTSRLSINKDNSKSQVFFKMNSLQSNDTAIYYCARALTYYDYEFAYWGQGTLVTVSA",  # noqa: E501 cetuximab
    "EVQLVESGGGLVQPGGSLRLSCAASGYTFTNYGMNWVRQAPGKGLEWVGWINTYTGEPTYAADFKRRFTFSLDTSKSTAYLQMNSLRAEDTAVYYCAKYPHYYGSSHWYFDVWGQGTLVTVSS",  # noqa: E501 bevacizumab
    "EVQLVESGGGLVQPGGSLRLSCAVSGYSITSGYSWNWIRQAPGKGLEWVASITYDGSTNYNPSVKGRITISRDDSKNTFYLQMNSLRAEDTAVYYCARGSHYFGHWHFAVWGQGTLVTVSS",  # noqa: E501 omalizumab
    "QVKLQESGAELARPGASVKLSCKASGYTFTNYWMQWVKQRPGQGLDWIGAIYPGDGNTRYTHKFKGKATLTADKSSSTAYMQLSSLASEDSGVYYCARGEGNYAWFAYWGQGTTVTVSS",  # noqa: E501 the README's murine VH
    "QVQLVESGGGVVQPGRSLRLSCAASGFTFSSYTMHWVRQAPGKGLEWVTFISYDGNNKYYADSVKGRFTISRDNSKNTLYLQMNSLRAEDTAIYYCARTGWLGPFDYWGQGTLVTVSS",  # noqa: E501 ipilimumab
    "EVKLEESGGGLVQPGGSMKLSCVASGFIFSNHWMNWVRQSPEKGLEWVAEIRSKSINSATHYAESVKGRFTISRDDSKSAVYLQMTDLRTEDTGVYYCSRNYYGSTYDYWGQGTTLTVSS",  # noqa: E501 infliximab
    "QVQLVQSGAEVKKPGSSVKVSCKASGGTFSSYAISWVRQAPGQGLEWMGGIIPIFGTANYAQKFQGRVTITADESTSTAYMELSSLRSEDTAVYYCARDRGYYFDYWGQGTLVTVSS",  # noqa: E501 a human VH1-69 germline antibody
    "EVQLLESGGGLVQPGGSLRLSCAASGFTFSSYAMSWVRQAPGKGLEWVSAISGSGGSTYYADSVKGRFTISRDNSKNTLYLQMNSLRAEDTAVYYCAKDRLSITIRPRYYGLDVWGQGTTVTVSS",  # noqa: E501 a human VH3-23 antibody
    "QVQLQESGPGLVKPSETLSLTCTVSGGSISSYYWSWIRQPPGKGLEWIGYIYYSGSTNYNPSLKSRVTISVDTSKNQFSLKLSSVTAADTAVYYCARGGYSSGWYFDYWGQGTLVTVSS",  # noqa: E501 a human VH4-59 antibody
    "EVQLVQSGAEVKKPGESLKISCKGSGYSFTSYWIGWVRQMPGKGLEWMGIIYPGDSDTRYSPSFQGQVTISADKSISTAYLQWSSLKASDTAMYYCARHGRGYNGYEGAFDIWGQGTMVTVSS",  # noqa: E501 a human VH5-51 antibody
    "QVQLQQWGAGLLKPSETLSLTCAVYGGSFSGYYWSWIRQPPGKGLEWIGEINHSGSTNYNPSLKSRVTISVDTSKNQFSLKLSSVTAADTAVYYCARGLRGYFDYWGQGTLVTVSS",  # noqa: E501 a human VH4-34 antibody
]


def _state(package_dir: Path, path_in_package: str) -> dict:
    """The checkpoint's model state dict (an argparse.Namespace beside it: allowed, nothing else)."""
    import argparse

    import torch

    with torch.serialization.safe_globals([argparse.Namespace]):
        ck = torch.load(package_dir / path_in_package, map_location="cpu", weights_only=True)
    args = ck["args"]
    assert (args.arch, args.encoder_layers, args.encoder_embed_dim, args.encoder_attention_heads,
            args.activation_fn) == ("roberta_small", 4, 128, 8, "gelu"), vars(args)
    return {k.removeprefix("decoder."): v for k, v in ck["model"].items()}


def _module(state: dict):
    """fairseq 0.10's RobertaModel (masked LM head) as it computes in eval mode."""
    import torch
    import torch.nn.functional as F

    s = {k: torch.nn.Parameter(v.float(), requires_grad=False) for k, v in state.items()}
    assert torch.equal(s["lm_head.weight"], s["sentence_encoder.embed_tokens.weight"])  # tied
    heads, dim = 8, 128

    def ln(x, prefix):
        return F.layer_norm(x, (dim,), s[prefix + ".weight"], s[prefix + ".bias"], eps=1e-5)

    def lin(x, prefix):
        return F.linear(x, s[prefix + ".weight"], s[prefix + ".bias"])

    class Roberta(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.params = torch.nn.ParameterDict({k.replace(".", "__"): v for k, v in s.items()
                                                  if k != "lm_head.weight"})  # the tied copy: one table
            s["lm_head.weight"] = s["sentence_encoder.embed_tokens.weight"]

        def forward(self, tokens):
            pad = tokens.eq(PAD)
            keep = (~pad).long()
            positions = torch.cumsum(keep, dim=1) * keep + PAD  # fairseq's make_positions
            e = "sentence_encoder."
            x = F.embedding(tokens, s[e + "embed_tokens.weight"])
            x = x + F.embedding(positions, s[e + "embed_positions.weight"])
            x = ln(x, e + "emb_layer_norm")
            x = x * (1 - pad.unsqueeze(-1).type_as(x))
            b, t = tokens.shape
            bias = torch.zeros(b, 1, 1, t).masked_fill(pad[:, None, None, :], float("-inf"))
            for i in range(4):
                p = f"{e}layers.{i}."
                q = lin(x, p + "self_attn.q_proj") * (dim // heads) ** -0.5
                k, v = lin(x, p + "self_attn.k_proj"), lin(x, p + "self_attn.v_proj")
                q, k, v = (y.view(b, t, heads, dim // heads).transpose(1, 2) for y in (q, k, v))
                att = torch.softmax(q @ k.transpose(-1, -2) + bias, dim=-1) @ v
                att = lin(att.transpose(1, 2).reshape(b, t, dim), p + "self_attn.out_proj")
                x = ln(x + att, p + "self_attn_layer_norm")
                x = ln(x + lin(F.gelu(lin(x, p + "fc1")), p + "fc2"), p + "final_layer_norm")
            h = ln(F.gelu(lin(x, "lm_head.dense")), "lm_head.layer_norm")
            # F.linear would export MatMul(h, Transpose(table)), and constant folding would store the
            # transposed table as a second initializer: untied. Einsum reads the one table as it is.
            return torch.einsum("btd,vd->btv", h, s["lm_head.weight"]) + s["lm_head.bias"]

    return Roberta().eval()


def encode(seq: str) -> list[int]:
    """seq2tokens: <s>, one symbol a residue (`*` and `X` as <mask>), </s>."""
    return [0] + [MASK if c in "*X" else SYMBOLS.index(c) for c in seq] + [2]


def _readme_check(model) -> None:
    """The package README's example: its scores' first rows and its infilled sequence."""
    import torch

    seq = "**QLV*SGVEVKKPGASVKVSCKASGYTFTNYYMYWVRQAPGQGLEWMGGINPSNGGTNFNEKFKNRVTLTTDSSTTTAYMELKSLQFDDTAVYYCARRDYRFDMGFDYWGQGTTVTVSS"  # noqa: E501
    with torch.no_grad():
        prob = model(torch.tensor([encode(seq)])).softmax(-1)[0, 1:-1].numpy()
    published = np.array([[0.003272, 0.004147, 0.004011, 0.004590], [0.012038, 0.003854, 0.006803, 0.008174],
                          [0.003384, 0.003895, 0.003726, 0.004068], [0.004612, 0.005325, 0.004443, 0.004641],
                          [0.005519, 0.003664, 0.003555, 0.005269]])
    best = "".join(SYMBOLS[4 + i] for i in prob[:, 4:24].argmax(-1))
    infilled = "".join(b if a in "*X" else a for a, b in zip(seq, best))
    if np.abs(prob[:5, 4:8] - published).max() > 1e-6 or infilled != HEAVY[0]:
        raise RuntimeError("the rebuilt Sapiens does not compute the package README's scores")


def export(package_dir: Path, path_in_package: str, out: Path) -> None:
    import onnxruntime as ort
    import torch

    model = _module(_state(package_dir, path_in_package))
    _readme_check(model)
    feed = antibody_heavy_chains(None, 0, 1)[0]["tokens"]
    torch.onnx.export(model, (torch.tensor(feed),), str(out), input_names=["tokens"], output_names=["logits"],
                      dynamic_axes={"tokens": {0: "batch", 1: "length"}, "logits": {0: "batch", 1: "length"}},
                      opset_version=14, dynamo=False)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for seed in (0, 1000):
        for f in antibody_heavy_chains(None, seed, 4):
            with torch.no_grad():
                want = model(torch.tensor(f["tokens"])).numpy()
            got = session.run(None, f)[0]
            if np.abs(got - want).max() > TOLERANCE * np.abs(want).max():
                out.unlink()
                raise RuntimeError("the Sapiens export does not compute the rebuilt model")


def antibody_heavy_chains(model, seed, n, per_sample: int = 4):
    """4 heavy chains a sample (rotating through the set's 8), padded; every seventh residue masked."""
    pool = HEAVY[:8] if seed < 1000 else HEAVY[8:]
    feeds = []
    for i in range(n):
        seqs = [pool[(2 * i + j) % len(pool)] for j in range(per_sample)]
        masked = ["".join("*" if (p + i) % 7 == 3 else c for p, c in enumerate(seq)) for seq in seqs]
        width = max(len(s) for s in masked) + 2
        rows = [encode(s) + [PAD] * (width - len(s) - 2) for s in masked]
        feeds.append({"tokens": np.array(rows, np.int64)})
    return feeds


def residues(outputs, feed):
    """The most likely of the 20 residues at each residue position (not <s>, </s> or padding)."""
    logits = np.asarray(next(iter(outputs.values())))
    tokens = np.asarray(feed["tokens"])
    at = (tokens != PAD) & (tokens != 0) & (tokens != 2)
    return logits[..., 4:24].argmax(-1)[at], False
