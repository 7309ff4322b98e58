"""``nmt-import``: a model people already have -> our model package, every variant.

    nmt-import Helsinki-NLP/opus-mt-en-de packages/opus-mt-en-de --int8
    nmt-import ~/models/opus-mt-en-de packages/opus-mt-en-de --int8
    nmt-import ~/models/nllb-200-distilled-600M packages/nllb --languages en,de,fr --int8

The source is a local Hugging Face directory (config.json, model.safetensors or
pytorch_model.bin, the tokenizer's files), as ``save_pretrained`` or a hub download leaves
it, or a model id (``owner/name``, or ``hf:owner/name``) when no such directory exists: then
huggingface_hub's ``snapshot_download`` fetches only the files the import reads into the
hub's own cache (HF_HOME, HF_HUB_CACHE; HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE are
honoured; export/hub.py), at ``--revision``. Two architectures:

- ``MarianMTModel`` (OPUS-MT, ~1,400 models): post-LN, swish, a sinusoidal table laid out
  [sin half | cos half], ``final_logits_bias``, one vocabulary shared by source and target
  (``vocab.json``) over two SentencePiece models (``source.spm``, ``target.spm``), the
  decoder started with the pad id. One language pair, named by the tokenizer's
  ``source_lang``/``target_lang`` or by ``--pair``; or, where the vocabulary has ``>>xx<<``
  target-language tokens (en-ROMANCE, en-mul ...), one pair per token from ``source_lang``:
  the tokens are the package's language tags, the first source piece as MarianTokenizer puts
  them (``>>fr<< pieces </s>``). Separate source and target vocabularies are refused.
- ``M2M100ForConditionalGeneration`` (NLLB-200, M2M100): pre-LN with final norms, ReLU, its
  own sinusoidal table read from position 2 (pad id + 1), a SentencePiece model whose ids are
  shifted by fairseq's four special tokens, and language-code tokens: the source is
  ``[source code] pieces </s>`` and the decoder starts ``</s> [target code]``.

The weights become our Transformer (training/model.py) with the options these models need
(activation, the stored positional table, an output bias); the graphs, their check against
PyTorch, int8/fp16 and the resident graphs are nmt-export's own pipeline
(``onnx_export.write_package``). Anything in a config this code does not translate is
refused with a message naming the field: a model that loads but computes something else
would be worse than none. So are weights that do not fit config.json (missing, unexpected or
of another shape: Transformers would fill the gaps with random values and only warn), and a
checkpoint of this project (nmt-export's job).

Transformers (the ``hf`` extra) reads the directory: its classes build the model exactly as
the model's authors meant, positional tables included (Marian and M2M100 compute theirs at
load time rather than store them).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ArgumentParser, exit_status_help, fail
from engine import contract
from engine.package import Manifest, ModelPackage
from engine.tokenizer import PIECES
from export.hub import ImportRefused, fetch, hub_id
from export.onnx_export import OPSET, dimensions, write_package
from training.config import ModelConfig
from training.model import Transformer

MARIAN, M2M100 = "marian", "m2m_100"
SUPPORTED = {MARIAN: "MarianMTModel (OPUS-MT)", M2M100: "M2M100ForConditionalGeneration (NLLB-200, M2M100)"}
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}
M2M100_POSITION_OFFSET = 2  # M2M100 looks position p up at row pad_id + 1 + p (pad id 1)


def read_config(directory: Path) -> dict[str, Any]:
    path = directory / "config.json"
    ours = ImportRefused(f"{directory} is a checkpoint of this project: export it with nmt-export")
    if directory.is_file() and directory.suffix == ".pt":
        raise ours
    if not directory.is_dir():
        raise ImportRefused(f"{directory} is not a directory (give the directory save_pretrained wrote)")
    if any((directory / name).is_file() for name in ("model.pt", "average.pt")) or (directory / "checkpoints").is_dir():
        raise ours  # a shipped model or a training run of nmt-train
    if not path.is_file():
        raise ImportRefused(f"{directory} has no config.json: not a Hugging Face model directory")
    try:
        config = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ImportRefused(f"{path} is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise ImportRefused(f"{path} does not hold a JSON object")
    if isinstance(config.get("model"), dict) and isinstance(config.get("train"), dict):
        raise ours  # our RunConfig's sections (training/config.py), not a Transformers config
    kind = config.get("model_type")
    if kind not in SUPPORTED:
        raise ImportRefused(f"config.json: model_type is {kind!r}; nmt-import reads "
                            + ", ".join(f"{k!r} ({v})" for k, v in SUPPORTED.items()))
    return config


def _need(config: dict[str, Any], key: str, expected: Any, why: str) -> None:
    value = config.get(key, expected)
    if value != expected:
        raise ImportRefused(f"config.json: {key} is {value!r}; only {expected!r} is supported ({why})")


def model_config(config: dict[str, Any]) -> ModelConfig:
    """Our ModelConfig for a Marian or M2M100 config; ImportRefused names any field it cannot honour."""
    kind = config["model_type"]
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if config.get(a) != config.get(b):
            raise ImportRefused(f"config.json: {a} is {config.get(a)} and {b} {config.get(b)}; "
                                f"our model has one value for both")
    activation = config.get("activation_function", "relu")
    if activation not in ACTIVATIONS:
        raise ImportRefused(f"config.json: activation_function is {activation!r}; supported: "
                            f"{', '.join(sorted(ACTIVATIONS))}")
    _need(config, "tie_word_embeddings", True, "the output layer is the shared embedding")
    if kind == MARIAN:
        _need(config, "share_encoder_decoder_embeddings", True, "one embedding for source and target")
        if config.get("decoder_vocab_size") not in (None, config["vocab_size"]):
            raise ImportRefused(f"config.json: decoder_vocab_size is {config['decoder_vocab_size']}, vocab_size "
                                f"{config['vocab_size']}; separate target vocabularies are not supported")
        _need(config, "static_position_embeddings", True, "sinusoidal positions")
        _need(config, "normalize_before", False, "post-LN layers")
        _need(config, "add_final_layer_norm", False, "no final layer norms")
        _need(config, "normalize_embedding", False, "no layer norm on the embeddings")
    else:
        _need(config, "layernorm_embedding", False, "no layer norm on the embeddings")
    return ModelConfig(
        vocab_size=int(config["vocab_size"]), d_model=int(config["d_model"]),
        n_heads=int(config["encoder_attention_heads"]), n_encoder_layers=int(config["encoder_layers"]),
        n_decoder_layers=int(config["decoder_layers"]), d_ff=int(config["encoder_ffn_dim"]),
        dropout=0.0, pre_norm=kind == M2M100, max_positions=int(config["max_position_embeddings"]),
        pad_id=int(config["pad_token_id"]), activation=ACTIVATIONS[activation],
        scale_embedding=bool(config.get("scale_embedding", False)), positions="table",
        output_bias=kind == MARIAN)


def load_hf(directory: Path, kind: str) -> Any:
    """The Transformers model of ``directory`` in eval mode, float32, offline."""
    try:
        with _offline():  # a local directory; never the network
            from transformers import M2M100ForConditionalGeneration, MarianMTModel
    except ImportError:
        raise ImportRefused("nmt-import needs Transformers to read the directory: pip install '.[hf]'") from None
    cls = MarianMTModel if kind == MARIAN else M2M100ForConditionalGeneration
    try:
        model, info = cls.from_pretrained(str(directory), local_files_only=True, dtype=torch.float32,
                                          output_loading_info=True)
    except (OSError, ValueError) as e:
        raise ImportRefused(f"{directory}: Transformers cannot load the model: {str(e).splitlines()[0]}") from None
    check_loading(directory, model, info)
    return model.eval()


@contextmanager
def _offline():
    """HF_HUB_OFFLINE=1 while Transformers is first imported (it reads it then), and not after:
    a model id fetched later in the same process still reaches the hub."""
    before = os.environ.get("HF_HUB_OFFLINE")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HF_HUB_OFFLINE", None)


def check_loading(directory: Path, model: Any, info: dict[str, Any]) -> None:
    """Refuse weights that do not fit the model config.json describes: Transformers fills what
    the files lack with random values and drops what its model has no place for, with a warning
    only, and a model with random layers would import, pass the graphs' checks and serve noise."""
    model_keys = set(model.state_dict())
    parts = []
    for what, keys in (("missing", info.get("missing_keys")), ("unexpected", info.get("unexpected_keys")),
                       ("of another shape", [k[0] if isinstance(k, tuple) else k
                                             for k in info.get("mismatched_keys") or ()])):
        if keys:
            parts.append(f"{what} {', '.join(_grouped(set(keys), model_keys))}")
    if parts:
        config = model.config
        raise ImportRefused(f"{directory}: the weights do not match config.json ({config.encoder_layers}+"
                            f"{config.decoder_layers} layers): " + "; ".join(parts))


