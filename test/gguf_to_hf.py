#!/usr/bin/env python3
"""gguf_to_hf.py: turn an all-F32 GGUF file of architecture qwen3, qwen3moe
or gemma3 back into the Hugging Face directory it would have been converted
from, as a test fixture for export.py --hf.

    python3 test/gguf_to_hf.py IN.gguf OUT_DIR [--untied] [--set KEY=JSON]...
        [--copy FILE[:NAME]]... [--drop TENSOR]... [--shorten TENSOR]...
        [--spm [VOCAB.gguf]]

Writes OUT_DIR/config.json (Qwen3ForCausalLM, Qwen3MoeForCausalLM or
Gemma3ForCausalLM, sizes from the file's keys) and model.safetensors with
Hugging Face's names: q and k as they are (both use NEOX RoPE, so the
layouts agree), the 3-D expert tensors split into one matrix per expert,
Gemma's norms less the 1 its GGUF files add. --spm writes tokenizer.model,
a SentencePiece ModelProto of the file's vocabulary (or VOCAB.gguf's:
pieces, scores and types as they are, no space prefix where the file says
add_space_prefix false), and tokenizer_config.json with its add_bos_token,
add_eos_token and chat template. --untied writes lm_head.weight (a
copy of the embeddings when the file has no output.weight); --set KEY=JSON
sets a config.json key; --copy puts a file into OUT_DIR (FILE:NAME under
another name); --drop leaves a tensor out and --shorten drops the last value
of a 1-D one (Hugging Face names), to make broken directories.
--multimodal writes a gemma3 file as Gemma3ForConditionalGeneration:
config.json's text_config (leaving out the keys whose value is
transformers' default), the language model's tensors under
language_model., and two small stand-in vision tensors.
Needs numpy only.
"""

import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_hf import read_gguf, write_safetensors  # noqa: E402

# GGUF tensor name in blk.N -> Hugging Face name in model.layers.N
LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    "ffn_gate_inp": "mlp.gate",
}
EXPERT_NAMES = {"ffn_gate_exps": "gate_proj", "ffn_up_exps": "up_proj", "ffn_down_exps": "down_proj"}
# Gemma 3: norms before and after attention and the feed-forward
GEMMA_NAMES = dict(LAYER_NAMES, ffn_norm="pre_feedforward_layernorm", post_attention_norm="post_attention_layernorm",
                   post_ffw_norm="post_feedforward_layernorm")
# Gemma3TextConfig's defaults (transformers), left out of a --multimodal text_config
GEMMA_TEXT_DEFAULTS = {"rms_norm_eps": 1e-6, "rope_theta": 1e6, "rope_local_base_freq": 10000.0,
                       "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True, "head_dim": 256,
                       "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 262208,
                       "max_position_embeddings": 131072, "query_pre_attn_scalar": 256, "sliding_window": 4096}
ARCHITECTURES = {"qwen3": ("Qwen3ForCausalLM", "qwen3"), "qwen3moe": ("Qwen3MoeForCausalLM", "qwen3_moe"),
                 "gemma3": ("Gemma3ForCausalLM", "gemma3_text")}


def hf_tensors(kv, tensors, arch, untied):
    """[(Hugging Face name, float32 array)] in Hugging Face's order."""
    n_layers = kv[f"{arch}.block_count"]
    dim = kv[f"{arch}.embedding_length"]
    heads, kv_heads = kv[f"{arch}.attention.head_count"], kv[f"{arch}.attention.head_count_kv"]
    head_dim = kv[f"{arch}.attention.key_length"]
    shapes = {"attn_q": (heads * head_dim, dim), "attn_k": (kv_heads * head_dim, dim),
              "attn_v": (kv_heads * head_dim, dim), "attn_output": (dim, heads * head_dim)}
    if arch == "qwen3moe":
        n_expert, ff = kv[f"{arch}.expert_count"], kv[f"{arch}.expert_feed_forward_length"]
        shapes.update({"ffn_gate_inp": (n_expert, dim), "ffn_gate_exps": (n_expert, ff, dim),
                       "ffn_up_exps": (n_expert, ff, dim), "ffn_down_exps": (n_expert, dim, ff)})
    else:
        ff = kv[f"{arch}.feed_forward_length"]
        shapes.update({"ffn_gate": (ff, dim), "ffn_up": (ff, dim), "ffn_down": (dim, ff)})
    vocab = tensors["token_embd.weight"].size // dim
    embed = tensors["token_embd.weight"].reshape(vocab, dim)
    out = [("model.embed_tokens.weight", embed)]
    names = GEMMA_NAMES if arch == "gemma3" else LAYER_NAMES
    # Gemma's RMSNorm scales by 1 + w: Hugging Face holds w
    unshift = (lambda kind, w: w - np.float32(1) if kind.endswith("norm") else w) if arch == "gemma3" else (
        lambda kind, w: w)
    for layer in range(n_layers):
        for name, flat in tensors.items():
            prefix = f"blk.{layer}."
            if not name.startswith(prefix):
                continue
            kind = name[len(prefix):-len(".weight")]
            w = flat.reshape(shapes.get(kind, flat.shape))
            if kind in EXPERT_NAMES:
                out += [(f"model.layers.{layer}.mlp.experts.{e}.{EXPERT_NAMES[kind]}.weight", w[e])
                        for e in range(w.shape[0])]
            else:
                out.append((f"model.layers.{layer}.{names[kind]}.weight", unshift(kind, w)))
    out.append(("model.norm.weight", unshift("norm", tensors["output_norm.weight"])))
    if "output.weight" in tensors:
        out.append(("lm_head.weight", tensors["output.weight"].reshape(vocab, dim)))
    elif untied:
        out.append(("lm_head.weight", embed.copy()))
    return out, vocab


