#!/usr/bin/env python3
"""make_hf.py: turn a llama2.c version 0 checkpoint into a Hugging Face Llama
directory, as a test fixture for export.py --hf.

    python3 test/make_hf.py IN_V0.bin OUT_DIR [--dtype f32|bf16] [--shards N] [--tied|--untied]
        [--arch llama|qwen2] [--biases-from FILE.gguf] [--set KEY=JSON]... [--copy FILE[:NAME]]... [--tokenizer-from FILE.gguf]

Writes OUT_DIR/config.json and model.safetensors (or, with --shards N > 1,
model-0000i-of-0000N.safetensors plus model.safetensors.index.json). For
--arch llama (the default) q_proj and k_proj are permuted exactly as Hugging
Face's convert_llama_weights_to_hf.py does (k_proj with num_key_value_heads).
--arch qwen2 writes a Qwen2ForCausalLM: the matrices as they are (llama.cpp
reads that layout with NEOX RoPE, so the same numbers are the same model)
and q/k/v biases, taken from the blk.N.attn_{q,k,v}.bias tensors of
--biases-from (a GGUF file of the same shape), else deterministic
pseudo-random ones. --tied (the default for a shared classifier) omits
lm_head.weight; --untied writes it, copying the embeddings if the checkpoint
has no separate classifier. bf16 rounds to nearest even. --set KEY=JSON sets
a config.json key (rope_theta=500000, rope_scaling={...}); --copy puts a
file (tokenizer.json, tokenizer_config.json, tokenizer.model) into OUT_DIR,
FILE:NAME under another name; --tokenizer-from writes the tokenizer.json and
tokenizer_config.json of a GGUF file's byte-level vocabulary.
Needs numpy only.
"""

import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np


def read_v0(path):
    """Header dict and {name: float32 array} of a llama2.c v0 checkpoint."""
    data = np.fromfile(path, dtype=np.uint8)
    dim, hidden, layers, heads, kv_heads, vocab, seq_len = struct.unpack("<7i", data[:28].tobytes())
    shared = vocab > 0
    vocab = abs(vocab)
    head_size = dim // heads
    kv_dim = kv_heads * head_size
    floats = data[28:].view("<f4")
    shapes = [
        ("embed", (vocab, dim)),
        ("rms_att", (layers, dim)),
        ("wq", (layers, dim, dim)),
        ("wk", (layers, kv_dim, dim)),
        ("wv", (layers, kv_dim, dim)),
        ("wo", (layers, dim, dim)),
        ("rms_ffn", (layers, dim)),
        ("w1", (layers, hidden, dim)),
        ("w2", (layers, dim, hidden)),
        ("w3", (layers, hidden, dim)),
        ("rms_final", (dim,)),
        ("rope_tables", (seq_len * head_size,)),
    ]
    if not shared:
        shapes.append(("wcls", (vocab, dim)))
    tensors, pos = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        tensors[name] = floats[pos:pos + n].reshape(shape)
        pos += n
    if pos != len(floats):
        sys.exit(f"{path}: size does not match its v0 header")
    header = dict(dim=dim, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads,
                  vocab=vocab, seq_len=seq_len, shared=shared)
    return header, tensors