def _grouped(names: set[str], model_keys: set[str]) -> list[str]:
    """``names`` sorted, a whole layer as ``...layers.N.*`` when every weight of it (the model's or
    the file's) is among them."""
    out = set(names)
    for name in names:
        prefix = re.match(r"(.*\.layers\.\d+\.)", name)
        if prefix is None:
            continue
        p = prefix.group(1)
        under = {k for k in model_keys | names if k.startswith(p)}
        if under <= names:
            out -= under
            out.add(p + "*")
    return sorted(out)


def layer_map(m: ModelConfig) -> dict[str, str]:
    """Transformers parameter name -> ours, for every parameter but the embeddings, the
    positions and the output bias (bench/peers/hf_convert.py maps the other way with it)."""
    names: dict[str, str] = {}

    def attention(hf: str, ours: str) -> None:
        for a, b in (("q_proj", "w_q"), ("k_proj", "w_k"), ("v_proj", "w_v"), ("out_proj", "w_o")):
            for p in ("weight", "bias"):
                names[f"{hf}.{a}.{p}"] = f"{ours}.{b}.{p}"

    def linear_and_norm(hf: str, ours: str) -> None:
        for p in ("weight", "bias"):
            names[f"{hf}.{p}"] = f"{ours}.{p}"

    # Encoder layers: self-attention, FFN; decoder layers: self-attention, cross-attention, FFN.
    for stack, n, cross in (("encoder", m.n_encoder_layers, False), ("decoder", m.n_decoder_layers, True)):
        for i in range(n):
            hf, ours = f"model.{stack}.layers.{i}", f"{stack}_layers.{i}"
            attention(f"{hf}.self_attn", f"{ours}.self_attn")
            linear_and_norm(f"{hf}.self_attn_layer_norm", f"{ours}.sublayer.0.norm")
            if cross:
                attention(f"{hf}.encoder_attn", f"{ours}.cross_attn")
                linear_and_norm(f"{hf}.encoder_attn_layer_norm", f"{ours}.sublayer.1.norm")
            linear_and_norm(f"{hf}.fc1", f"{ours}.feed_forward.w_1")
            linear_and_norm(f"{hf}.fc2", f"{ours}.feed_forward.w_2")
            linear_and_norm(f"{hf}.final_layer_norm", f"{ours}.sublayer.{1 + cross}.norm")
    if m.pre_norm:
        linear_and_norm("model.encoder.layer_norm", "encoder_norm")
        linear_and_norm("model.decoder.layer_norm", "decoder_norm")
    return names