def hf_config(kv, arch, vocab, untied):
    config = {
        "architectures": [ARCHITECTURES[arch][0]],
        "model_type": ARCHITECTURES[arch][1],
        "hidden_size": kv[f"{arch}.embedding_length"],
        "intermediate_size": kv[f"{arch}.feed_forward_length"],
        "num_hidden_layers": kv[f"{arch}.block_count"],
        "num_attention_heads": kv[f"{arch}.attention.head_count"],
        "num_key_value_heads": kv[f"{arch}.attention.head_count_kv"],
        "head_dim": kv[f"{arch}.attention.key_length"],
        "vocab_size": vocab,
        "max_position_embeddings": kv[f"{arch}.context_length"],
        "rms_norm_eps": float(np.float32(kv[f"{arch}.attention.layer_norm_rms_epsilon"])),
        "rope_theta": kv[f"{arch}.rope.freq_base"],
        "hidden_act": "silu",
        "attention_bias": False,
        "tie_word_embeddings": not untied,
        "bos_token_id": kv.get("tokenizer.ggml.bos_token_id", 1),
        "eos_token_id": kv.get("tokenizer.ggml.eos_token_id", 2),
        "torch_dtype": "float32",
    }
    if "tokenizer.ggml.padding_token_id" in kv:
        config["pad_token_id"] = kv["tokenizer.ggml.padding_token_id"]
    if arch == "qwen3moe":
        config.update({"num_experts": kv[f"{arch}.expert_count"],
                       "num_experts_per_tok": kv[f"{arch}.expert_used_count"],
                       "moe_intermediate_size": kv[f"{arch}.expert_feed_forward_length"],
                       "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []})
    if arch == "gemma3":
        n_layers, head_dim = kv[f"{arch}.block_count"], kv[f"{arch}.attention.key_length"]
        window = kv.get(f"{arch}.attention.sliding_window")
        del config["hidden_act"]
        config.update({
            "hidden_activation": "gelu_pytorch_tanh",
            "query_pre_attn_scalar": (kv[f"{arch}.embedding_length"] // kv[f"{arch}.attention.head_count"]
                                      if n_layers == 62 else head_dim),
            "rope_local_base_freq": kv.get(f"{arch}.rope.freq_base_swa", 10000.0),
            "sliding_window": window,
            "sliding_window_pattern": kv.get(f"{arch}.attention.sliding_window_pattern", 6) if window else 1,
            "final_logit_softcapping": kv.get(f"{arch}.final_logit_softcapping"),
            "attn_logit_softcapping": None,
            "rope_scaling": None,
        })
        if kv.get(f"{arch}.rope.scaling.type") == "linear":
            config["rope_scaling"] = {"rope_type": "linear", "factor": kv[f"{arch}.rope.scaling.factor"]}
    return config


def is_default(key, value):
    """value is Gemma3TextConfig's default for key (float32 equality for numbers)."""
    if key not in GEMMA_TEXT_DEFAULTS or value is None:
        return False
    default = GEMMA_TEXT_DEFAULTS[key]
    if isinstance(default, float):
        return isinstance(value, (int, float)) and np.float32(value) == np.float32(default)
    return value == default


def multimodal(config, out):
    """A Gemma3ForConditionalGeneration's config and tensors around a
    Gemma3ForCausalLM's."""
    outer = ("architectures", "model_type", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype")
    text = {k: v for k, v in config.items() if k not in outer and not is_default(k, v)}
    text["model_type"] = "gemma3_text"
    wrapped = {k: config[k] for k in outer if k in config}
    wrapped.update({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text,
                    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 8, "patch_size": 2},
                    "mm_tokens_per_image": 4})
    renamed = [("language_model." + name, w) for name, w in out]
    renamed += [("vision_tower.vision_model.embeddings.patch_embedding.weight", np.ones((8, 3, 2, 2), np.float32)),
                ("multi_modal_projector.mm_soft_emb_norm.weight", np.zeros(8, np.float32))]
    return wrapped, renamed


def varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, value):
    """One protobuf field: an int as a varint (negative ones as 10 bytes,
    as protobuf writes int32), bytes length-delimited, a float as fixed32."""
    if isinstance(value, float):
        return varint(number << 3 | 5) + struct.pack("<f", value)
    if isinstance(value, (bytes, str)):
        data = value.encode("utf-8") if isinstance(value, str) else value
        return varint(number << 3 | 2) + varint(len(data)) + data
    return varint(number << 3) + varint(value & (1 << 64) - 1 if value < 0 else value)


def sentencepiece_model(kv):
    """The bytes of a SentencePiece ModelProto (BPE) for the llama-type
    vocabulary of GGUF metadata kv: pieces = field 1 {1 piece, 2 score, 3
    type}, trainer_spec = field 2 {3 model_type, 35 byte_fallback, 40 unk_id,
    41 bos_id, 42 eos_id, 43 pad_id, 45..48 the unk, bos, eos, pad pieces},
    normalizer_spec = field 3 {1 name, 3
    add_dummy_prefix, 4 remove_extra_whitespaces, 5 escape_whitespaces}.
    GGUF does not record remove_extra_whitespaces: it is on where no piece
    holds two spaces, as run.c and SentencePiece's own models have it."""
    tokens, scores = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.scores"]
    types = kv["tokenizer.ggml.token_type"]
    out = bytearray()
    for piece, score, kind in zip(tokens, scores, types):
        out += field(1, field(1, piece) + field(2, float(score)) + field(3, kind))
    unk = kv.get("tokenizer.ggml.unknown_token_id", types.index(2) if 2 in types else 0)
    trainer = field(3, 2) + field(35, int(6 in types)) + field(40, unk)
    trainer += field(41, kv.get("tokenizer.ggml.bos_token_id", -1))
    trainer += field(42, kv.get("tokenizer.ggml.eos_token_id", -1))
    trainer += field(43, kv.get("tokenizer.ggml.padding_token_id", -1))
    # SentencePiece finds its special pieces by text (unk_piece ... pad_piece)
    for number, key in ((45, "unknown"), (46, "bos"), (47, "eos"), (48, "padding")):
        tid = unk if key == "unknown" else kv.get(f"tokenizer.ggml.{key}_token_id", -1)
        if 0 <= tid < len(tokens):
            trainer += field(number, tokens[tid])
    out += field(2, trainer)
    prefix = kv.get("tokenizer.ggml.add_space_prefix", True)
    # a vocabulary with no piece of two spaces was trained with runs of spaces made one
    squeeze = not any(kind in (1, 4) and "\u2581\u2581" in piece for piece, kind in zip(tokens, types))
    out += field(3, field(1, "identity") + field(3, int(prefix)) + field(4, int(squeeze)) + field(5, 1))
    return bytes(out)


def write_spm(kv, out_dir):
    """tokenizer.model and tokenizer_config.json of a llama-type vocabulary."""
    if kv.get("tokenizer.ggml.model") != "llama":
        sys.exit(f"gguf_to_hf.py: --spm: tokenizer.ggml.model is {kv.get('tokenizer.ggml.model')!r}, not llama")
    with open(os.path.join(out_dir, "tokenizer.model"), "wb") as f:
        f.write(sentencepiece_model(kv))
    tc = {"add_bos_token": kv.get("tokenizer.ggml.add_bos_token", True),
          "add_eos_token": kv.get("tokenizer.ggml.add_eos_token", False)}
    if "tokenizer.chat_template" in kv:
        tc["chat_template"] = kv["tokenizer.chat_template"]
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=2)
        f.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("gguf")
    parser.add_argument("out_dir")
    parser.add_argument("--untied", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON")
    parser.add_argument("--copy", action="append", default=[], metavar="FILE")
    parser.add_argument("--drop", action="append", default=[], metavar="TENSOR")
    parser.add_argument("--shorten", action="append", default=[], metavar="TENSOR")
    parser.add_argument("--spm", nargs="?", const="", metavar="VOCAB.gguf")
    parser.add_argument("--multimodal", action="store_true")
    args = parser.parse_args()

    kv, tensors = read_gguf(args.gguf)
    arch = kv.get("general.architecture")
    if arch not in ARCHITECTURES:
        parser.error(f"{args.gguf}: architecture {arch!r}, not {', '.join(ARCHITECTURES)}")
    out, vocab = hf_tensors(kv, tensors, arch, args.untied)
    untied = any(name == "lm_head.weight" for name, _ in out)
    config = hf_config(kv, arch, vocab, untied)
    if args.multimodal:  # --set, --drop and --shorten then name the outer keys and the language_model. tensors
        if arch != "gemma3":
            parser.error("--multimodal applies to gemma3 files")
        config, out = multimodal(config, out)
    for setting in args.set:
        key, _, value = setting.partition("=")
        config[key] = json.loads(value)
    names = {name for name, _ in out}
    for name in args.drop + args.shorten:
        if name not in names:
            parser.error(f"no tensor {name}")
    out = [(name, w[:-1] if name in args.shorten else w) for name, w in out if name not in args.drop]
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    for spec in args.copy:
        path, _, name = spec.partition(":")
        shutil.copy(path, os.path.join(args.out_dir, name or os.path.basename(path)))
    if args.spm is not None:
        write_spm(read_gguf(args.spm)[0] if args.spm else kv, args.out_dir)
    write_safetensors(os.path.join(args.out_dir, "model.safetensors"), out, "f32")


if __name__ == "__main__":
    main()