def hf_permute(w, n_heads, dim1, dim2):
    """Hugging Face's convert_llama_weights_to_hf.py permute, literally:
    w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)."""
    return w.reshape(n_heads, dim1 // n_heads // 2, 2, dim2).swapaxes(1, 2).reshape(dim1, dim2)


def read_gguf(path):
    """({key: value}, {tensor name: float32 array of the F32 tensors}) of a
    GGUF file; arrays come back as lists."""
    data = np.fromfile(path, dtype=np.uint8)
    pos = 24
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    scalars = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def string():
        nonlocal pos
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + n
        return data[pos - n:pos].tobytes().decode("utf-8")

    def value(kind):
        nonlocal pos
        if kind == 8:
            return string()
        if kind == 9:
            elem, count = struct.unpack_from("<IQ", data, pos)
            pos += 12
            return [value(elem) for _ in range(count)]
        (v,) = struct.unpack_from("<" + scalars[kind], data, pos)
        pos += struct.calcsize("<" + scalars[kind])
        return v

    kv = {}
    for _ in range(n_kv):
        key = string()
        (kind,) = struct.unpack_from("<I", data, pos)
        pos += 4
        kv[key] = value(kind)
    infos = []
    for _ in range(n_tensors):
        name = string()
        (n_dims,) = struct.unpack_from("<I", data, pos)
        dims = struct.unpack_from(f"<{n_dims}Q", data, pos + 4)
        kind, offset = struct.unpack_from("<IQ", data, pos + 4 + 8 * n_dims)
        pos += 4 + 8 * n_dims + 12
        infos.append((name, dims, kind, offset))
    alignment = kv.get("general.alignment", 32)
    start = -(-pos // alignment) * alignment
    tensors = {}
    for name, dims, kind, offset in infos:
        if kind == 0:
            n = int(np.prod(dims))
            tensors[name] = data[start + offset:start + offset + 4 * n].view("<f4").copy()
    return kv, tensors


# Hugging Face's pre-tokenizers for the tokenizer.ggml.pre values of --tokenizer-from.
SPLITS = {
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+",
}


def write_tokenizer_from(path, out_dir):
    """tokenizer.json and tokenizer_config.json as Hugging Face ships them
    for the gpt2 vocabulary of a GGUF file: normal tokens in model.vocab,
    control (special) and user-defined ones in added_tokens, the merges, the
    pre-tokenizer of its tokenizer.ggml.pre (Qwen2 with Qwen2.5's NFC
    normalizer), BOS added by the post-processor when add_bos_token says so."""
    kv, _ = read_gguf(path)
    tokens, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
    pre = kv["tokenizer.ggml.pre"]
    bos, eos = kv.get("tokenizer.ggml.bos_token_id"), kv.get("tokenizer.ggml.eos_token_id")
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": types[i] == 3} for i, t in enumerate(tokens) if types[i] in (3, 4)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    post = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    if kv.get("tokenizer.ggml.add_bos_token") and bos is not None:
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": tokens[bos], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [], "special_tokens": {tokens[bos]: {"id": tokens[bos], "ids": [bos], "tokens": [tokens[bos]]}}}
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"} if pre == "qwen2" else None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLITS[pre]}, "behavior": "Isolated", "invert": False}, byte_level]},
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": pre != "qwen2",
                  "vocab": {t: i for i, t in enumerate(tokens) if types[i] == 1},
                  "merges": kv["tokenizer.ggml.merges"]},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    config = {"bos_token": tokens[bos] if bos is not None else None,
              "eos_token": tokens[eos] if eos is not None else None,
              "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast"}
    if "tokenizer.chat_template" in kv:
        config["chat_template"] = kv["tokenizer.chat_template"]
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)


def make_biases(h, biases_from):
    """{(layer, "q"|"k"|"v"): float32 bias} for --arch qwen2."""
    head_size = h["dim"] // h["heads"]
    rows = {"q": h["dim"], "k": h["kv_heads"] * head_size, "v": h["kv_heads"] * head_size}
    found = read_gguf(biases_from)[1] if biases_from else {}
    rng = np.random.default_rng(5)
    out = {}
    for l in range(h["layers"]):
        for x, n in rows.items():
            b = found.get(f"blk.{l}.attn_{x}.bias")
            if biases_from and (b is None or b.shape != (n,)):
                sys.exit(f"{biases_from}: no F32 blk.{l}.attn_{x}.bias of {n} values")
            out[l, x] = b if b is not None else rng.uniform(-1, 1, n).astype(np.float32)
    return out