def position_table(hf_model: Any, kind: str, m: ModelConfig) -> torch.Tensor:
    """The rows of the model's own positional table that positions 0 .. max_positions - 1 read."""
    encoder, decoder = hf_model.model.encoder.embed_positions, hf_model.model.decoder.embed_positions
    if kind == MARIAN:
        tables = [encoder.weight, decoder.weight]
        offset = 0
    else:
        # M2M100 sizes its table for max_position_embeddings + 2 rows and reads row pad + 1 + p.
        if m.pad_id + 1 != M2M100_POSITION_OFFSET:
            raise ImportRefused(f"config.json: pad_token_id is {m.pad_id}; M2M100's positions start at pad + 1, "
                                f"which this importer supports for pad 1 only")
        tables = [encoder.weights, decoder.weights]
        offset = M2M100_POSITION_OFFSET
    if not torch.equal(tables[0], tables[1]):
        raise ImportRefused("the encoder's and the decoder's positional tables differ; our model has one")
    table = tables[0][offset:offset + m.max_positions]
    if table.size(0) != m.max_positions:
        raise ImportRefused(f"the positional table has {tables[0].size(0)} rows, fewer than max_position_embeddings "
                            f"{m.max_positions} + {offset}")
    return table.detach().float().clone()


def to_ours(hf_model: Any, kind: str, m: ModelConfig) -> Transformer:
    """The Transformers model's weights in our Transformer (eval mode); every parameter of
    either side is accounted for."""
    model = Transformer(m).eval()
    ours = model.state_dict()
    theirs = hf_model.state_dict()
    mapping = layer_map(m)
    with torch.no_grad():
        for hf_name, name in mapping.items():
            if hf_name not in theirs:
                raise ImportRefused(f"the model has no {hf_name} (a layer this importer expects)")
            if theirs[hf_name].shape != ours[name].shape:
                raise ImportRefused(f"{hf_name} is {tuple(theirs[hf_name].shape)}; "
                                    f"{name} needs {tuple(ours[name].shape)}")
            ours[name].copy_(theirs[hf_name].float())
        shared = hf_model.get_input_embeddings().weight
        for other in (hf_model.model.encoder.embed_tokens, hf_model.model.decoder.embed_tokens,
                      hf_model.get_output_embeddings()):
            if not torch.equal(other.weight, shared):
                raise ImportRefused("the encoder, decoder and output embeddings are not one matrix")
        if getattr(hf_model.get_output_embeddings(), "bias", None) is not None:
            raise ImportRefused("lm_head has a bias of its own")
        ours["embedding.weight"].copy_(shared.float())
        ours["positional.table"].copy_(position_table(hf_model, kind, m))
        if m.output_bias:
            ours["output_bias"].copy_(theirs["final_logits_bias"].reshape(-1).float())
    # What the HF model holds that the mapping does not read must be what we read another way.
    known = {*mapping, "final_logits_bias", "lm_head.weight", "model.shared.weight",
             "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
             "model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"}
    unread = sorted(set(theirs) - known)
    if unread:
        raise ImportRefused(f"weights this importer does not understand: {', '.join(unread[:5])}")
    for module in hf_model.modules():
        if isinstance(module, torch.nn.LayerNorm) and module.eps != 1e-5:
            raise ImportRefused(f"a LayerNorm has eps {module.eps}; ours use 1e-5")
    model.load_state_dict(ours)
    return model


