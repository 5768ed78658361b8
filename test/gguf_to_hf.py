#!/usr/bin/env python3
"""gguf_to_hf.py: turn an all-F32 GGUF file of architecture qwen3 or qwen3moe
back into the Hugging Face directory it would have been converted from, as a
test fixture for export.py --hf.

    python3 test/gguf_to_hf.py IN.gguf OUT_DIR [--untied] [--set KEY=JSON]...
        [--copy FILE[:NAME]]... [--drop TENSOR]... [--shorten TENSOR]...

Writes OUT_DIR/config.json (Qwen3ForCausalLM or Qwen3MoeForCausalLM, sizes
from the file's keys) and model.safetensors with Hugging Face's names: q and
k as they are (Qwen3 uses NEOX RoPE, so the layouts agree), the 3-D expert
tensors split into one matrix per expert. --untied writes lm_head.weight (a
copy of the embeddings when the file has no output.weight); --set KEY=JSON
sets a config.json key; --copy puts a file into OUT_DIR (FILE:NAME under
another name); --drop leaves a tensor out and --shorten drops the last value
of a 1-D one (Hugging Face names), to make broken directories.
Needs numpy only.
"""

import argparse
import json
import os
import shutil
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
                out.append((f"model.layers.{layer}.{LAYER_NAMES[kind]}.weight", w))
    out.append(("model.norm.weight", tensors["output_norm.weight"]))
    if "output.weight" in tensors:
        out.append(("lm_head.weight", tensors["output.weight"].reshape(vocab, dim)))
    elif untied:
        out.append(("lm_head.weight", embed.copy()))
    return out, vocab


def hf_config(kv, arch, vocab, untied):
    config = {
        "architectures": ["Qwen3MoeForCausalLM" if arch == "qwen3moe" else "Qwen3ForCausalLM"],
        "model_type": "qwen3_moe" if arch == "qwen3moe" else "qwen3",
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
    if arch == "qwen3moe":
        config.update({"num_experts": kv[f"{arch}.expert_count"],
                       "num_experts_per_tok": kv[f"{arch}.expert_used_count"],
                       "moe_intermediate_size": kv[f"{arch}.expert_feed_forward_length"],
                       "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []})
    return config


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("gguf")
    parser.add_argument("out_dir")
    parser.add_argument("--untied", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON")
    parser.add_argument("--copy", action="append", default=[], metavar="FILE")
    parser.add_argument("--drop", action="append", default=[], metavar="TENSOR")
    parser.add_argument("--shorten", action="append", default=[], metavar="TENSOR")
    args = parser.parse_args()

    kv, tensors = read_gguf(args.gguf)
    arch = kv.get("general.architecture")
    if arch not in ("qwen3", "qwen3moe"):
        parser.error(f"{args.gguf}: architecture {arch!r}, not qwen3 or qwen3moe")
    out, vocab = hf_tensors(kv, tensors, arch, args.untied)
    untied = any(name == "lm_head.weight" for name, _ in out)
    config = hf_config(kv, arch, vocab, untied)
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
    write_safetensors(os.path.join(args.out_dir, "model.safetensors"), out, "f32")


if __name__ == "__main__":
    main()