def hf_tensors(h, t, untied, arch="llama", biases=None):
    """(Hugging Face name, float32 array) in the order Hugging Face lists them."""
    head_size = h["dim"] // h["heads"]
    out = [("model.embed_tokens.weight", t["embed"])]
    for l in range(h["layers"]):
        p = f"model.layers.{l}."
        if arch == "llama":
            wq = hf_permute(t["wq"][l], h["heads"], h["dim"], h["dim"])
            wk = hf_permute(t["wk"][l], h["kv_heads"], h["kv_heads"] * head_size, h["dim"])
        else:
            wq, wk = t["wq"][l], t["wk"][l]
        out += [
            (p + "self_attn.q_proj.weight", wq),
            (p + "self_attn.k_proj.weight", wk),
            (p + "self_attn.v_proj.weight", t["wv"][l]),
            (p + "self_attn.o_proj.weight", t["wo"][l]),
            (p + "mlp.gate_proj.weight", t["w1"][l]),
            (p + "mlp.down_proj.weight", t["w2"][l]),
            (p + "mlp.up_proj.weight", t["w3"][l]),
            (p + "input_layernorm.weight", t["rms_att"][l]),
            (p + "post_attention_layernorm.weight", t["rms_ffn"][l]),
        ]
        if biases:
            out += [(p + f"self_attn.{x}_proj.bias", biases[l, x]) for x in "qkv"]
    out.append(("model.norm.weight", t["rms_final"]))
    if untied:
        out.append(("lm_head.weight", t["embed"] if h["shared"] else t["wcls"]))
    return out


def to_bf16(w):
    """float32 -> bfloat16 bits (uint16), rounding to nearest even."""
    bits = np.ascontiguousarray(w, dtype="<f4").view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2")


def write_safetensors(path, tensors, dtype):
    """Writes [(name, float32 array)] as one safetensors file; returns its data size."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, w in tensors:
        raw = to_bf16(w) if dtype == "bf16" else np.ascontiguousarray(w, dtype="<f4")
        blob = raw.tobytes()
        header[name] = {"dtype": dtype.upper(), "shape": list(w.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    return offset


def write_config(out_dir, h, untied, dtype, arch="llama", overrides=()):
    config = {
        "architectures": ["Qwen2ForCausalLM" if arch == "qwen2" else "LlamaForCausalLM"],
        "model_type": arch,
        "hidden_size": h["dim"],
        "intermediate_size": h["hidden"],
        "num_hidden_layers": h["layers"],
        "num_attention_heads": h["heads"],
        "num_key_value_heads": h["kv_heads"],
        "vocab_size": h["vocab"],
        "max_position_embeddings": h["seq_len"],
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": not untied,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16" if dtype == "bf16" else "float32",
    }
    for setting in overrides:
        key, _, value = setting.partition("=")
        config[key] = json.loads(value)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("out_dir")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--shards", type=int, default=1)
    tie = parser.add_mutually_exclusive_group()
    tie.add_argument("--tied", dest="untied", action="store_false", default=None)
    tie.add_argument("--untied", dest="untied", action="store_true")
    parser.add_argument("--arch", choices=["llama", "qwen2"], default="llama")
    parser.add_argument("--biases-from", metavar="FILE.gguf")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON")
    parser.add_argument("--copy", action="append", default=[], metavar="FILE")
    parser.add_argument("--tokenizer-from", metavar="FILE.gguf")
    args = parser.parse_args()

    h, t = read_v0(args.checkpoint)
    untied = (not h["shared"]) if args.untied is None else args.untied
    if not untied and not h["shared"]:
        parser.error("--tied: this checkpoint has a separate classifier")
    biases = make_biases(h, args.biases_from) if args.arch == "qwen2" else None
    tensors = hf_tensors(h, t, untied, args.arch, biases)
    if not 1 <= args.shards <= len(tensors):
        parser.error(f"--shards must be in 1..{len(tensors)}")
    os.makedirs(args.out_dir, exist_ok=True)
    write_config(args.out_dir, h, untied, args.dtype, args.arch, args.set)
    if args.tokenizer_from:
        write_tokenizer_from(args.tokenizer_from, args.out_dir)
    for spec in args.copy:
        path, _, name = spec.partition(":")
        shutil.copy(path, os.path.join(args.out_dir, name or os.path.basename(path)))
    if args.shards == 1:
        write_safetensors(os.path.join(args.out_dir, "model.safetensors"), tensors, args.dtype)
        return
    weight_map, total, n = {}, 0, args.shards
    for i in range(n):
        part = tensors[i * len(tensors) // n:(i + 1) * len(tensors) // n]
        name = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        total += write_safetensors(os.path.join(args.out_dir, name), part, args.dtype)
        weight_map.update({tensor_name: name for tensor_name, _ in part})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(args.out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