# NLLB's language codes for the languages people ask for by their two-letter code; others
# are named on the command line (--languages xx=yyy_Zzzz).
NLLB_CODES = {
    "ar": "arb_Arab", "bg": "bul_Cyrl", "cs": "ces_Latn", "da": "dan_Latn", "de": "deu_Latn", "el": "ell_Grek",
    "en": "eng_Latn", "es": "spa_Latn", "et": "est_Latn", "fi": "fin_Latn", "fr": "fra_Latn", "he": "heb_Hebr",
    "hi": "hin_Deva", "hu": "hun_Latn", "id": "ind_Latn", "it": "ita_Latn", "ja": "jpn_Jpan", "ko": "kor_Hang",
    "lt": "lit_Latn", "lv": "lvs_Latn", "nl": "nld_Latn", "pl": "pol_Latn", "pt": "por_Latn", "ro": "ron_Latn",
    "ru": "rus_Cyrl", "sk": "slk_Latn", "sl": "slv_Latn", "sv": "swe_Latn", "tr": "tur_Latn", "uk": "ukr_Cyrl",
    "vi": "vie_Latn", "zh": "zho_Hans",
}


# OPUS-MT's target-language tokens, ">>fra<<", ">>pt_br<<": the source's first piece, naming the target.
TARGET_TOKEN = re.compile(r">>([A-Za-z]{2,3}(?:_[A-Za-z0-9]+)*)<<")


def marian_tokenizer(directory: Path, config: dict[str, Any], pair: str | None, languages: list[str] | None = None,
                     log=print) -> tuple[dict[str, bytes], dict[str, int], tuple[str, ...], dict[str, int]]:
    """OPUS-MT's tokenizer files, special ids, pairs and target-language tags (language -> the
    id of its ``>>xx<<`` token; none for a model with one target)."""
    files: dict[str, bytes] = {}
    for name in ("source.spm", "target.spm", "vocab.json"):
        if not (directory / name).is_file():
            raise ImportRefused(f"{directory} has no {name} (a MarianTokenizer directory has source.spm, "
                                f"target.spm and vocab.json)")
        files[{"source.spm": contract.SOURCE_SPM, "target.spm": contract.TARGET_SPM,
               "vocab.json": contract.VOCAB}[name]] = (directory / name).read_bytes()
    vocab = json.loads(files[contract.VOCAB])
    if len(vocab) != config["vocab_size"]:
        raise ImportRefused(f"vocab.json has {len(vocab)} pieces, config.json's vocab_size is {config['vocab_size']}")
    if "<unk>" not in vocab:
        raise ImportRefused("vocab.json has no <unk>")
    special = {"pad": int(config["pad_token_id"]), "unk": vocab["<unk>"], "eos": int(config["eos_token_id"]),
               "bos": int(config.get("decoder_start_token_id", config["pad_token_id"]))}
    source, target = pair.partition("-")[::2] if pair else (None, None)
    if pair is None:
        tok_config = _json(directory / "tokenizer_config.json")
        source, target = tok_config.get("source_lang"), tok_config.get("target_lang")
    tokens = {piece: i for piece, i in vocab.items() if piece.startswith(">>") and piece.endswith("<<")}
    if not tokens:  # one target language
        if not source or not target:
            raise ImportRefused("tokenizer_config.json names no source_lang and target_lang: give the pair with "
                                "--pair SRC-TGT")
        return files, special, (f"{source}-{target}",), {}
    if not source:
        raise ImportRefused("tokenizer_config.json names no source_lang: give the direction with --pair SRC-TGT")
    source = source.strip().lower()
    tags = target_tags(tokens, log)
    if pair and languages:
        raise ImportRefused("give --pair (one direction) or --languages (several), not both")
    wanted = [target] if pair else [x for x in (languages or ()) if x.strip().lower() != source]
    wanted = [x.strip().lower() for x in wanted]
    unknown = [x for x in wanted if x not in tags]
    if unknown:
        flag = "--pair" if pair else "--languages"
        raise ImportRefused(f"{flag}: {', '.join(unknown)} is not a target language of this model; its targets "
                            f"(its >>xx<< tokens): {', '.join(sorted(tags))}")
    if languages and not wanted:
        raise ImportRefused(f"--languages names no target language of this model; its targets: "
                            f"{', '.join(sorted(tags))}")
    chosen = {lang: tags[lang] for lang in (wanted or tags) if lang != source}
    return files, special, tuple(f"{source}-{lang}" for lang in chosen), chosen


def target_tags(tokens: dict[str, int], log=print) -> dict[str, int]:
    """Language (lower case, as requests name it) -> the id of its ``>>xx<<`` token, in the
    vocabulary's order. Tokens that cannot be a language of ours are left out, with a note."""
    tags: dict[str, int] = {}
    left_out = []
    for piece, i in sorted(tokens.items(), key=lambda item: item[1]):
        match = TARGET_TOKEN.fullmatch(piece)
        if match is None or match.group(1).lower() in tags:
            left_out.append(piece)
        else:
            tags[match.group(1).lower()] = i
    if not tags:
        raise ImportRefused(f"vocab.json's target-language tokens ({', '.join(sorted(tokens)[:3])}, ...) name no "
                            f"language code this importer reads (>>xx<<, >>xxx<<, >>xx_Yyyy<<)")
    if left_out:
        log(f"target-language tokens left out (not a language code, or the same one in another case): "
            f"{', '.join(left_out[:10])}{' ...' if len(left_out) > 10 else ''}")
    return tags


def nllb_tokenizer(directory: Path, config: dict[str, Any], languages: list[str] | None
                   ) -> tuple[dict[str, bytes], dict[str, int], tuple[str, ...], dict[str, int]]:
    """NLLB's tokenizer files, special ids, pairs and language codes (language -> id)."""
    spm_file = directory / "sentencepiece.bpe.model"
    if not spm_file.is_file():
        if (directory / "vocab.json").is_file():
            raise ImportRefused("M2M100's own tokenizer (vocab.json with __xx__ language codes) is not supported "
                                "yet; NLLB's (sentencepiece.bpe.model) is")
        raise ImportRefused(f"{directory} has no sentencepiece.bpe.model (an NllbTokenizer directory has one)")
    try:
        from transformers import NllbTokenizer

        tokenizer = NllbTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError) as e:
        raise ImportRefused(f"{directory}: NllbTokenizer does not load: {str(e).splitlines()[0]}") from None
    vocab = dict(tokenizer.get_vocab())
    size = int(config["vocab_size"])
    if len(vocab) > size or sorted(vocab.values()) != list(range(len(vocab))):
        raise ImportRefused(f"the tokenizer's {len(vocab)} ids do not fit config.json's vocab_size {size}")
    for i in range(len(vocab), size):  # NLLB-200's embedding has rows no token uses: name them, never text
        vocab[f"<unused{i}>"] = i
    chosen = _languages(languages, vocab)
    codes = {lang: vocab[code] for lang, code in chosen.items()}
    special = {"pad": int(config["pad_token_id"]), "unk": vocab["<unk>"], "eos": int(config["eos_token_id"]),
               "bos": int(config.get("decoder_start_token_id", config["eos_token_id"]))}
    files = {contract.SOURCE_SPM: spm_file.read_bytes(),
             contract.VOCAB: json.dumps(vocab, ensure_ascii=False).encode()}
    pairs = tuple(f"{a}-{b}" for a in chosen for b in chosen if a != b)
    return files, special, pairs, codes


def _languages(asked: list[str] | None, vocab: dict[str, int]) -> dict[str, str]:
    """Our language name -> NLLB's code, for ``asked`` (``en`` or ``en=eng_Latn``) or, by
    default, every language of NLLB_CODES the vocabulary has."""
    if not asked:
        chosen = {lang: code for lang, code in NLLB_CODES.items() if code in vocab}
        if len(chosen) < 2:
            raise ImportRefused("the vocabulary has fewer than two of the language codes nmt-import knows; name "
                                "the languages with --languages xx=code,yy=code")
        return chosen
    chosen = {}
    for item in asked:
        lang, _, code = item.partition("=")
        code = code or NLLB_CODES.get(lang, "")
        if not code:
            raise ImportRefused(f"--languages: no NLLB code known for {lang!r}; give it as {lang}=xxx_Xxxx")
        if code not in vocab:
            raise ImportRefused(f"--languages: {code} is not a language code of this model's vocabulary")
        chosen[lang] = code
    if len(chosen) < 2:
        raise ImportRefused("--languages: name at least two languages")
    return chosen


def _json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def import_model(directory: str | Path, out_dir: str | Path, int8: bool = False, fp16: bool = False,
                 force: bool = False, pair: str | None = None, languages: list[str] | None = None,
                 revision: str | None = None, log=print) -> ModelPackage:
    """The whole import: fetch a model id, read and check, convert, then nmt-export's pipeline."""
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir()) and not force)):
        raise ImportRefused(f"{out_dir} exists and is not an empty directory; pass --force to overwrite it")
    model_id = hub_id(directory)
    if model_id is not None:
        snapshot = fetch(model_id, revision, log=log)
        return import_directory(snapshot, out_dir, int8=int8, fp16=fp16, pair=pair, languages=languages, log=log,
                                origin={"imported_from": model_id, "hub_model_id": model_id,
                                        "hub_revision": snapshot.name})  # the snapshot's commit
    if revision is not None:
        raise ImportRefused(f"--revision is for a model id; {directory} is a directory")
    return import_directory(Path(directory), out_dir, int8=int8, fp16=fp16, pair=pair, languages=languages, log=log)


def import_directory(directory: Path, out_dir: Path, int8: bool = False, fp16: bool = False, pair: str | None = None,
                     languages: list[str] | None = None, origin: dict[str, Any] | None = None,
                     log=print) -> ModelPackage:
    """A Hugging Face directory -> the package ``out_dir`` (replaced if it exists); ``origin``:
    where the directory came from, for the provenance (default: its name)."""
    config = read_config(directory)
    kind = config["model_type"]
    m = model_config(config)
    codes: dict[str, int] = {}
    tags: dict[str, int] = {}
    if kind == MARIAN:
        files, special, pairs, tags = marian_tokenizer(directory, config, pair, languages, log=log)
    else:
        files, special, pairs, codes = nllb_tokenizer(directory, config, languages)
    log(f"reading {directory} ({SUPPORTED[kind]}: d_model {m.d_model}, {m.n_encoder_layers}+{m.n_decoder_layers} "
        f"layers, {m.activation}, vocabulary {m.vocab_size}"
        + (f"; target-language tokens for {', '.join(tags)}" if tags else "") + ")")
    model = to_ours(load_hf(directory, kind), kind, m)

    def manifest(worst: float) -> Manifest:
        return Manifest(
            # OPUS-MT's >>xx<< tokens are language tags: the source's first piece, naming the target.
            dims=dimensions(m), special_ids=special, language_tags=tags, pairs=pairs,
            # Source: [code] + pieces + eos; target: the decoder's start + [code] + pieces + eos.
            max_source_tokens=m.max_positions, max_target_tokens=m.max_positions - 1 - bool(codes),
            graphs=(*contract.REQUIRED_GRAPHS, *contract.RESIDENT_GRAPHS), tokenizer=PIECES,
            source_codes=codes, target_codes=codes,
            provenance={"imported_from": directory.name, **(origin or {}), "architecture": SUPPORTED[kind],
                        "hf_config": config, "model": asdict(m), "opset": OPSET, "torch": torch.__version__,
                        "max_abs_diff_vs_torch": worst,
                        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})

    return write_package(model, files, manifest, out_dir, int8=int8, fp16=fp16, eos_id=special["eos"], log=log)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="nmt-import", description=__doc__, epilog=exit_status_help(EXIT_FAILED, EXIT_USAGE))
    p.add_argument("directory", help="a local Hugging Face model directory (config.json, weights, tokenizer files), "
                                     "or a model id (owner/name or hf:owner/name) to fetch into the hub's cache")
    p.add_argument("out_dir", help="the model package directory to write (created with its parents)")
    p.add_argument("--revision", help="a model id's branch, tag or commit (default: the hub's default branch)")
    p.add_argument("--int8", action="store_true", help="add int8 graphs (dynamic quantization) for the CPU")
    p.add_argument("--fp16", action="store_true", help="add half-precision graphs for CUDA")
    p.add_argument("--force", action="store_true", help="overwrite an existing, non-empty out_dir")
    p.add_argument("--pair", help="OPUS-MT: the language pair, as SRC-TGT (default: tokenizer_config.json's "
                                  "source_lang and target_lang; with several targets, every >>xx<< token's)")
    p.add_argument("--languages", type=lambda v: [x for x in v.split(",") if x],
                   help="NLLB: the languages to serve, as en,de or en=eng_Latn,... (default: the "
                        f"{len(NLLB_CODES)} with two-letter codes nmt-import knows); every pair among them. "
                        "OPUS-MT with several targets: the targets to serve (default: every one)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        import_model(args.directory, args.out_dir, int8=args.int8, fp16=args.fp16, force=args.force, pair=args.pair,
                     languages=args.languages, revision=args.revision)
    except (ImportRefused, FileNotFoundError) as e:
        return fail("nmt-import", str(e), EXIT_USAGE)
    except RuntimeError as e:  # the exported graphs do not match PyTorch
        return fail("nmt-import", str(e), EXIT_FAILED)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
