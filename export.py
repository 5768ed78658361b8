#!/usr/bin/env python3
"""export.py: convert Llama-family checkpoints and tokenizers for run.c.

Checkpoints, written in run.c's checkpoint format version 1 (README.md), or
for Hugging Face models that format cannot hold, as GGUF (see below):

    python3 export.py OUT.bin --hf DIR       [--seq-len N] [--dtype T] [--gguf]
    python3 export.py OUT.bin --meta DIR     [--seq-len N] [--dtype T]
    python3 export.py OUT.bin --llama2c FILE [--seq-len N] [--dtype T]

  --hf DIR       a Hugging Face Llama, Qwen2, Qwen3, Qwen3-MoE or Gemma 3 directory:
                 config.json and model.safetensors, sharded
                 model-*-of-*.safetensors (with
                 model.safetensors.index.json), or pytorch_model*.bin (needs
                 torch). Safetensors may hold F32, F16 or BF16 tensors.
  --meta DIR     Meta's params.json and consolidated.*.pth (needs torch).
  --llama2c FILE a llama2.c checkpoint, version 0, 1 or 2 (Q8_0, dequantized).
  --seq-len N    cap the context length stored in the header.
  --dtype T      weight type of the matrices: f32 (default), f16, q8_0, q4_0,
                 q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl,
                 iq4_xs, or one of llama-quantize's mixes q2_k_mix (its
                 Q2_K), q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s,
                 q5_k_m (written as run.c format version 2): GGUF's blocks,
                 rounded as run.c and llama-quantize round, byte for byte as
                 ./run -m quantize writes them; norms stay f32.
  --gguf         with --hf: write GGUF whatever the model.

  --hf writes GGUF version 3, tokenizer included, when the directory's
  tokenizer.json is byte-level BPE (Llama 3.x, Qwen2.5, SmolLM2), or its
  config has rope_scaling (llama3 or linear), attention biases or
  model_type qwen2, qwen3 (GGUF qwen3: head_dim of its own, q/k norms),
  qwen3_moe (GGUF qwen3moe: experts stacked into 3-D tensors; refused
  unless norm_topk_prob is true, as llama.cpp and run.c renormalize the
  top-k weights) or gemma3_text (GGUF gemma3: norms stored as 1 + w,
  post-norms, the local layers' window and RoPE base; of Gemma 3 4B/12B/27B,
  Gemma3ForConditionalGeneration, the language model, without the vision
  tower): the file
  llama.cpp's convert_hf_to_gguf.py writes for the same directory (keys,
  tensor names and layouts, rope_freqs values).

Tokenizers, written in llama2.c's tokenizer.bin format:

    python3 export.py --tokenizer tokenizer.model OUT.bin
    python3 export.py --tokenizer tokenizer.json OUT.bin

  A SentencePiece BPE model (read with a small protobuf reader of our own),
  or a Hugging Face tokenizer.json of the SentencePiece-BPE kind (BPE with
  byte_fallback and "▁" pieces). tokenizer.json has no scores: a piece made
  by a merge gets score -(rank of the first merge that makes it), so that
  merging by highest score, as run.c and SentencePiece do, applies the merges
  in the file's order; single characters, byte pieces and special tokens get
  0 (they are never the result of a merge), and a multi-character piece that
  no merge makes gets -1e9. Hugging Face's converter lists the merges in
  SentencePiece's score order, so this gives back SentencePiece's merge order.

Anything that cannot be converted faithfully is refused with one line
"FILE: problem" and exit status 1 (usage errors: 2). The output is written to
a temporary file beside it and renamed into place only when complete.

Needs numpy; torch only for .pth / pytorch_model*.bin pickles.
"""

import argparse
import contextlib
import glob
import json
import os
import re
import signal
import stat
import struct
import sys
import tempfile

try:
    import numpy as np
except ImportError:  # -h works without it; any work says so in one line (main)
    np = None
NO_NUMPY = ("export.py: needs numpy, which this python3 (%s) does not have: install it "
            "(Debian/Ubuntu: apt-get install python3-numpy, then run /usr/bin/python3 export.py ...; "
            "elsewhere: pip install numpy)" % sys.executable)

RUNC_MAGIC = 0x434E5552  # the bytes "RUNC"
RUNC_VERSION = 1
RUNC_VERSION_TYPES = 2  # a mix: a table of each matrix's type follows the header
RUNC_HEADER_SIZE = 256
RUNC_ALIGN = 64
LLAMA2C_MAGIC = 0x616B3432  # "ak42"

# Output weight types: --dtype name -> GGML type id in the header (None: a mix,
# whose matrices each have their own type).
WEIGHT_TYPES = {"f32": 0, "f16": 1, "q8_0": 8, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q2_k": 10, "q3_k": 11,
                "q4_k": 12, "q5_k": 13, "q6_k": 14, "iq4_nl": 20, "iq4_xs": 23,
                "q2_k_mix": None, "q3_k_s": None, "q3_k_m": None, "q3_k_l": None,
                "q4_k_m": None, "q5_k_m": None, "q4_k_s": None, "q5_k_s": None}
# The mixes (llama-quantize's, as run.c's matrix_dtype): --dtype -> base type.
MIXES = {"q2_k_mix": "q2_k", "q3_k_s": "q3_k", "q3_k_m": "q3_k", "q3_k_l": "q3_k",
         "q4_k_m": "q4_k", "q5_k_m": "q5_k", "q4_k_s": "q4_k", "q5_k_s": "q5_k"}
QK = 32  # values per Q8_0 / Q4_0 block

# The largest sizes run.c accepts (run.c's MAX_* limits).
MAX_DIM, MAX_HIDDEN, MAX_LAYERS = 1 << 16, 1 << 20, 1 << 12
MAX_VOCAB, MAX_SEQ_LEN = 1 << 24, 1 << 24
MAX_EXPERTS = 256


class ExportError(Exception):
    """A refusal: its message is one line, "FILE: problem"."""


# ---------------------------------------------------------------------------
# Model description and the run.c writer

class Config:
    """The header fields of a run.c checkpoint."""

    def __init__(self, dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len,
                 rope_theta=10000.0, norm_eps=1e-5, shared_classifier=True, bos_id=1, eos_id=2, head_dim=None):
        self.dim, self.hidden_dim, self.n_layers = dim, hidden_dim, n_layers
        self.head_dim = head_dim  # set only where it need not be dim / n_heads (Qwen3)
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.vocab_size, self.seq_len = vocab_size, seq_len
        self.rope_theta, self.norm_eps = rope_theta, norm_eps
        self.shared_classifier = bool(shared_classifier)
        self.bos_id, self.eos_id = bos_id, eos_id

    @property
    def head_size(self):
        return self.head_dim or self.dim // self.n_heads

    def describe(self):
        return (f"dim {self.dim}, hidden_dim {self.hidden_dim}, {self.n_layers} layers, "
                f"{self.n_heads} heads, {self.n_kv_heads} kv heads, vocab {self.vocab_size}, "
                f"seq_len {self.seq_len}, rope_theta {self.rope_theta:g}, eps {self.norm_eps:g}, "
                f"{'shared' if self.shared_classifier else 'separate'} classifier")


def check_config(c, where):
    """Refuses a configuration that run.c would refuse (see its check_config)."""
    sizes = [c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len]
    if not all(isinstance(v, int) and v > 0 for v in sizes):
        raise ExportError(f"{where}: sizes must be positive whole numbers ({c.describe()}); "
                          "not a checkpoint of this kind?")
    if (c.dim > MAX_DIM or c.hidden_dim > MAX_HIDDEN or c.n_layers > MAX_LAYERS
            or c.vocab_size > MAX_VOCAB or c.seq_len > MAX_SEQ_LEN):
        raise ExportError(f"{where}: sizes beyond run.c's limits ({c.describe()})")
    if (c.head_dim is None and c.dim % c.n_heads) or c.n_heads % c.n_kv_heads:
        raise ExportError(f"{where}: dim {c.dim}, n_heads {c.n_heads}, n_kv_heads {c.n_kv_heads} "
                          "do not divide evenly")
    if c.head_size % 2:
        raise ExportError(f"{where}: head size {c.head_size} is odd; RoPE rotates pairs")
    if not (np.isfinite(c.rope_theta) and c.rope_theta > 0):
        raise ExportError(f"{where}: rope_theta {c.rope_theta} is not a positive number")
    if not 0 < c.norm_eps < 1:
        raise ExportError(f"{where}: rms_norm_eps {c.norm_eps} is not in (0, 1)")
    for name, v in (("BOS", c.bos_id), ("EOS", c.eos_id)):
        if not isinstance(v, int) or not 0 <= v < c.vocab_size:
            raise ExportError(f"{where}: {name} id {v} is outside the vocabulary of {c.vocab_size}")


def runc_header(c, weight_type, version=RUNC_VERSION):
    fields = struct.pack("<IiiiiiiiiiffiiiI", RUNC_MAGIC, version, c.dim, c.hidden_dim,
                         c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len,
                         c.head_size, c.rope_theta, c.norm_eps, int(c.shared_classifier),
                         c.bos_id, c.eos_id, weight_type)
    return fields + bytes(RUNC_HEADER_SIZE - len(fields))


def runc_tensors(c):
    """(kind, per_layer, shape of one layer's tensor) in file order."""
    q_dim, kv_dim = c.n_heads * c.head_size, c.n_kv_heads * c.head_size
    tensors = [
        ("rms_att", True, (c.dim,)),
        ("rms_ffn", True, (c.dim,)),
        ("rms_final", False, (c.dim,)),
        ("token_embedding", False, (c.vocab_size, c.dim)),
        ("wq", True, (q_dim, c.dim)),
        ("wk", True, (kv_dim, c.dim)),
        ("wv", True, (kv_dim, c.dim)),
        ("wo", True, (c.dim, q_dim)),
        ("w1", True, (c.hidden_dim, c.dim)),
        ("w2", True, (c.dim, c.hidden_dim)),
        ("w3", True, (c.hidden_dim, c.dim)),
    ]
    if not c.shared_classifier:
        tensors.append(("wcls", False, (c.vocab_size, c.dim)))
    return tensors


def inverse_scales(d):
    """1/d, and 0 where d is 0 or 1/d overflows (such a block quantizes to 0)."""
    with np.errstate(divide="ignore", over="ignore"):
        inv = np.float32(1) / d
    inv[~np.isfinite(inv)] = 0
    return inv.astype(np.float32)


def quantize_blocks(array, dtype):
    """The rows of a matrix as Q8_0 or Q4_0 blocks, each row padded with zeros
    to a whole number of blocks, rounded exactly as run.c's quantize_row (and
    GGUF): Q8_0: d = max|x| / 127, q = round(x / d), halves away from zero;
    Q4_0: d = (the value of largest magnitude) / -8, q = int(x / d + 8.5)
    clamped to 0..15, low nibbles values 0..15 and high ones 16..31."""
    rows, cols = array.shape
    n_blocks = -(-cols // QK)
    x = np.zeros((rows, n_blocks * QK), dtype=np.float32)
    x[:, :cols] = array
    x = x.reshape(rows, n_blocks, QK)
    if dtype == "q8_0":
        d = (np.abs(x).max(axis=2) / np.float32(127)).astype(np.float32)
        y = (x * inverse_scales(d)[:, :, None]).astype(np.float64)  # exact, so +0.5 below is too
        q = np.clip(np.trunc(y + np.copysign(0.5, y)), -128, 127).astype(np.int8)
        blocks = np.empty((rows, n_blocks), dtype=[("d", "<f2"), ("q", "i1", QK)])
        blocks["q"] = q
    else:
        first_max = np.abs(x).argmax(axis=2)[:, :, None]
        d = (np.take_along_axis(x, first_max, axis=2)[:, :, 0] / np.float32(-8)).astype(np.float32)
        y = (x * inverse_scales(d)[:, :, None]).astype(np.float32) + np.float32(8.5)  # float32, as in C
        q = np.clip(np.trunc(y), 0, 15).astype(np.uint8)
        blocks = np.empty((rows, n_blocks), dtype=[("d", "<f2"), ("q", "u1", QK // 2)])
        blocks["q"] = q[:, :, :QK // 2] | (q[:, :, QK // 2:] << 4)
    blocks["d"] = d.astype(np.float16)
    return blocks.tobytes()


def encode_tensor(array, kind, dtype):
    """The bytes (a buffer) of one tensor: norms always F32, the rest in dtype."""
    if dtype == "f32" or kind.startswith("rms_"):
        return np.ascontiguousarray(array, dtype="<f4").ravel().data
    if dtype == "f16":
        return np.ascontiguousarray(array, dtype="<f2").ravel().data
    x = np.asarray(array, dtype=np.float32)
    quantizers = {"q2_k": quantize_q2_k, "q3_k": quantize_q3_k, "q4_k": quantize_q4_k, "q5_k": quantize_q5_k,
                  "q6_k": quantize_q6_k, "q5_0": quantize_q5_0, "q5_1": quantize_q5_1, "q4_1": quantize_q4_1,
                  "iq4_nl": quantize_iq4_nl, "iq4_xs": quantize_iq4_xs}
    if dtype in quantizers:  # rows padded with zeros to whole blocks, as run.c pads
        block = QK if dtype in ("q5_0", "q5_1", "q4_1", "iq4_nl") else QK_K
        padded = np.zeros((x.shape[0], -(-x.shape[1] // block) * block), dtype=np.float32)
        padded[:, :x.shape[1]] = x
        return quantizers[dtype](padded)
    return quantize_blocks(x, dtype)


def matrix_types(c, dtype):
    """Each matrix's type in file order (RUNC version 2's table order)."""
    types = []
    for kind, per_layer, shape in runc_tensors(c):
        if not kind.startswith("rms_"):
            for layer in range(c.n_layers) if per_layer else [0]:
                types.append(mix_type(c, dtype, kind, layer, shape[1]) if dtype in MIXES else dtype)
    return types


def write_runc(out_path, source, dtype, inputs):
    """Writes source (a model reader, see HFModel) as a run.c checkpoint:
    version 1 when every matrix has one type, version 2 (with its table of
    types) for a mix."""
    c = source.config
    check_config(c, source.path)
    types = matrix_types(c, dtype)
    mixed = len(set(types)) > 1
    with atomic_output(out_path, inputs) as f:
        if mixed:
            f.write(runc_header(c, WEIGHT_TYPES[MIXES[dtype]], RUNC_VERSION_TYPES))
            f.write(struct.pack(f"<{len(types)}i", *(WEIGHT_TYPES[t] for t in types)))
        else:
            f.write(runc_header(c, WEIGHT_TYPES[types[0]]))
        order = iter(types)
        for kind, per_layer, shape in runc_tensors(c):
            f.write(bytes(-f.tell() % RUNC_ALIGN))
            for layer in range(c.n_layers) if per_layer else [None]:
                array = source.tensor(kind, layer)
                where = source.where(kind, layer)
                if tuple(array.shape) != shape:
                    raise ExportError(f"{where} has shape {tuple(array.shape)}, expected {shape}")
                if not np.isfinite(array).all():
                    raise ExportError(f"{where} holds NaN or infinite values")
                f.write(encode_tensor(array, kind, "f32" if kind.startswith("rms_") else next(order)))
                del array


# ---------------------------------------------------------------------------
# K-quants (Q2_K to Q6_K), the 32-value types and IQ4, and the mixes,
# rounded exactly as run.c's quantize_* (and llama-quantize without an
# importance matrix). Every float operation is a float32 one in C's order:
# sums run over the values one at a time (vectorized across sub-blocks
# only), and a * b + c is rounded twice, as C without FP contraction does.

F32 = np.float32 if np else None  # (None: no numpy; main stops before any use)
QK_K = 256
GROUP_MAX_EPS = F32(1e-15) if np else None


def nearest_int(v):
    """ggml's nearest_int: adding 1.5 * 2^23 rounds half to even into the low bits."""
    shifted = (np.asarray(v, dtype=F32) + F32(12582912.0)).astype(F32)
    return (shifted.view(np.int32) & 0x7FFFFF) - 0x400000


def f16_round(v):
    """A float32 rounded to fp16 and back, as the stored scales are read."""
    return np.asarray(v, dtype=F32).astype(np.float16).astype(F32)


def first_largest(x):
    """(the value of largest magnitude, first one on ties; its magnitude), per row."""
    i = np.abs(x).argmax(axis=1)
    v = x[np.arange(len(x)), i]
    return v, np.abs(v)


def fit_scale_min(x, w, nmax, rmin, rdelta, nstep, use_mad=False):
    """run.c's fit_scale_min for rows of x: (scale, min, L); the weighted
    error is the absolute one with use_mad, else the squared one."""
    n = x.shape[1]
    mn, mx, sum_w = x[:, 0].copy(), x[:, 0].copy(), w[:, 0].copy()
    sum_x = (sum_w * x[:, 0]).astype(F32)
    for i in range(1, n):
        mn = np.where(x[:, i] < mn, x[:, i], mn)
        mx = np.where(x[:, i] > mx, x[:, i], mx)
        sum_w = sum_w + w[:, i]
        sum_x = sum_x + w[:, i] * x[:, i]
    mn = np.where(mn > 0, F32(0), mn).astype(F32)
    flat, mn0 = mx == mn, mn.copy()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rng = (mx - mn).astype(F32)
        iscale = (F32(nmax) / rng).astype(F32)
        scale = (F32(1) / iscale).astype(F32)
        L = np.clip(nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
        best = np.zeros(len(x), dtype=F32)
        for i in range(n):
            diff = scale * L[:, i].astype(F32) + mn - x[:, i]
            best = best + w[:, i] * (np.abs(diff) if use_mad else diff * diff)
        for step in range(nstep + 1):
            # min (and so the range) is the best fit's so far, as in C
            iscale = ((F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)) / (mx - mn)).astype(F32)
            trial = np.clip(nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
            sum_l = np.zeros(len(x), dtype=F32)
            sum_l2, sum_xl = sum_l.copy(), sum_l.copy()
            for i in range(n):
                wl = w[:, i] * trial[:, i].astype(F32)
                sum_l = sum_l + wl
                sum_l2 = sum_l2 + wl * trial[:, i].astype(F32)
                sum_xl = sum_xl + wl * x[:, i]
            det = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
            refit = this_min > 0
            this_scale = np.where(refit, sum_xl / sum_l2, this_scale).astype(F32)
            this_min = np.where(refit, F32(0), this_min).astype(F32)
            err = np.zeros(len(x), dtype=F32)
            for i in range(n):
                diff = this_scale * trial[:, i].astype(F32) + this_min - x[:, i]
                err = err + w[:, i] * (np.abs(diff) if use_mad else diff * diff)
            take = (det > 0) & (err < best)
            L = np.where(take[:, None], trial, L)
            best = np.where(take, err, best)
            scale = np.where(take, this_scale, scale)
            mn = np.where(take, this_min, mn)
    scale = np.where(flat, F32(0), scale).astype(F32)
    L = np.where(flat[:, None], 0, L)
    return scale, (-np.where(flat, mn0, mn)).astype(F32), L


def k4_scale_min(scales, j):
    """Q4_K's 6-bit scale and min of sub-block j from the 12 packed bytes (columns)."""
    if j < 4:
        return scales[:, j] & 63, scales[:, j + 4] & 63
    return ((scales[:, j + 4] & 0xF) | (scales[:, j - 4] >> 6) << 4,
            (scales[:, j + 4] >> 4) | (scales[:, j] >> 6) << 4)


def k4_blocks(x, nmax, rmin, nstep):
    """Rows of whole super-blocks -> (d, dmin, packed scales, L (nb, 8, 32)) of
    Q4_K (nmax 15) or Q5_K (nmax 31), as run.c's quantize_k4_block."""
    nb = x.shape[0] * x.shape[1] // QK_K
    sub = x.reshape(nb * 8, 32)
    sum_x2 = np.zeros(len(sub), dtype=F32)
    for i in range(32):
        sum_x2 = sum_x2 + sub[:, i] * sub[:, i]
    av_x = np.sqrt(sum_x2 / F32(32)).astype(F32)
    w = (av_x[:, None] + np.abs(sub)).astype(F32)
    scales, mins, L = fit_scale_min(sub, w, nmax, rmin, 0.1, nstep)
    scales, mins, L = scales.reshape(nb, 8), mins.reshape(nb, 8), L.reshape(nb, 8, 32)
    max_scale = np.maximum(scales.max(axis=1), F32(0))
    max_min = np.maximum(mins.max(axis=1), F32(0))
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, F32(63) / max_scale, F32(0)).astype(F32)
        inv_min = np.where(max_min > 0, F32(63) / max_min, F32(0)).astype(F32)
    ls = np.minimum(nearest_int(inv_scale[:, None] * scales) & 0xFF, 63).astype(np.uint8)
    lm = np.minimum(nearest_int(inv_min[:, None] * mins) & 0xFF, 63).astype(np.uint8)
    packed = np.zeros((nb, 12), dtype=np.uint8)
    packed[:, 0:4], packed[:, 4:8] = ls[:, 0:4], lm[:, 0:4]
    packed[:, 8:12] = (ls[:, 4:8] & 0xF) | (lm[:, 4:8] & 0xF) << 4
    packed[:, 0:4] |= (ls[:, 4:8] >> 4) << 6
    packed[:, 4:8] |= (lm[:, 4:8] >> 4) << 6
    d = (max_scale / F32(63)).astype(np.float16)
    dmin = (max_min / F32(63)).astype(np.float16)
    xb = x.reshape(nb, 8, 32)
    with np.errstate(divide="ignore", invalid="ignore"):
        for j in range(8):
            sc, m = k4_scale_min(packed, j)
            dj = (d.astype(F32) * sc.astype(F32)).astype(F32)
            dm = (dmin.astype(F32) * m.astype(F32)).astype(F32)
            new = np.clip(nearest_int((xb[:, j] + dm[:, None]) / dj[:, None]), 0, nmax)
            L[:, j] = np.where((dj != 0)[:, None], new, L[:, j])
    return d, dmin, packed, L


def pack_2bit(L):
    """run.c's pack_2bit: (nb, 256) levels -> (nb, 64) bytes, value 128 h + 32 s + l
    in bits 2 s of byte 32 h + l."""
    L = (L.reshape(len(L), 2, 4, 32) & 3).astype(np.uint8)
    return (L[:, :, 0] | L[:, :, 1] << 2 | L[:, :, 2] << 4 | L[:, :, 3] << 6).reshape(len(L), 64)


def quantize_q2_k(x):
    """Rows of whole super-blocks -> Q2_K blocks (bytes), as run.c's quantize_q2_k:
    sub-blocks of 16 fitted with scale and min (weights |x|, least absolute
    error), both kept to 4 bits against d = max scale / 15, dmin = max min / 15."""
    nb = x.shape[0] * x.shape[1] // QK_K
    sub = x.reshape(nb * 16, 16)
    scales, mins, L = fit_scale_min(sub, np.abs(sub), 3, -0.5, 0.1, 15, use_mad=True)
    scales, mins, L = scales.reshape(nb, 16), mins.reshape(nb, 16), L.reshape(nb, 16, 16)
    max_scale = np.maximum(scales.max(axis=1), F32(0))
    max_min = np.maximum(mins.max(axis=1), F32(0))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv_scale = np.where(max_scale > 0, F32(15) / max_scale, F32(0)).astype(F32)
        inv_min = np.where(max_min > 0, F32(15) / max_min, F32(0)).astype(F32)
        # C: (uint8_t)nearest_int(..), and the min's (unsigned) << 4 cast to a byte
        sc = np.where((max_scale > 0)[:, None], nearest_int(inv_scale[:, None] * scales) & 0xFF, 0)
        sc |= np.where((max_min > 0)[:, None], (nearest_int(inv_min[:, None] * mins) << 4) & 0xFF, 0)
        d = np.where(max_scale > 0, max_scale / F32(15), F32(0)).astype(np.float16)
        dmin = np.where(max_min > 0, max_min / F32(15), F32(0)).astype(np.float16)
        xb = x.reshape(nb, 16, 16)
        for j in range(16):
            dj = (d.astype(F32) * (sc[:, j] & 0xF).astype(F32)).astype(F32)
            dm = (dmin.astype(F32) * (sc[:, j] >> 4).astype(F32)).astype(F32)
            new = np.clip(nearest_int((xb[:, j] + dm[:, None]) / dj[:, None]), 0, 3)
            L[:, j] = np.where((dj != 0)[:, None], new, L[:, j])
    blocks = np.empty(nb, dtype=[("scales", "u1", 16), ("qs", "u1", 64), ("d", "<f2"), ("dmin", "<f2")])
    blocks["scales"], blocks["qs"] = sc.astype(np.uint8), pack_2bit(L.reshape(nb, QK_K))
    blocks["d"], blocks["dmin"] = d, dmin
    return blocks.tobytes()


def fit_scale_q3(x, nmax):
    """run.c's fit_scale_q3 (ggml's make_q3_quants with do_rmse) for rows of x:
    (scale, L in 0..2 nmax - 1; rows below GROUP_MAX_EPS: 0 and L 0). Every
    row takes all five passes: a pass that changes nothing leaves the next
    one nothing to change, so this is C's early stop."""
    n = x.shape[1]
    mx, amax = first_largest(x)
    zero = amax < GROUP_MAX_EPS
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        L = np.clip(nearest_int((F32(-nmax) / mx).astype(F32)[:, None] * x), -nmax, nmax - 1)
        sum_lx = np.zeros(len(x), dtype=F32)
        sum_l2 = sum_lx.copy()
        for i in range(n):
            w, lf = x[:, i] * x[:, i], L[:, i].astype(F32)
            sum_lx = sum_lx + w * x[:, i] * lf
            sum_l2 = sum_l2 + w * lf * lf
        for _ in range(5):
            for i in range(n):
                w, lf = x[:, i] * x[:, i], L[:, i].astype(F32)
                slx = sum_lx - w * x[:, i] * lf
                sl2 = sum_l2 - w * lf * lf
                l = np.clip(nearest_int(x[:, i] * sl2 / slx), -nmax, nmax - 1)
                lf = l.astype(F32)
                new_lx = slx + w * x[:, i] * lf
                new_l2 = sl2 + w * lf * lf
                take = ((slx > 0) & (l != L[:, i]) & (new_l2 > 0)
                        & (new_lx * new_lx * sum_l2 > sum_lx * sum_lx * new_l2))
                L[:, i] = np.where(take, l, L[:, i])
                sum_lx = np.where(take, new_lx, sum_lx).astype(F32)
                sum_l2 = np.where(take, new_l2, sum_l2).astype(F32)
        scale = (sum_lx / sum_l2).astype(F32)
    return np.where(zero, F32(0), scale).astype(F32), np.where(zero[:, None], 0, L + nmax)


def quantize_q3_k(x):
    """Rows of whole super-blocks -> Q3_K blocks (bytes), as run.c's quantize_q3_k:
    sub-blocks of 16 fitted by fit_scale_q3, their scales kept to 6 bits
    (-32..31) against d = -(the scale of largest magnitude) / 32."""
    nb = x.shape[0] * x.shape[1] // QK_K
    scales, L = fit_scale_q3(x.reshape(nb * 16, 16), 4)
    scales, L = scales.reshape(nb, 16), L.reshape(nb, 16, 16)
    max_scale, _ = first_largest(scales)
    some = max_scale != 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (F32(-32) / max_scale).astype(F32)
        # C: clamp_int((int8_t)nearest_int(..), -32, 31) + 32; 0 where every scale is 0
        sc = np.where(some[:, None], np.clip(nearest_int(iscale[:, None] * scales).astype(np.int8), -32, 31) + 32, 0)
        sc = sc.astype(np.int32)
        d = np.where(some, F32(1) / iscale, F32(0)).astype(np.float16)
        xb = x.reshape(nb, 16, 16)
        for j in range(16):
            dj = (d.astype(F32) * (sc[:, j] - 32).astype(F32)).astype(F32)
            new = np.clip(nearest_int(xb[:, j] / dj[:, None]), -4, 3) + 4
            L[:, j] = np.where((dj != 0)[:, None], new, L[:, j])
    packed = np.zeros((nb, 12), dtype=np.uint8)
    for j in range(16):
        packed[:, j % 8] |= ((sc[:, j] & 0xF) << (0 if j < 8 else 4)).astype(np.uint8)
        packed[:, 8 + j % 4] |= ((sc[:, j] >> 4) << (2 * (j // 4))).astype(np.uint8)
    L = L.reshape(nb, QK_K)
    high = (L > 3).reshape(nb, 8, 32).astype(np.uint8)  # bit k // 32 of hmask[k % 32]
    blocks = np.empty(nb, dtype=[("hmask", "u1", 32), ("qs", "u1", 64), ("scales", "u1", 12), ("d", "<f2")])
    blocks["hmask"] = (high << np.arange(8, dtype=np.uint8)[None, :, None]).sum(axis=1, dtype=np.uint8)
    blocks["qs"], blocks["scales"], blocks["d"] = pack_2bit(L), packed, d
    return blocks.tobytes()


def quantize_q4_k(x):
    """Rows of whole super-blocks -> Q4_K blocks (bytes), as run.c's quantize_q4_k."""
    d, dmin, packed, L = k4_blocks(x, 15, -1.0, 20)
    nb = len(d)
    L = L.reshape(nb, 4, 2, 32)
    blocks = np.empty(nb, dtype=[("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("qs", "u1", 128)])
    blocks["d"], blocks["dmin"], blocks["scales"] = d, dmin, packed
    blocks["qs"] = (L[:, :, 0] | L[:, :, 1] << 4).reshape(nb, 128).astype(np.uint8)
    return blocks.tobytes()


def quantize_q5_k(x):
    """Rows of whole super-blocks -> Q5_K blocks (bytes), as run.c's quantize_q5_k:
    Q4_K's layout for the low 4 bits, bit 4 of value k in qh[k % 32], bit k // 32."""
    d, dmin, packed, L = k4_blocks(x, 31, -0.5, 15)
    nb = len(d)
    L = L.reshape(nb, QK_K).astype(np.uint8)
    low = (L & 0xF).reshape(nb, 4, 2, 32)
    qh = ((L >> 4).reshape(nb, 8, 32) << np.arange(8, dtype=np.uint8)[None, :, None]).sum(axis=1, dtype=np.uint8)
    blocks = np.empty(nb, dtype=[("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("qh", "u1", 32),
                                 ("qs", "u1", 128)])
    blocks["d"], blocks["dmin"], blocks["scales"], blocks["qh"] = d, dmin, packed, qh
    blocks["qs"] = (low[:, :, 0] | low[:, :, 1] << 4).reshape(nb, 128)
    return blocks.tobytes()


def fit_scale(x, nmax):
    """run.c's fit_scale (ggml's make_qx_quants, squared error) for rows of x: (scale, L in 0..2 nmax - 1)."""
    n = x.shape[1]
    mx, amax = first_largest(x)
    zero = amax < GROUP_MAX_EPS
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        def levels(iscale):
            l = np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
            sum_lx = np.zeros(len(x), dtype=F32)
            sum_l2 = sum_lx.copy()
            for i in range(n):
                wt = x[:, i] * x[:, i]
                lf = l[:, i].astype(F32)
                sum_lx = sum_lx + wt * x[:, i] * lf
                sum_l2 = sum_l2 + wt * lf * lf
            return l, sum_lx, sum_l2
        L, sum_lx, sum_l2 = levels((F32(-nmax) / mx).astype(F32))
        scale = np.where(sum_l2 != 0, sum_lx / sum_l2, F32(0)).astype(F32)
        best = (scale * sum_lx).astype(F32)
        for step in range(-9, 10):
            if step == 0:
                continue
            l, sum_lx, sum_l2 = levels((-(F32(nmax) + F32(0.1) * F32(step)) / mx).astype(F32))
            take = (sum_l2 > 0) & (sum_lx * sum_lx > best * sum_l2)
            L = np.where(take[:, None], l, L)
            scale = np.where(take, sum_lx / sum_l2, scale).astype(F32)
            best = np.where(take, scale * sum_lx, best).astype(F32)
    L = np.where(zero[:, None], 0, L + nmax)
    return np.where(zero, F32(0), scale).astype(F32), L


def quantize_q6_k(x):
    """Rows of whole super-blocks -> Q6_K blocks (bytes), as run.c's quantize_q6_k."""
    nb = x.shape[0] * x.shape[1] // QK_K
    scales, L = fit_scale(x.reshape(nb * 16, 16), 32)
    scales, L = scales.reshape(nb, 16), L.reshape(nb, 16, 16)
    max_scale, max_abs = first_largest(scales)
    zero = max_abs < GROUP_MAX_EPS
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (F32(-128) / max_scale).astype(F32)
        d = (F32(1) / iscale).astype(np.float16)
        sc = np.minimum(nearest_int(iscale[:, None] * scales), 127).astype(np.int8)
        xb = x.reshape(nb, 16, 16)
        for j in range(16):
            dj = (d.astype(F32) * sc[:, j].astype(F32)).astype(F32)
            new = np.clip(nearest_int(xb[:, j] / dj[:, None]), -32, 31) + 32
            L[:, j] = np.where((dj != 0)[:, None], new, L[:, j])
    L = np.where(zero[:, None, None], 0, L).reshape(nb, 2, 4, 32)  # half, quarter, l
    d = np.where(zero, np.float16(0), d)
    sc = np.where(zero[:, None], 0, sc).astype(np.int8)
    blocks = np.zeros(nb, dtype=[("ql", "u1", 128), ("qh", "u1", 64), ("scales", "i1", 16), ("d", "<f2")])
    ql = np.zeros((nb, 2, 2, 32), dtype=np.uint8)  # half, byte group (quarter & 1), l
    qh = np.zeros((nb, 2, 32), dtype=np.uint8)
    for quarter in range(4):
        low = (L[:, :, quarter] & 0xF).astype(np.uint8)
        ql[:, :, quarter & 1] |= low << (0 if quarter < 2 else 4)
        qh |= ((L[:, :, quarter] >> 4).astype(np.uint8) << (2 * quarter)).astype(np.uint8)
    blocks["ql"], blocks["qh"] = ql.reshape(nb, 128), qh.reshape(nb, 64)
    blocks["scales"], blocks["d"] = sc, d
    return blocks.tobytes()


def quantize_q5_0(x):
    """Rows of whole blocks of 32 -> Q5_0 blocks (bytes), as run.c's quantize_q5_0."""
    b = x.reshape(-1, QK)
    mx, _ = first_largest(b)
    d = (mx / F32(-16)).astype(F32)
    q = np.minimum(np.trunc((b * inverse_scales(d)[:, None]).astype(F32) + F32(16.5)), 31).astype(np.uint32)
    blocks = np.empty(len(b), dtype=[("d", "<f2"), ("qh", "<u4"), ("qs", "u1", 16)])
    blocks["d"] = d.astype(np.float16)
    blocks["qh"] = ((q >> 4) << np.arange(32, dtype=np.uint32)).sum(axis=1, dtype=np.uint32)
    blocks["qs"] = (q[:, :16] & 0xF) | (q[:, 16:] & 0xF) << 4
    return blocks.tobytes()


def block_min_max(b):
    """Each block's min and max, scanned in C's order (so that a zero keeps
    the sign it first had)."""
    mn, mx = b[:, 0].copy(), b[:, 0].copy()
    for i in range(1, QK):
        mn = np.where(b[:, i] < mn, b[:, i], mn)
        mx = np.where(b[:, i] > mx, b[:, i], mx)
    return mn, mx


def quantize_q4_1(x):
    """Rows of whole blocks of 32 -> Q4_1 blocks (bytes), as run.c's quantize_q4_1:
    d = (max - min) / 15, q = min(int((x - min) / d + 0.5), 15)."""
    b = x.reshape(-1, QK)
    mn, mx = block_min_max(b)
    d = ((mx - mn) / F32(15)).astype(F32)
    q = np.trunc(((b - mn[:, None]).astype(F32) * inverse_scales(d)[:, None]).astype(F32) + F32(0.5)).astype(np.uint32)
    q = np.minimum(q, 15)
    blocks = np.empty(len(b), dtype=[("d", "<f2"), ("m", "<f2"), ("qs", "u1", 16)])
    blocks["d"], blocks["m"] = d.astype(np.float16), mn.astype(np.float16)
    blocks["qs"] = q[:, :16] | q[:, 16:] << 4
    return blocks.tobytes()


def quantize_q5_1(x):
    """Rows of whole blocks of 32 -> Q5_1 blocks (bytes), as run.c's quantize_q5_1:
    d = (max - min) / 31, q = int((x - min) / d + 0.5)."""
    b = x.reshape(-1, QK)
    mn, mx = block_min_max(b)
    d = ((mx - mn) / F32(31)).astype(F32)
    q = np.trunc(((b - mn[:, None]).astype(F32) * inverse_scales(d)[:, None]).astype(F32) + F32(0.5)).astype(np.uint32)
    blocks = np.empty(len(b), dtype=[("d", "<f2"), ("m", "<f2"), ("qh", "<u4"), ("qs", "u1", 16)])
    blocks["d"], blocks["m"] = d.astype(np.float16), mn.astype(np.float16)
    blocks["qh"] = ((q >> 4) << np.arange(32, dtype=np.uint32)).sum(axis=1, dtype=np.uint32)
    blocks["qs"] = (q[:, :16] & 0xF) | (q[:, 16:] & 0xF) << 4
    return blocks.tobytes()


# IQ4_NL and IQ4_XS: 4-bit indices into a fixed non-linear grid, as run.c's
# fit_scale_iq4 rounds them (ggml's quantize_row_iq4_nl_impl, no importance
# matrix).

IQ4NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=F32) if np else None


def iq4_nearest(v):
    """run.c's iq4_nearest: the index of the grid value nearest v (the upper one on a tie)."""
    v = np.asarray(v, dtype=F32)
    hi = np.clip(np.searchsorted(IQ4NL_VALUES, v, side="right"), 1, 15)
    lower = (v - IQ4NL_VALUES[hi - 1]).astype(F32) < (IQ4NL_VALUES[hi] - v).astype(F32)
    index = np.where(lower, hi - 1, hi)
    index = np.where(v <= IQ4NL_VALUES[0], 0, index)
    return np.where(v >= IQ4NL_VALUES[15], 15, index)


def iq4_sums(x, inv):
    """sum of w q x and of w q q (w = x^2, q the grid value of inv * x) over each row, in C's order."""
    sum_qx, sum_q2 = np.zeros(len(x), F32), np.zeros(len(x), F32)
    for j in range(x.shape[1]):
        xj = x[:, j]
        q = IQ4NL_VALUES[iq4_nearest((inv * xj).astype(F32))]
        wq = ((xj * xj).astype(F32) * q).astype(F32)
        sum_qx = (sum_qx + (wq * xj).astype(F32)).astype(F32)
        sum_q2 = (sum_q2 + (wq * q).astype(F32)).astype(F32)
    return sum_qx, sum_q2


def fit_scale_iq4(x):
    """run.c's fit_scale_iq4 for rows of 32: each row's d (0 below GROUP_MAX_EPS)."""
    mx, amax = first_largest(x)
    zero = amax < GROUP_MAX_EPS
    mx = np.where(zero, F32(1), mx).astype(F32)  # the zero rows' d is 0 whatever this computes
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d = (-mx / IQ4NL_VALUES[0]).astype(F32)
        sum_qx, sum_q2 = iq4_sums(x, (F32(1) / d).astype(F32))
        d = (sum_qx / sum_q2).astype(F32)
        best = (d * sum_qx).astype(F32)
        for step in range(-7, 8):
            sum_qx, sum_q2 = iq4_sums(x, (F32(step + IQ4NL_VALUES[0]) / mx).astype(F32))
            better = (sum_q2 > 0) & ((sum_qx * sum_qx).astype(F32) > (best * sum_q2).astype(F32))
            new_d = (sum_qx / sum_q2).astype(F32)
            d = np.where(better, new_d, d)
            best = np.where(better, (new_d * sum_qx).astype(F32), best)
    return np.where(zero, F32(0), d).astype(F32)


def iq4_nibbles(b, d):
    """Rows of 32 values against their scales d -> 16 bytes each (run.c's pack_iq4)."""
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, F32(1) / d, F32(0)).astype(F32)
    index = iq4_nearest((inv[:, None] * b).astype(F32)).astype(np.uint8)
    return index[:, :16] | index[:, 16:] << 4


def quantize_iq4_nl(x):
    """Rows of whole blocks of 32 -> IQ4_NL blocks (bytes), as run.c's quantize_iq4_nl."""
    b = x.reshape(-1, QK)
    d = fit_scale_iq4(b)
    blocks = np.empty(len(b), dtype=[("d", "<f2"), ("qs", "u1", 16)])
    blocks["d"] = d.astype(np.float16)
    blocks["qs"] = iq4_nibbles(b, d)  # with the unrounded d, as ggml
    return blocks.tobytes()


def quantize_iq4_xs(x):
    """Rows of whole super-blocks -> IQ4_XS blocks (bytes), as run.c's quantize_iq4_xs:
    each sub-block's d as a 6-bit multiple of -(the d of largest magnitude) / 32."""
    sub = x.reshape(-1, 8, QK)
    scales = fit_scale_iq4(sub.reshape(-1, QK)).reshape(-1, 8)
    max_scale, _ = first_largest(scales)
    d = (-max_scale / F32(32)).astype(F32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, F32(1) / d, F32(0)).astype(F32)
    levels = np.clip(nearest_int((inv[:, None] * scales).astype(F32)), -32, 31)
    sub_d = (d[:, None] * levels.astype(F32)).astype(F32)
    blocks = np.zeros(len(sub), dtype=[("d", "<f2"), ("scales_h", "<u2"), ("scales_l", "u1", 4), ("qs", "u1", 128)])
    blocks["d"] = d.astype(np.float16)
    biased = (levels + 32).astype(np.uint32)
    blocks["scales_h"] = ((biased >> 4) << (2 * np.arange(8, dtype=np.uint32))).sum(axis=1)
    blocks["scales_l"] = (biased[:, 0::2] & 0xF) | (biased[:, 1::2] & 0xF) << 4
    blocks["qs"] = iq4_nibbles(sub.reshape(-1, QK), sub_d.reshape(-1)).reshape(len(sub), 128)  # the unrounded d, as ggml
    return blocks.tobytes()


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def mix_type(c, mix, kind, layer, row_len):
    """run.c's matrix_dtype for the mixes export.py writes (llama-quantize's
    rules, README): the classifier Q6_K; attn_v (wv) and ffn_down (w2) by
    layer, attn_output (wo) by mix; rows that are not whole super-blocks
    fall back."""
    t = MIXES[mix]
    n = c.n_layers
    many = mix in ("q4_k_m", "q5_k_m")
    if kind == "wcls" or (kind == "token_embedding" and c.shared_classifier):
        t = "q6_k"
    elif kind == "wv":
        if mix == "q2_k_mix":
            t = "q4_k" if c.n_heads // c.n_kv_heads >= 4 else "q3_k"
        if mix == "q3_k_m":
            t = "q5_k" if layer < 2 else "q4_k"
        if mix == "q3_k_l" or (mix == "q4_k_s" and layer < 4):
            t = "q5_k"
        if many and use_more_bits(layer, n):
            t = "q6_k"
        if n == 80 and c.n_heads != c.n_kv_heads and t in ("q3_k", "q4_k"):  # 70B
            t = "q5_k"
    elif kind == "wo":
        t = {"q2_k_mix": "q3_k", "q3_k_m": "q4_k", "q3_k_l": "q5_k"}.get(mix, t)
    elif kind == "w2":
        if mix == "q2_k_mix":
            t = "q3_k"
        if mix == "q3_k_m":
            t = "q5_k" if layer < n // 16 else "q4_k"
        if mix == "q3_k_l" or (mix == "q4_k_s" and layer < n // 8):
            t = "q5_k"
        if many and use_more_bits(layer, n):
            t = "q6_k"
    if row_len % QK_K:
        fallback = {"q2_k": "q4_0", "q3_k": "q4_0", "q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0"}
        t = "f16" if row_len % QK else fallback[t]
    return t


# The GGUF writer (version 3, little-endian), for models run.c's own format
# cannot hold: byte-level BPE tokenizers, scaled RoPE, biases, Qwen2, Qwen3. The
# file is the one llama.cpp's convert_hf_to_gguf.py writes for the same
# directory: the same keys, tensor names, layouts and rope_freqs values.

GGUF_MAGIC, GGUF_VERSION, GGUF_ALIGN = 0x46554747, 3, 32
GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 7, 8, 9
GGUF_FILE_TYPES = {"f32": 0, "f16": 1, "q8_0": 7, "q4_0": 2}  # general.file_type (llama_ftype)
# tokenizer.ggml.token_type values (SentencePiece's piece types use the same numbers)
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6


def gguf_str(text):
    data = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def gguf_value(kind, value):
    """The bytes of one metadata value: kind is a GGUF type, or
    (GGUF_ARRAY, element type) for arrays of strings, int32 or float32."""
    if isinstance(kind, tuple):
        elem = kind[1]
        head = struct.pack("<IIQ", GGUF_ARRAY, elem, len(value))
        if elem == GGUF_STRING:
            return head + b"".join(gguf_str(v) for v in value)
        return head + np.asarray(value, dtype="<i4" if elem == GGUF_I32 else "<f4").tobytes()
    head = struct.pack("<I", kind)
    if kind == GGUF_STRING:
        return head + gguf_str(value)
    return head + struct.pack({GGUF_U32: "<I", GGUF_F32: "<f", GGUF_BOOL: "<?"}[kind], value)


def gguf_tensor_bytes(shape, ggml_type):
    n = int(np.prod(shape))
    return {0: 4 * n, 1: 2 * n, 8: n // QK * 34, 2: n // QK * 18}[ggml_type]


def write_gguf(out_path, metadata, tensors, inputs):
    """metadata: [(key, kind, value)]; tensors: [(name, shape, ggml type,
    load)] where load() gives the array (loaded only when written, so that
    one tensor at a time is in memory)."""
    header = [struct.pack("<IIQQ", GGUF_MAGIC, GGUF_VERSION, len(tensors), len(metadata))]
    header += [gguf_str(key) + gguf_value(kind, value) for key, kind, value in metadata]
    offset = 0
    for name, shape, ggml_type, _ in tensors:
        dims = tuple(reversed(shape))  # GGML lists the row length first
        header.append(gguf_str(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ggml_type, offset))
        offset += -(-gguf_tensor_bytes(shape, ggml_type) // GGUF_ALIGN) * GGUF_ALIGN
    with atomic_output(out_path, inputs) as f:
        for part in header:
            f.write(part)
        for name, shape, ggml_type, load in tensors:
            f.write(bytes(-f.tell() % GGUF_ALIGN))
            data = load()
            if memoryview(data).nbytes != gguf_tensor_bytes(shape, ggml_type):
                raise ExportError(f"{out_path}: tensor {name}: {memoryview(data).nbytes} bytes, expected "
                                  f"{gguf_tensor_bytes(shape, ggml_type)}")
            f.write(data)
            del data


def llama3_rope_factors(theta, head_size, scaling):
    """rope_freqs.weight for Llama 3.1 RoPE scaling, as llama.cpp's converter
    computes it: the frequencies theta^(-2i/head_size) in float32; those
    whose wavelength 2*pi/freq is shorter than original_max_position_embeddings
    / high_freq_factor keep factor 1, those longer than ... / low_freq_factor
    get `factor`, and those between are interpolated: with smooth =
    (original / wavelength - low) / (high - low), 1 / ((1 - smooth) / factor
    + smooth), worked out in double precision and stored as float32 (which
    gives llama.cpp's files' values bit for bit). llama.cpp divides each
    frequency by its factor."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    exponents = np.arange(0, head_size, 2, dtype=np.float32) / np.float32(head_size)
    freqs = np.float32(1) / np.power(np.float32(theta), exponents, dtype=np.float32)
    factors = []
    for freq in freqs.astype(np.float64):
        wavelength = 2 * np.pi / freq
        if wavelength < original / high:
            factors.append(1.0)
        elif wavelength > original / low:
            factors.append(factor)
        else:
            smooth = (original / wavelength - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


# run.c kind -> llama.cpp's tensor name inside blk.N (or the whole name).
GGUF_NAMES = {
    "token_embedding": "token_embd", "rms_final": "output_norm", "wcls": "output",
    "rms_att": "attn_norm", "rms_ffn": "ffn_norm", "wq": "attn_q", "wk": "attn_k", "wv": "attn_v",
    "wo": "attn_output", "w1": "ffn_gate", "w2": "ffn_down", "w3": "ffn_up",
    "q_norm": "attn_q_norm", "k_norm": "attn_k_norm", "gate_inp": "ffn_gate_inp",
    "gate_exps": "ffn_gate_exps", "up_exps": "ffn_up_exps", "down_exps": "ffn_down_exps",
    "post_att": "post_attention_norm", "post_ffn": "post_ffw_norm",
}


def gguf_model_tensors(source, dtype, out_path):
    """[(name, shape, ggml type, load)] of a Hugging Face model, in
    llama.cpp's order (rope_freqs first, then the model's own)."""
    c = source.config
    q_dim, kv_dim = c.n_heads * c.head_size, c.n_kv_heads * c.head_size
    bias_rows = {"wq": q_dim, "wk": kv_dim, "wv": kv_dim, "wo": c.dim}
    entries = []
    if source.rope_scaling and source.rope_scaling["type"] == "llama3":
        factors = llama3_rope_factors(c.rope_theta, c.head_size, source.rope_scaling)
        entries.append(("rope_freqs.weight", factors.shape, 0, lambda: factors.tobytes()))

    def add(kind, per_layer, shape, layer, suffix="weight"):
        gguf_name = GGUF_NAMES[kind] + "." + suffix
        if per_layer:
            gguf_name = f"blk.{layer}.{gguf_name}"
        # the router stays F32, as llama.cpp's converter keeps it
        matrix = len(shape) >= 2 and not kind.startswith("rms_") and kind != "gate_inp"
        ggml_type = WEIGHT_TYPES[dtype] if matrix else 0
        if matrix and ggml_type in (2, 8) and shape[-1] % QK:
            raise ExportError(f"{source.where(kind, layer, suffix)}: rows of {shape[-1]} values are not whole "
                              f"blocks of {QK}; use --dtype f32 or f16")

        def load():
            array = source.tensor(kind, layer, suffix)
            if tuple(array.shape) != shape:
                raise ExportError(f"{source.where(kind, layer, suffix)} has shape {tuple(array.shape)}, "
                                  f"expected {shape}")
            if not np.isfinite(array).all():
                raise ExportError(f"{source.where(kind, layer, suffix)} holds NaN or infinite values")
            rows = array.reshape(-1, shape[-1])  # the experts' matrices, one after another
            return encode_tensor(rows, "rms_" if not matrix else kind, dtype if matrix else "f32")
        entries.append((gguf_name, shape, ggml_type, load))

    shapes = {kind: (per_layer, shape) for kind, per_layer, shape in runc_tensors(c)}
    add("token_embedding", False, shapes["token_embedding"][1], None)
    for layer in range(c.n_layers):
        add("rms_att", True, (c.dim,), layer)
        for kind in ("wq", "wk", "wv"):
            add(kind, True, shapes[kind][1], layer)
            if kind in source.biases:
                add(kind, True, (bias_rows[kind],), layer, "bias")
        add("wo", True, shapes["wo"][1], layer)
        if "wo" in source.biases:
            add("wo", True, (c.dim,), layer, "bias")
        if source.qk_norm:
            add("q_norm", True, (c.head_size,), layer)
            add("k_norm", True, (c.head_size,), layer)
        add("rms_ffn", True, (c.dim,), layer)
        if source.gemma:
            add("post_att", True, (c.dim,), layer)
            add("post_ffn", True, (c.dim,), layer)
        if source.experts:
            n_expert, ff = source.experts["count"], source.experts["ff"]
            add("gate_inp", True, (n_expert, c.dim), layer)
            add("gate_exps", True, (n_expert, ff, c.dim), layer)
            add("up_exps", True, (n_expert, ff, c.dim), layer)
            add("down_exps", True, (n_expert, c.dim, ff), layer)
            continue
        for kind in ("w1", "w2", "w3"):
            add(kind, True, shapes[kind][1], layer)
    add("rms_final", False, (c.dim,), None)
    if not c.shared_classifier:
        add("wcls", False, shapes["wcls"][1], None)
    return entries


def gguf_model_metadata(source, dtype, vocab_size):
    """general.* and ARCH.* keys as llama.cpp's converter writes them."""
    c, arch = source.config, source.arch
    name = os.path.basename(os.path.normpath(os.path.abspath(source.path)))
    meta = [
        ("general.architecture", GGUF_STRING, arch),
        ("general.name", GGUF_STRING, name),
        ("general.file_type", GGUF_U32, GGUF_FILE_TYPES[dtype]),
        ("general.quantization_version", GGUF_U32, 2),
        (f"{arch}.vocab_size", GGUF_U32, vocab_size),
        (f"{arch}.context_length", GGUF_U32, c.seq_len),
        (f"{arch}.embedding_length", GGUF_U32, c.dim),
        (f"{arch}.block_count", GGUF_U32, c.n_layers),
        (f"{arch}.feed_forward_length", GGUF_U32, c.hidden_dim),
        (f"{arch}.attention.head_count", GGUF_U32, c.n_heads),
        (f"{arch}.attention.head_count_kv", GGUF_U32, c.n_kv_heads),
        (f"{arch}.rope.freq_base", GGUF_F32, c.rope_theta),
        (f"{arch}.attention.layer_norm_rms_epsilon", GGUF_F32, c.norm_eps),
        (f"{arch}.rope.dimension_count", GGUF_U32, c.head_size),
    ]
    if source.hf_config.get("head_dim") is not None:
        meta += [(f"{arch}.attention.key_length", GGUF_U32, c.head_size),
                 (f"{arch}.attention.value_length", GGUF_U32, c.head_size)]
    if source.experts:
        meta += [(f"{arch}.expert_count", GGUF_U32, source.experts["count"]),
                 (f"{arch}.expert_used_count", GGUF_U32, source.experts["used"]),
                 (f"{arch}.expert_feed_forward_length", GGUF_U32, source.experts["ff"])]
    if source.rope_scaling and source.rope_scaling["type"] == "linear":
        meta += [(f"{arch}.rope.scaling.type", GGUF_STRING, "linear"),
                 (f"{arch}.rope.scaling.factor", GGUF_F32, source.rope_scaling["factor"])]
    if source.gemma:
        g = source.gemma
        if g["window"]:
            meta += [(f"{arch}.attention.sliding_window", GGUF_U32, g["window"]),
                     (f"{arch}.rope.freq_base_swa", GGUF_F32, g["local_theta"])]
            if g["period"] != GEMMA_WINDOW_PERIOD:
                meta.append((f"{arch}.attention.sliding_window_pattern", GGUF_U32, g["period"]))
        if g["softcap"]:
            meta.append((f"{arch}.final_logit_softcapping", GGUF_F32, g["softcap"]))
    return meta


def export_hf_gguf(out_path, source, tokenizer, dtype, inputs):
    """Writes a Hugging Face model and its tokenizer as one GGUF file."""
    c = source.config
    check_config(c, source.path)
    if dtype not in GGUF_FILE_TYPES:
        raise ExportError(f"--dtype {dtype}: the GGUF export writes {', '.join(GGUF_FILE_TYPES)}; for other types, "
                          f"export f16 and quantize the GGUF with llama-quantize")
    if tokenizer.n_tokens != c.vocab_size:
        raise ExportError(f"{tokenizer.path}: {tokenizer.n_tokens} tokens, but the model's vocab_size is "
                          f"{c.vocab_size} (embedding rows)")
    metadata = gguf_model_metadata(source, dtype, c.vocab_size) + tokenizer.metadata
    write_gguf(out_path, metadata, gguf_model_tensors(source, dtype, out_path), inputs)


# ---------------------------------------------------------------------------
# Files

@contextlib.contextmanager
def atomic_output(path, inputs):
    """A file object for path, written to OUT.tmp-XXXX and renamed at the end.
    Refuses to overwrite any of inputs; removes the temp file on failure."""
    if os.path.isdir(path):
        raise ExportError(f"{path}: is a directory")
    if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
        mode = os.lstat(path).st_mode
        kind = ("a symbolic link" if stat.S_ISLNK(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
        raise ExportError(f"{path}: is {kind}, which export.py does not replace; give the name of a new or regular file")
    for p in inputs:
        if os.path.exists(path) and os.path.exists(p) and os.path.samefile(path, p):
            raise ExportError(f"{path}: is an input file; refusing to overwrite it")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        # a name too long to take the suffix (file systems allow 255 bytes)
        # is written as .export.tmp-XXXX in its folder
        prefix = os.path.basename(path) + ".tmp-"
        if len(os.fsencode(prefix)) + 8 > 255:
            prefix = ".export.tmp-"
        fd, tmp = tempfile.mkstemp(prefix=prefix, dir=directory)
    except OSError as e:
        raise ExportError(f"{path}: cannot create a file there: {e.strerror}")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def real(value, key, path):
    """value as a float, or a refusal naming the key."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExportError(f"{path}: {key} {value!r} is not a number")
    return float(value)


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as e:
        raise ExportError(f"{path}: not valid JSON ({e})")


def to_float32(array, where):
    """A float32 copy of a numpy array of F32/F16 values."""
    if array.dtype not in (np.float32, np.float16):
        raise ExportError(f"{where}: dtype {array.dtype} is not supported (F32, F16, BF16)")
    return np.array(array, dtype=np.float32)


def bf16_to_float32(raw):
    """BF16 bits (uint16) to float32: they are the high half of the float32 bits."""
    bits = raw.astype(np.uint32)
    bits <<= 16
    return bits.view(np.float32)


def torch_to_float32(tensor, where):
    import torch
    if tensor.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ExportError(f"{where}: dtype {tensor.dtype} is not supported (F32, F16, BF16)")
    return tensor.detach().to(torch.float32).numpy()


def torch_load(path):
    """A state dict from a torch pickle, with tensors only."""
    try:
        import torch
    except ImportError:
        raise ExportError(f"{path}: reading torch pickles needs torch (apt install python3-torch)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:  # torch older than 1.13
        state = torch.load(path, map_location="cpu")
    except Exception as e:
        detail = (str(e).splitlines() or [""])[0]
        raise ExportError(f"{path}: cannot read as a torch pickle ({type(e).__name__}: {detail})")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ExportError(f"{path}: is not a plain state dict of tensors")
    return state


class SafetensorsFile:
    """One .safetensors file: 8-byte little-endian header length, JSON header
    {name: {dtype, shape, data_offsets}}, then the raw data (read via mmap)."""

    DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")} if np else {}

    def __init__(self, path):
        self.path = path
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            (n,) = struct.unpack("<Q", head) if len(head) == 8 else (size,)
            if 8 + n > size:
                raise ExportError(f"{path}: too short for its safetensors header")
            try:
                header = json.loads(f.read(n))
            except ValueError:
                raise ExportError(f"{path}: safetensors header is not valid JSON")
        if not isinstance(header, dict):
            raise ExportError(f"{path}: safetensors header is not a JSON object")
        header.pop("__metadata__", None)
        for name, info in header.items():
            if not (isinstance(info, dict) and isinstance(info.get("shape"), list)
                    and all(isinstance(n, int) and n >= 0 for n in info["shape"])
                    and isinstance(info.get("data_offsets"), list) and len(info["data_offsets"]) == 2
                    and all(isinstance(n, int) for n in info["data_offsets"])):
                raise ExportError(f"{path}: tensor {name} has a malformed header entry")
        self.tensors = header
        self.data_start, self.data_size = 8 + n, size - 8 - n
        self.map = None

    def load(self, name):
        info, where = self.tensors[name], f"{self.path}: tensor {name}"
        dtype = self.DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise ExportError(f"{where} has dtype {info.get('dtype')} (supported: F32, F16, BF16)")
        shape = tuple(info["shape"])
        begin, end = info["data_offsets"]
        if end - begin != int(np.prod(shape)) * dtype.itemsize or not 0 <= begin <= end <= self.data_size:
            raise ExportError(f"{where}: data_offsets {begin}..{end} do not fit shape {shape} "
                              f"or the file")
        if self.map is None:
            self.map = np.memmap(self.path, dtype=np.uint8, mode="r")
        start = self.data_start + begin
        raw = self.map[start:start + end - begin].view(dtype).reshape(shape)
        if info["dtype"] == "BF16":
            return bf16_to_float32(raw)
        return to_float32(raw, where)


class TensorStore:
    """Named tensors spread over files: .files {name: reader or torch dict}."""

    def __init__(self):
        self.files = {}  # tensor name -> (path, SafetensorsFile or dict of torch tensors)
        self.original = {}  # tensor name -> its name in the file, where they differ (Gemma 3's language model)

    def add(self, path, reader, names):
        for name in names:
            if name in self.files:
                raise ExportError(f"{path}: tensor {name} is also in {self.files[name][0]}")
            self.files[name] = (path, reader)

    def where(self, name):
        return f"{self.files[name][0]}: tensor {self.original.get(name, name)}"

    def load(self, name):
        """Loads one tensor as float32; a torch tensor is dropped from memory once read."""
        path, reader = self.files[name]
        where, name = self.where(name), self.original.get(name, name)
        if isinstance(reader, SafetensorsFile):
            return reader.load(name)
        return torch_to_float32(reader.pop(name), where)


# ---------------------------------------------------------------------------
# Hugging Face

HF_NAMES = {
    "token_embedding": "model.embed_tokens.weight",
    "rms_att": "model.layers.{}.input_layernorm.weight",
    "rms_ffn": "model.layers.{}.post_attention_layernorm.weight",
    "rms_final": "model.norm.weight",
    "wq": "model.layers.{}.self_attn.q_proj.weight",
    "wk": "model.layers.{}.self_attn.k_proj.weight",
    "wv": "model.layers.{}.self_attn.v_proj.weight",
    "wo": "model.layers.{}.self_attn.o_proj.weight",
    "w1": "model.layers.{}.mlp.gate_proj.weight",
    "w2": "model.layers.{}.mlp.down_proj.weight",
    "w3": "model.layers.{}.mlp.up_proj.weight",
    "wcls": "lm_head.weight",
    "q_norm": "model.layers.{}.self_attn.q_norm.weight",
    "k_norm": "model.layers.{}.self_attn.k_norm.weight",
    "gate_inp": "model.layers.{}.mlp.gate.weight",
}
# Gemma 3's norms: one before and one after attention and the feed-forward.
GEMMA_NAMES = dict(HF_NAMES, rms_ffn="model.layers.{}.pre_feedforward_layernorm.weight",
                   post_att="model.layers.{}.post_attention_layernorm.weight",
                   post_ffn="model.layers.{}.post_feedforward_layernorm.weight")
GEMMA_NORMS = ("rms_att", "rms_ffn", "rms_final", "q_norm", "k_norm", "post_att", "post_ffn")
# The experts of a mixture-of-experts layer: one matrix per expert, which the
# GGUF file stacks into one 3-D tensor per kind.
HF_EXPERT_NAMES = {
    "gate_exps": "model.layers.{}.mlp.experts.{}.gate_proj.weight",
    "up_exps": "model.layers.{}.mlp.experts.{}.up_proj.weight",
    "down_exps": "model.layers.{}.mlp.experts.{}.down_proj.weight",
}


def unpermute_rotate_half(w, n_heads):
    """Undoes Hugging Face's conversion permute, which is
    w.view(n_heads, rows // n_heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols):
    each head's rows go back from [evens..., odds...] to consecutive pairs."""
    rows, cols = w.shape
    half = rows // n_heads // 2
    return w.reshape(n_heads, 2, half, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def read_weight_map(index):
    """{tensor name: file name} of a Hugging Face *.index.json."""
    weight_map = read_json(index)
    weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
        raise ExportError(f"{index}: has no weight_map of file names")
    return weight_map


def open_hf_tensors(directory):
    """A TensorStore over the weights of a Hugging Face directory."""
    store = TensorStore()
    join = lambda name: os.path.join(directory, name)
    index = join("model.safetensors.index.json")
    shards = sorted(glob.glob(join("model-*-of-*.safetensors")))
    if os.path.exists(index):
        weight_map = read_weight_map(index)
        files = sorted(set(weight_map.values()))
    elif os.path.exists(join("model.safetensors")):
        files = ["model.safetensors"]
    elif shards:
        files = [os.path.basename(p) for p in shards]
    else:
        return open_hf_pickles(directory)
    for name in files:
        path = join(name)
        if not os.path.isfile(path):
            raise ExportError(f"{path}: missing (named by {os.path.basename(index)})")
        reader = SafetensorsFile(path)
        store.add(path, reader, reader.tensors)
    if os.path.exists(index):
        for name, file in weight_map.items():
            if name not in store.files or store.files[name][0] != join(file):
                raise ExportError(f"{join(file)}: does not hold tensor {name} (named by the index)")
    return store


def open_hf_pickles(directory):
    index = os.path.join(directory, "pytorch_model.bin.index.json")
    if os.path.exists(index):
        files = sorted(set(read_weight_map(index).values()))
    elif os.path.exists(os.path.join(directory, "pytorch_model.bin")):
        files = ["pytorch_model.bin"]
    else:
        raise ExportError(f"{directory}: no model.safetensors, model-*-of-*.safetensors or "
                          "pytorch_model.bin")
    store = TensorStore()
    for name in files:
        path = os.path.join(directory, name)
        state = torch_load(path)
        store.add(path, state, state)
    return store


def hf_head_dim(cfg, path, dim, n_heads):
    """Qwen3's head size, which its config states (head_dim); None where it
    must be dim / n_heads."""
    if cfg.get("model_type") not in ("qwen3", "qwen3_moe", "gemma3_text"):
        if cfg.get("head_dim", dim // n_heads) not in (None, dim // n_heads):
            raise ExportError(f"{path}: head_dim {cfg['head_dim']} differs from hidden_size / "
                              f"num_attention_heads = {dim // n_heads}; run.c needs them equal")
        return None
    # transformers defaults to 128 when it is absent, llama.cpp to dim / n_heads
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        if cfg.get("model_type") == "gemma3_text":
            raise ExportError(f"{path}: head_dim is missing; Gemma 3's head size must be stated (transformers and "
                              f"llama.cpp's converter assume 256)")
        raise ExportError(f"{path}: head_dim is missing; Qwen3's head size must be stated (transformers assumes "
                          f"128, llama.cpp hidden_size / num_attention_heads)")
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2:
        raise ExportError(f"{path}: head_dim {head_dim!r} is not a positive even whole number")
    if head_dim > MAX_DIM:
        raise ExportError(f"{path}: head_dim {head_dim} is beyond run.c's limit {MAX_DIM}")
    return head_dim


def hf_config(directory, store, cfg, path):
    """The run.c Config of a Hugging Face Llama, Qwen2 or Qwen3 directory, or a refusal."""
    get = lambda key, default=None: cfg[key] if cfg.get(key) is not None else default
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "vocab_size"):
        if not isinstance(cfg.get(key), int):
            raise ExportError(f"{path}: {key} is missing or not a whole number")
    dim, n_heads = cfg["hidden_size"], cfg["num_attention_heads"]
    if n_heads <= 0:
        raise ExportError(f"{path}: num_attention_heads {n_heads} is not positive")
    head_dim = hf_head_dim(cfg, path, dim, n_heads)
    if head_dim is None and dim % n_heads:
        raise ExportError(f"{path}: hidden_size {dim} is not a multiple of num_attention_heads {n_heads}")
    rope = get("rope_parameters", {})
    eos = get("eos_token_id", 2)
    if isinstance(eos, list):
        if not eos:
            raise ExportError(f"{path}: eos_token_id is an empty list")
        eos = eos[0]
    return Config(
        dim=dim, hidden_dim=cfg["intermediate_size"], n_layers=cfg["num_hidden_layers"],
        n_heads=n_heads, n_kv_heads=get("num_key_value_heads", n_heads),
        vocab_size=cfg["vocab_size"], seq_len=get("max_position_embeddings", 2048),
        rope_theta=real(rope.get("rope_theta", get("rope_theta", 10000.0)), "rope_theta", path),
        norm_eps=real(get("rms_norm_eps", 1e-6), "rms_norm_eps", path),  # LlamaConfig's default
        # transformers ties by default for Gemma 3, not for the others
        shared_classifier=bool(get("tie_word_embeddings", cfg.get("model_type") == "gemma3_text"))
        or "lm_head.weight" not in store.files,
        bos_id=get("bos_token_id", 1), eos_id=eos, head_dim=head_dim)


def hf_experts(cfg, path):
    """{"count", "used", "ff"} of a Qwen3-MoE config (None for a dense
    model), or a refusal of what run.c does not compute: dense layers
    between the sparse ones, shared experts, top-k weights that are not
    renormalized (llama.cpp and run.c always renormalize them)."""
    if cfg.get("model_type") != "qwen3_moe":
        return None
    for key in ("num_experts", "num_experts_per_tok", "moe_intermediate_size"):
        if isinstance(cfg.get(key), bool) or not isinstance(cfg.get(key), int):
            raise ExportError(f"{path}: {key} is missing or not a whole number")
    count, used, ff = cfg["num_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"]
    if not 1 <= count <= MAX_EXPERTS:
        raise ExportError(f"{path}: num_experts {count} is not in 1..{MAX_EXPERTS} (run.c's limit)")
    if not 1 <= used <= count:
        raise ExportError(f"{path}: num_experts_per_tok {used} is not in 1..num_experts ({count})")
    if not 0 < ff <= MAX_HIDDEN:
        raise ExportError(f"{path}: moe_intermediate_size {ff} is not in 1..{MAX_HIDDEN}")
    if cfg.get("mlp_only_layers"):
        raise ExportError(f"{path}: mlp_only_layers {cfg['mlp_only_layers']} is not empty; every layer must be "
                          f"a mixture of experts")
    if cfg.get("decoder_sparse_step", 1) != 1:
        raise ExportError(f"{path}: decoder_sparse_step {cfg['decoder_sparse_step']} is not 1; every layer must be "
                          f"a mixture of experts")
    if cfg.get("shared_expert_intermediate_size"):
        raise ExportError(f"{path}: shared_expert_intermediate_size is set; run.c has no shared experts")
    if cfg.get("norm_topk_prob") is not True:
        raise ExportError(f"{path}: norm_topk_prob is {'absent (false)' if 'norm_topk_prob' not in cfg else 'false'}: "
                          f"the chosen experts' weights are not renormalized, which llama.cpp and run.c always do")
    return {"count": count, "used": used, "ff": ff}


# Hugging Face model_type -> (architectures, GGUF architecture).
HF_ARCHITECTURES = {"llama": ("LlamaForCausalLM", "llama"), "qwen2": ("Qwen2ForCausalLM", "qwen2"),
                    "qwen3": ("Qwen3ForCausalLM", "qwen3"), "qwen3_moe": ("Qwen3MoeForCausalLM", "qwen3moe"),
                    "gemma3_text": ("Gemma3ForCausalLM", "gemma3")}
GEMMA_WINDOW_PERIOD = 6  # llama.cpp's gemma3: every 6th layer global unless sliding_window_pattern says otherwise
# Gemma3TextConfig's defaults, which transformers fills into the text_config of
# a Gemma3ForConditionalGeneration (Google's 4B config leaves the head counts,
# head_dim and vocab_size to them).
GEMMA_TEXT_DEFAULTS = {"vocab_size": 262208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                       "max_position_embeddings": 131072, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
                       "query_pre_attn_scalar": 256, "sliding_window": 4096, "rope_local_base_freq": 10000.0,
                       "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True}
# Where a Gemma3ForConditionalGeneration checkpoint keeps its language model
# (older and newer transformers), and the vision parts left out.
GEMMA_LANGUAGE_PREFIXES = (("language_model.model.", "model."), ("model.language_model.", "model."),
                           ("language_model.lm_head.", "lm_head."))
GEMMA_VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                         "model.multi_modal_projector.")


def gemma_text_config(cfg, path):
    """The language model's config of a Gemma3ForConditionalGeneration:
    text_config over the outer keys, completed with transformers' defaults."""
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        raise ExportError(f"{path}: Gemma3ForConditionalGeneration without a text_config object")
    merged = {k: v for k, v in cfg.items() if k not in ("text_config", "vision_config")}
    merged.update({k: v for k, v in GEMMA_TEXT_DEFAULTS.items() if text.get(k) is None})
    merged.update({k: v for k, v in text.items() if v is not None})
    merged["model_type"], merged["architectures"] = "gemma3_text", ["Gemma3ForCausalLM"]
    return merged


def gemma_language_model(store, directory):
    """Keeps the language model of a Gemma3ForConditionalGeneration's tensors
    under Gemma3ForCausalLM's names; the vision tower and projector go (a
    GGUF gemma3 file has no place for them: llama.cpp writes them to a
    separate mmproj file). Returns how many tensors went."""
    renamed, dropped = {}, 0
    for name, entry in store.files.items():
        if name.startswith(GEMMA_VISION_PREFIXES):
            dropped += 1
            continue
        new = next((to + name[len(old):] for old, to in GEMMA_LANGUAGE_PREFIXES if name.startswith(old)), name)
        if new in renamed:
            raise ExportError(f"{directory}: tensors {name} and {store.original.get(new, new)} are both {new}")
        renamed[new] = entry
        store.original[new] = name
    store.files = renamed
    return dropped
LLAMA3_ROPE_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def check_hf_architecture(cfg, path):
    """The GGUF architecture name ("llama", "qwen2", "qwen3" or "qwen3moe")
    of a config run.c can compute exactly; refuses the others."""
    model_type, archs = cfg.get("model_type"), cfg.get("architectures")
    if model_type is None and archs is None:
        raise ExportError(f"{path}: has neither model_type nor architectures")
    if model_type is None:
        model_type = next((t for t, (a, _) in HF_ARCHITECTURES.items() if archs == [a]), None)
    if model_type not in HF_ARCHITECTURES:
        raise ExportError(f"{path}: model_type is {model_type!r}, not one of "
                          f"{', '.join(repr(t) for t in HF_ARCHITECTURES)}")
    hf_arch, arch = HF_ARCHITECTURES[model_type]
    if archs is not None and archs != [hf_arch]:
        raise ExportError(f"{path}: architectures {archs} is not ['{hf_arch}'] (model_type {model_type!r})")
    if cfg.get("mlp_bias"):
        raise ExportError(f"{path}: mlp_bias is true; run.c has no bias terms in the feed-forward network")
    if arch == "gemma3":
        act = cfg.get("hidden_activation", cfg.get("hidden_act", "gelu_pytorch_tanh"))
        if act not in ("gelu_pytorch_tanh", "gelu_tanh"):
            raise ExportError(f"{path}: hidden_activation {act!r} is not gelu_pytorch_tanh, Gemma 3's (llama.cpp's "
                              f"gemma3 and run.c compute that one)")
    elif cfg.get("hidden_act", "silu") != "silu":
        raise ExportError(f"{path}: hidden_act {cfg['hidden_act']!r} is not silu")
    if cfg.get("use_sliding_window") and arch != "gemma3":
        raise ExportError(f"{path}: use_sliding_window is true; run.c attends to the whole context")
    if cfg.get("quantization_config") is not None:
        raise ExportError(f"{path}: quantized checkpoints (quantization_config) are not supported")
    if arch in ("qwen3", "qwen3moe", "gemma3") and cfg.get("attention_bias"):
        raise ExportError(f"{path}: attention_bias is true; {arch} has no attention biases in llama.cpp or run.c")
    return arch


def hf_rope_scaling(cfg, path):
    """None for plain RoPE, else {"type": "linear", "factor"} or {"type":
    "llama3", the four LLAMA3_ROPE_KEYS}; refuses the other kinds."""
    found = None
    for key in ("rope_scaling", "rope_parameters"):
        rope = cfg.get(key)
        if rope is None:
            continue
        implied = "default" if key == "rope_parameters" else None  # a bare rope_theta holder
        kind = rope.get("rope_type", rope.get("type", implied)) if isinstance(rope, dict) else None
        if kind == "default":
            continue
        if kind not in ("linear", "llama3"):
            raise ExportError(f"{path}: {key} type {kind!r} is not supported (supported: linear, llama3)")
        keys = ("factor",) if kind == "linear" else LLAMA3_ROPE_KEYS
        scaling = {"type": kind}
        for k in keys:
            if k not in rope:
                raise ExportError(f"{path}: {key} of type {kind} has no {k}")
            scaling[k] = real(rope[k], f"{key}.{k}", path)
            if not (np.isfinite(scaling[k]) and scaling[k] > 0):
                raise ExportError(f"{path}: {key}.{k} {rope[k]} is not a positive number")
        if kind == "llama3" and scaling["high_freq_factor"] <= scaling["low_freq_factor"]:
            raise ExportError(f"{path}: {key}: high_freq_factor must be above low_freq_factor")
        if found is not None and found != scaling:
            raise ExportError(f"{path}: rope_scaling and rope_parameters disagree")
        found = scaling
    return found


def gemma_window(cfg, path, n_layers):
    """(sliding window, period) of a Gemma 3 config: layer l slides when
    l % period < period - 1; window 0 when every layer is global. From
    layer_types where given, else sliding_window_pattern (default 6)."""
    pattern = cfg.get("sliding_window_pattern")
    if pattern is not None and (isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1):
        raise ExportError(f"{path}: sliding_window_pattern {pattern!r} is not a positive whole number")
    period = pattern or GEMMA_WINDOW_PERIOD
    types = cfg.get("layer_types")
    if types is not None:
        kinds = ("sliding_attention", "full_attention")
        if not isinstance(types, list) or len(types) != n_layers or any(t not in kinds for t in types):
            raise ExportError(f"{path}: layer_types is not a list of {n_layers} 'sliding_attention' or "
                              f"'full_attention'")
        fits = lambda p: all((t == kinds[0]) == (layer % p < p - 1) for layer, t in enumerate(types))
        found = next((p for p in [period] + list(range(1, n_layers + 2)) if fits(p)), None)
        if found is None:
            shown = "".join("S" if t == kinds[0] else "G" for t in types)
            raise ExportError(f"{path}: layer_types ({shown}: S sliding, G global) is not sliding layers repeated with "
                              f"every N-th layer global, which is all a GGUF attention.sliding_window_pattern "
                              f"can say")
        if pattern is not None and not fits(pattern):
            raise ExportError(f"{path}: layer_types and sliding_window_pattern {pattern} disagree")
        period = found
    if period == 1:
        return 0, 1
    if period != GEMMA_WINDOW_PERIOD and period > n_layers + 1:
        period = n_layers + 1  # every layer slides: the shortest period that says so
    window = cfg.get("sliding_window")
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        raise ExportError(f"{path}: sliding_window is {'missing' if window is None else repr(window)}; Gemma 3's "
                          f"local layers need their window (a positive whole number)")
    return window, period


def gemma_settings(cfg, path, n_layers, dim, n_heads, head_dim):
    """Gemma 3's own settings: {"theta", "local_theta", "scaling", "window",
    "period", "softcap"}, or a refusal of what llama.cpp's gemma3 (and
    run.c) do not compute. RoPE scaling applies to the global layers only."""
    get = lambda key, default=None: cfg[key] if cfg.get(key) is not None else default
    if get("attn_logit_softcapping") is not None:
        raise ExportError(f"{path}: attn_logit_softcapping is set (Gemma 2's); llama.cpp's gemma3 and run.c have none")
    if cfg.get("use_bidirectional_attention"):
        raise ExportError(f"{path}: use_bidirectional_attention is true; run.c's attention is causal")
    # llama.cpp's rule: queries scaled by 1/sqrt(head_dim), 1/sqrt(hidden_size / heads) for the 27B (62 layers)
    want = dim // n_heads if n_layers == 62 else head_dim
    scalar = real(get("query_pre_attn_scalar", 256), "query_pre_attn_scalar", path)  # transformers' default
    if scalar != want:
        rule = "hidden_size / num_attention_heads for 62 layers" if n_layers == 62 else "head_dim"
        raise ExportError(f"{path}: query_pre_attn_scalar {get('query_pre_attn_scalar', 256)} is not {want}, which "
                          f"llama.cpp's gemma3 assumes ({rule})")
    softcap = real(get("final_logit_softcapping", 0.0), "final_logit_softcapping", path)
    if not (np.isfinite(softcap) and softcap >= 0):
        raise ExportError(f"{path}: final_logit_softcapping {softcap} is not a number >= 0")
    rope = cfg.get("rope_parameters")
    if isinstance(rope, dict) and ("full_attention" in rope or "sliding_attention" in rope):
        full, local = rope.get("full_attention") or {}, rope.get("sliding_attention") or {}
        if not isinstance(full, dict) or not isinstance(local, dict):
            raise ExportError(f"{path}: rope_parameters.full_attention and sliding_attention must be objects")
        kind = local.get("rope_type", local.get("type", "default"))
        if kind != "default":
            raise ExportError(f"{path}: rope_parameters.sliding_attention type {kind!r}: llama.cpp's gemma3 scales "
                              f"the global layers' RoPE only")
        theta = full.get("rope_theta", get("rope_theta", 1e6))
        local_theta = local.get("rope_theta", get("rope_local_base_freq", 10000.0))
        scaling = hf_rope_scaling({"rope_parameters": full}, path)
    else:
        theta = rope.get("rope_theta", get("rope_theta", 1e6)) if isinstance(rope, dict) else get("rope_theta", 1e6)
        local_theta = get("rope_local_base_freq", 10000.0)
        scaling = hf_rope_scaling(cfg, path)
    if scaling and scaling["type"] != "linear":
        raise ExportError(f"{path}: RoPE scaling {scaling['type']} is not Gemma 3's (linear)")
    theta, local_theta = real(theta, "rope_theta", path), real(local_theta, "rope_local_base_freq", path)
    if not (np.isfinite(local_theta) and local_theta > 0):
        raise ExportError(f"{path}: rope_local_base_freq {local_theta} is not a positive number")
    window, period = gemma_window(cfg, path, n_layers)
    return {"theta": theta, "local_theta": local_theta, "scaling": scaling, "window": window, "period": period,
            "softcap": softcap}


class HFModel:
    """Reads a Hugging Face Llama, Qwen2, Qwen3, Qwen3-MoE or Gemma 3 directory:
    tensor() gives run.c's tensors, gguf_model_tensors() llama.cpp's."""

    def __init__(self, directory):
        self.path = directory
        if not os.path.isdir(directory):
            raise ExportError(f"{directory}: not a directory")
        config_path = os.path.join(directory, "config.json")
        if not os.path.isfile(config_path):
            raise ExportError(f"{config_path}: missing")
        cfg = read_json(config_path)
        if not isinstance(cfg, dict):
            raise ExportError(f"{config_path}: not a JSON object")
        multimodal = (cfg.get("model_type") == "gemma3"
                      or cfg.get("architectures") == ["Gemma3ForConditionalGeneration"])
        if multimodal:
            cfg = gemma_text_config(cfg, config_path)
        self.hf_config = cfg
        self.arch = check_hf_architecture(cfg, config_path)
        self.gemma = None  # Gemma 3's settings (gemma_settings)
        self.names = GEMMA_NAMES if self.arch == "gemma3" else HF_NAMES
        if self.arch != "gemma3":
            self.rope_scaling = hf_rope_scaling(cfg, config_path)
        # Qwen2 always has q/k/v biases; Llama has q/k/v/o ones with attention_bias.
        self.biases = {"qwen2": ("wq", "wk", "wv")}.get(self.arch, ())
        if self.arch == "llama" and cfg.get("attention_bias"):
            self.biases = ("wq", "wk", "wv", "wo")
        # Qwen3 and Gemma 3: RMSNorm over each head of q and k; Qwen3-MoE: experts
        self.qk_norm = self.arch in ("qwen3", "qwen3moe", "gemma3")
        self.experts = hf_experts(cfg, config_path)
        self.store = open_hf_tensors(directory)
        if multimodal:
            dropped = gemma_language_model(self.store, directory)
            print(f"note: {directory}: Gemma3ForConditionalGeneration: the language model is converted; the vision "
                  f"tower and projector ({dropped} tensors) are left out, as a GGUF gemma3 file holds text only")
        self.config = hf_config(directory, self.store, cfg, config_path)
        if self.arch == "gemma3":
            c = self.config
            self.gemma = gemma_settings(cfg, config_path, c.n_layers, c.dim, c.n_heads, c.head_size)
            self.rope_scaling = self.gemma["scaling"]
            c.rope_theta = self.gemma["theta"]
        self.check_names()

    @property
    def needs_gguf(self):
        """What run.c's own format cannot hold: another architecture, biases, scaled RoPE."""
        return self.arch != "llama" or bool(self.biases) or self.rope_scaling is not None

    def name(self, kind, layer, suffix="weight"):
        return self.names[kind].format(layer)[:-len("weight")] + suffix

    def expert_names(self, kind, layer):
        return [HF_EXPERT_NAMES[kind].format(layer, e) for e in range(self.experts["count"])]

    def check_names(self):
        """Every tensor present, none unexpected (biases, extra layers...)."""
        c = self.config
        dense = ("w1", "w2", "w3") if self.experts else ()
        expected = {self.name(kind, layer)
                    for kind, per_layer, _ in runc_tensors(c) if kind not in dense
                    for layer in (range(c.n_layers) if per_layer else [None])}
        extra = (("q_norm", "k_norm") if self.qk_norm else ()) + (("gate_inp",) if self.experts else ())
        extra += ("post_att", "post_ffn") if self.gemma else ()
        expected |= {self.name(kind, layer) for kind in extra for layer in range(c.n_layers)}
        if self.experts:
            expected |= {name for kind in HF_EXPERT_NAMES for layer in range(c.n_layers)
                         for name in self.expert_names(kind, layer)}
        expected |= {self.name(kind, layer, "bias") for kind in self.biases for layer in range(c.n_layers)}
        if "lm_head.weight" in self.store.files and c.shared_classifier:
            expected.add("lm_head.weight")  # tied: Hugging Face uses embed_tokens instead
        for name in self.store.files:
            if self.experts and re.search(r"\.mlp\.experts\.(gate_up_proj|down_proj)(\.weight)?$", name):
                raise ExportError(f"{self.store.where(name)}: experts fused into one tensor are not supported; "
                                  f"give each expert's gate_proj, up_proj and down_proj")
        for name in sorted(expected):
            if name not in self.store.files:
                raise ExportError(f"{self.path}: tensor {name} is missing")
        for name in self.store.files:
            if name not in expected and not name.endswith(".rotary_emb.inv_freq"):
                problem = "a bias" if name.endswith(".bias") else f"not part of a plain {self.arch} model"
                raise ExportError(f"{self.store.where(name)} is unexpected ({problem})")

    def where(self, kind, layer, suffix="weight"):
        if kind in HF_EXPERT_NAMES:
            return f"{self.path}: experts {HF_EXPERT_NAMES[kind].format(layer, 'E')}"
        return self.store.where(self.name(kind, layer, suffix))

    def stacked_experts(self, kind, layer):
        """One layer's expert matrices of one kind as (n_expert, rows, cols)."""
        c, ff = self.config, self.experts["ff"]
        shape = (c.dim, ff) if kind == "down_exps" else (ff, c.dim)
        names = self.expert_names(kind, layer)
        stacked = np.empty((len(names),) + shape, dtype=np.float32)  # filled in place: one copy in memory
        for e, name in enumerate(names):
            w = self.store.load(name)
            if tuple(w.shape) != shape:
                raise ExportError(f"{self.store.where(name)} has shape {tuple(w.shape)}, expected {shape}")
            stacked[e] = w
        return stacked

    def tensor(self, kind, layer, suffix="weight"):
        """A weight (or bias) as float32; for architecture llama, wq and wk
        (and their biases) go back to RoPE's consecutive pairs (llama.cpp's
        converter does the same); Qwen2 keeps Hugging Face's layout, which
        llama.cpp reads with NEOX RoPE."""
        if kind in HF_EXPERT_NAMES:
            return self.stacked_experts(kind, layer)
        c, name = self.config, self.name(kind, layer, suffix)
        w = self.store.load(name)
        if self.gemma and kind in GEMMA_NORMS:
            w = w + np.float32(1)  # Gemma's RMSNorm scales by 1 + w; the GGUF file holds 1 + w
        if kind in ("wq", "wk") and self.arch == "llama":
            heads = c.n_heads if kind == "wq" else c.n_kv_heads
            if w.shape[:1] != (heads * c.head_size,) or w.ndim != (2 if suffix == "weight" else 1):
                raise ExportError(f"{self.where(kind, layer, suffix)} has shape {tuple(w.shape)}, expected "
                                  f"({heads * c.head_size}{', ' + str(c.dim) if suffix == 'weight' else ''})")
            w = unpermute_rotate_half(w.reshape(w.shape[0], -1), heads).reshape(w.shape)
        return w


# ---------------------------------------------------------------------------
# Meta (consolidated.*.pth + params.json)

META_NAMES = {
    "token_embedding": "tok_embeddings.weight",
    "rms_att": "layers.{}.attention_norm.weight",
    "rms_ffn": "layers.{}.ffn_norm.weight",
    "rms_final": "norm.weight",
    "wq": "layers.{}.attention.wq.weight",
    "wk": "layers.{}.attention.wk.weight",
    "wv": "layers.{}.attention.wv.weight",
    "wo": "layers.{}.attention.wo.weight",
    "w1": "layers.{}.feed_forward.w1.weight",
    "w2": "layers.{}.feed_forward.w2.weight",
    "w3": "layers.{}.feed_forward.w3.weight",
    "wcls": "output.weight",
}
# Model-parallel shards split these along dim 1 (the rest of the matrices along dim 0).
META_SPLIT_DIM1 = ("token_embedding", "wo", "w2")


class MetaModel:
    """Reads Meta's params.json and consolidated.*.pth shards (already in
    consecutive-pair RoPE layout)."""

    def __init__(self, directory):
        self.path = directory
        params_path = os.path.join(directory, "params.json")
        if not os.path.isfile(params_path):
            raise ExportError(f"{params_path}: missing")
        self.shard_paths = sorted(glob.glob(os.path.join(directory, "consolidated.*.pth")))
        if not self.shard_paths:
            raise ExportError(f"{directory}: no consolidated.*.pth")
        self.shards = [torch_load(p) for p in self.shard_paths]
        params = read_json(params_path)
        if not isinstance(params, dict):
            raise ExportError(f"{params_path}: not a JSON object")
        self.config = self.read_params(params_path, params)
        self.check_names()

    def read_params(self, path, params):
        for key in ("dim", "n_layers", "n_heads"):
            if not isinstance(params.get(key), int):
                raise ExportError(f"{path}: {key} is missing or not a whole number")
        if params.get("use_scaled_rope") or params.get("rope_scaling") or params.get("moe"):
            raise ExportError(f"{path}: scaled RoPE or mixture of experts is not supported")
        first = self.shards[0]
        for name in ("tok_embeddings.weight", "layers.0.feed_forward.w1.weight"):
            if name not in first:
                raise ExportError(f"{self.shard_paths[0]}: tensor {name} is missing")
        n = len(self.shards)
        seq_len = params.get("max_seq_len")
        if seq_len is None:
            seq_len = 2048
            print(f"note: {path} gives no max_seq_len; using {seq_len} (see --seq-len)")
        return Config(
            dim=params["dim"], n_layers=params["n_layers"], n_heads=params["n_heads"],
            n_kv_heads=params.get("n_kv_heads") or params["n_heads"],
            hidden_dim=first["layers.0.feed_forward.w1.weight"].shape[0] * n,
            vocab_size=first["tok_embeddings.weight"].shape[0], seq_len=seq_len,
            rope_theta=real(params.get("rope_theta", 10000.0), "rope_theta", path),
            norm_eps=real(params.get("norm_eps", 1e-5), "norm_eps", path),
            shared_classifier="output.weight" not in first)

    def check_names(self):
        c = self.config
        expected = {META_NAMES[kind].format(layer)
                    for kind, per_layer, _ in runc_tensors(c)
                    for layer in (range(c.n_layers) if per_layer else [None])}
        for path, shard in zip(self.shard_paths, self.shards):
            for name in expected - set(shard):
                raise ExportError(f"{path}: tensor {name} is missing")
            for name in set(shard) - expected - {"rope.freqs"}:
                raise ExportError(f"{path}: tensor {name} is unexpected (not part of a plain Llama model)")

    def where(self, kind, layer):
        paths = self.shard_paths[0] if len(self.shard_paths) == 1 else f"{self.path}/consolidated.*.pth"
        return f"{paths}: tensor {META_NAMES[kind].format(layer)}"

    def tensor(self, kind, layer):
        name = META_NAMES[kind].format(layer)
        parts = [torch_to_float32(shard.pop(name), self.where(kind, layer)) for shard in self.shards]
        if kind.startswith("rms_"):  # replicated in every shard
            if any(not np.array_equal(p, parts[0]) for p in parts[1:]):
                raise ExportError(f"{self.where(kind, layer)} differs between shards")
            return parts[0]
        if any(p.ndim != 2 for p in parts):
            raise ExportError(f"{self.where(kind, layer)} is not a matrix")
        return np.concatenate(parts, axis=1 if kind in META_SPLIT_DIM1 else 0)


# ---------------------------------------------------------------------------
# llama2.c checkpoints (versions 0, 1, 2)

LLAMA2C_V1_ORDER = ["rms_att", "rms_ffn", "rms_final", "token_embedding",
                    "wq", "wk", "wv", "wo", "w1", "w2", "w3", "wcls"]
LLAMA2C_V0_ORDER = ["token_embedding", "rms_att", "wq", "wk", "wv", "wo",
                    "rms_ffn", "w1", "w2", "w3", "rms_final", "rope_tables", "wcls"]


class Llama2cModel:
    """Reads a llama2.c checkpoint: v0 (28-byte header), v1 (256-byte "ak42"
    header, fp32) or v2 (Q8_0 matrices: each tensor's int8 values, then its
    float32 scales, one per group_size values)."""

    def __init__(self, path):
        self.path = path
        if os.path.isdir(path):
            raise ExportError(f"{path}: is a directory, not a file")
        if os.path.getsize(path) < 28:
            raise ExportError(f"{path}: too short for a llama2.c checkpoint")
        self.map = np.memmap(path, dtype=np.uint8, mode="r")
        self.size = len(self.map)
        head = bytes(self.map[:41])
        magic = struct.unpack_from("<I", head)[0]
        if magic == RUNC_MAGIC:
            raise ExportError(f"{path}: is already a run.c checkpoint, not a llama2.c one")
        if magic == GGUF_MAGIC:
            raise ExportError(f"{path}: is a GGUF file, not a llama2.c checkpoint: ./run reads it as it is")
        if magic == LLAMA2C_MAGIC:
            if self.size < RUNC_HEADER_SIZE:
                raise ExportError(f"{path}: too short for a llama2.c v1/v2 header")
            self.version = struct.unpack_from("<i", head, 4)[0]
            if self.version not in (1, 2):
                raise ExportError(f"{path}: llama2.c version {self.version} is not supported (0, 1, 2)")
            self.read_header(head[8:36], vocab_sign=False)
            self.config.shared_classifier = head[36] != 0
            self.group_size = struct.unpack_from("<i", head, 37)[0] if self.version == 2 else 0
            self.layout(RUNC_HEADER_SIZE)
        else:
            self.version = 0
            self.read_header(head[:28], vocab_sign=True)
            self.layout(28)

    def read_header(self, raw, vocab_sign):
        if len(raw) < 28:
            raise ExportError(f"{self.path}: too short for a llama2.c header")
        dim, hidden, layers, heads, kv_heads, vocab, seq_len = struct.unpack("<7i", raw)
        if vocab < 0 and not vocab_sign:
            raise ExportError(f"{self.path}: vocab_size {vocab} is negative")
        self.config = Config(dim, hidden, layers, heads, kv_heads, abs(vocab), seq_len,
                             shared_classifier=vocab > 0)
        check_config(self.config, self.path)

    def layout(self, offset):
        """Finds where every tensor starts; checks the file size."""
        c, self.starts = self.config, {}
        shapes = {kind: (shape, per_layer) for kind, per_layer, shape in runc_tensors(
            Config(c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len,
                   shared_classifier=False))}
        shapes["rope_tables"] = ((c.seq_len * c.head_size,), False)
        if self.version == 2:
            self.check_group_size(shapes)
        order = LLAMA2C_V0_ORDER if self.version == 0 else LLAMA2C_V1_ORDER
        for kind in order:
            if kind == "wcls" and c.shared_classifier:
                continue
            shape, per_layer = shapes[kind]
            self.starts[kind] = (offset, shape)
            count = int(np.prod(shape)) * (c.n_layers if per_layer else 1)
            offset += self.stored_bytes(kind, count)
        if offset != self.size:
            raise ExportError(f"{self.path}: file is {self.size} bytes but its llama2.c v{self.version} "
                              f"header describes {offset}")

    def check_group_size(self, shapes):
        gs, norms = self.group_size, ("rms_att", "rms_ffn", "rms_final", "rope_tables")
        if gs <= 0 or any(int(np.prod(s)) % gs for k, (s, _) in shapes.items() if k not in norms):
            raise ExportError(f"{self.path}: group_size {gs} does not divide the tensors")

    def stored_bytes(self, kind, count):
        if self.version < 2 or kind.startswith("rms_"):
            return 4 * count
        return count + 4 * (count // self.group_size)  # int8 values + float32 scales

    def where(self, kind, layer):
        return f"{self.path}: {kind}" + ("" if layer is None else f" of layer {layer}")

    def tensor(self, kind, layer):
        offset, shape = self.starts[kind]
        count = int(np.prod(shape))
        index = layer or 0
        offset += index * self.stored_bytes(kind, count)
        if self.version < 2 or kind.startswith("rms_"):
            return self.map[offset:offset + 4 * count].view("<f4").reshape(shape)
        values = self.map[offset:offset + count].view(np.int8)
        scales = self.map[offset + count:offset + count + 4 * (count // self.group_size)].view("<f4")
        if not (np.isfinite(scales).all() and (scales >= 0).all()):
            raise ExportError(f"{self.where(kind, layer)}: Q8_0 scales are not non-negative numbers "
                              "(an early llama2.c wrote all scales after all values: not supported)")
        groups = values.reshape(-1, self.group_size).astype(np.float32) * scales[:, None]
        return groups.reshape(shape)


# ---------------------------------------------------------------------------
# Tokenizers

SPACE_MARK = "\u2581".encode("utf-8")  # SentencePiece's "▁"


def write_tokenizer_bin(out_path, pieces, scores, bos_id, eos_id, inputs):
    """llama2.c's tokenizer.bin: uint32 max_token_length, then per token
    float32 score (given as its 4 little-endian bytes), int32 byte length,
    bytes. BOS/EOS are written as "\\n<s>\\n"-style, "▁" becomes a space."""
    tokens = []
    for i, piece in enumerate(pieces):
        if i in (bos_id, eos_id):
            piece = b"\n" + piece + b"\n"
        tokens.append(piece.replace(SPACE_MARK, b" "))
    if not tokens:
        raise ExportError(f"{inputs[0]}: the vocabulary is empty")
    with atomic_output(out_path, inputs) as f:
        f.write(struct.pack("<I", max(len(t) for t in tokens)))
        for token, score in zip(tokens, scores):
            f.write(score + struct.pack("<i", len(token)) + token)


def read_varint(buf, pos):
    result, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def proto_fields(buf):
    """Yields (field number, value) of a protobuf message: an int for varints,
    bytes for length-delimited and fixed-size fields."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire in (1, 2, 5):
            if wire == 2:
                size, pos = read_varint(buf, pos)
            else:
                size = 8 if wire == 1 else 4
            value, pos = buf[pos:pos + size], pos + size
            if pos > len(buf):
                raise ValueError("truncated field")
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield field, value


def as_int32(varint):
    return varint - (1 << 64) if varint >= 1 << 63 else varint


SPM_BPE = 2  # TrainerSpec.model_type


class SentencePieceModel:
    """.pieces (bytes), .scores (raw float32 bytes, kept bit-exact), .types
    (1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte: GGUF's
    numbers too), .bos_id, .eos_id, .unk_id, .add_dummy_prefix (a space
    before the text, which Gemma's tokenizer leaves out)."""


def read_sentencepiece(path, data):
    """A SentencePiece ModelProto: pieces = field 1 {1: piece, 2: score,
    3: type}, trainer_spec = field 2 {3: model_type, 40: unk_id, 41: bos_id,
    42: eos_id}, normalizer_spec = field 3 {3: add_dummy_prefix}."""
    m = SentencePieceModel()
    pieces, scores, m.types = [], [], []
    model_type, m.unk_id, bos_id, eos_id, dummy_prefix = 1, 0, 1, 2, 1  # SentencePiece's defaults
    for field, value in proto_fields(data):
        if field == 1:
            piece, score, kind = b"", struct.pack("<f", 0.0), 1
            for f, v in proto_fields(value):
                if f == 1:
                    piece = bytes(v)
                elif f == 2:
                    score = bytes(v)
                elif f == 3:
                    kind = v
            pieces.append(piece)
            scores.append(score)
            m.types.append(kind)
        elif field == 2:
            for f, v in proto_fields(value):
                if f == 3:
                    model_type = v
                elif f == 40:
                    m.unk_id = as_int32(v)
                elif f == 41:
                    bos_id = as_int32(v)
                elif f == 42:
                    eos_id = as_int32(v)
        elif field == 3:
            for f, v in proto_fields(value):
                if f == 3:
                    dummy_prefix = v
    if not pieces:
        raise ExportError(f"{path}: no pieces: not a SentencePiece model")
    if model_type != SPM_BPE:
        raise ExportError(f"{path}: SentencePiece model type {model_type} is not BPE (2); "
                          "run.c's tokenizer is BPE")
    m.pieces, m.scores, m.bos_id, m.eos_id = pieces, scores, bos_id, eos_id
    m.add_dummy_prefix = bool(dummy_prefix)
    return m


def not_a_tokenizer(path, data, e):
    """The refusal for a file that is no tokenizer.model or tokenizer.json:
    what it is instead, when it is one of run.c's own inputs, else the
    parser's reason."""
    if is_tokenizer_bin(data):
        return ExportError(f"{path}: is a llama2.c tokenizer.bin already: give it to ./run as -z")
    magic = struct.unpack_from("<I", data)[0] if len(data) >= 4 else None
    if magic == RUNC_MAGIC:
        return ExportError(f"{path}: is a run.c checkpoint, not a tokenizer: ./run reads it as it is")
    if magic == LLAMA2C_MAGIC:
        return ExportError(f"{path}: is a llama2.c checkpoint, not a tokenizer: give it with --llama2c")
    if len(data) >= 28:
        try:
            Llama2cModel(path)
            return ExportError(f"{path}: is a llama2.c checkpoint, not a tokenizer: give it with --llama2c")
        except (ExportError, ValueError, OSError):
            pass
    return ExportError(f"{path}: not a SentencePiece tokenizer.model or a tokenizer.json ({e})")


def is_tokenizer_bin(data):
    """Whether data is a whole llama2.c tokenizer.bin: max_token_length, then
    (score, length, bytes) records up to the last byte exactly."""
    if len(data) < 4:
        return False
    longest, at, count = struct.unpack_from("<i", data)[0], 4, 0
    if not 0 < longest <= 65536:
        return False
    while at < len(data):
        if at + 8 > len(data):
            return False
        length = struct.unpack_from("<i", data, at + 4)[0]
        if not 0 <= length <= longest or at + 8 + length > len(data):
            return False
        at, count = at + 8 + length, count + 1
    return count >= 3


def export_sentencepiece(path, data, out_path):
    if not data:
        raise ExportError(f"{path}: is empty")
    if data[:4] == struct.pack("<I", GGUF_MAGIC):
        raise ExportError(f"{path}: is a GGUF file, which carries its own tokenizer: give it to ./run as -z")
    try:
        m = read_sentencepiece(path, data)
    except (ValueError, IndexError) as e:
        raise not_a_tokenizer(path, data, e)
    if not m.add_dummy_prefix:
        raise ExportError(f"{path}: add_dummy_prefix is off; run.c's tokenizer.bin always adds it (a GGUF file "
                          "can say otherwise: export the model directory with --hf)")
    write_tokenizer_bin(out_path, m.pieces, m.scores, m.bos_id, m.eos_id, [path])
    return len(m.pieces)


def pre_tokenizer_types(node):
    """The types in a tokenizer.json normalizer/pre_tokenizer tree."""
    if not isinstance(node, dict):
        return []
    children = node.get("normalizers") or node.get("pretokenizers") or []
    return [node.get("type")] + [t for child in children for t in pre_tokenizer_types(child)]


def check_sentencepiece_bpe_json(tj, path):
    """Refuses tokenizer.json files that are not SentencePiece-style BPE."""
    model = tj.get("model") if isinstance(tj.get("model"), dict) else {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise ExportError(f"{path}: model type {model.get('type')!r} is not BPE with a vocab")
    pre, vocab = pre_tokenizer_types(tj.get("pre_tokenizer")), model["vocab"]
    if "ByteLevel" in pre or any(p.startswith("\u0120") for p in vocab) and not any(
            p.startswith("\u2581") for p in vocab):
        raise ExportError(f"{path}: byte-level BPE (Llama 3, Qwen 2) does not fit a tokenizer.bin, which holds "
                          "SentencePiece BPE; export the model directory with --hf, which writes a GGUF file "
                          "with this tokenizer inside")
    if not model.get("byte_fallback"):
        raise ExportError(f"{path}: BPE without byte_fallback is not SentencePiece-style")
    if set(pre) - {"Metaspace"}:
        raise ExportError(f"{path}: pre-tokenizer {pre} is not SentencePiece's")
    normalizers = pre_tokenizer_types(tj.get("normalizer"))
    if set(normalizers) - {"Sequence", "Prepend", "Replace"}:
        raise ExportError(f"{path}: normalizer {normalizers} is not SentencePiece-BPE's")
    if "Prepend" not in normalizers and "Metaspace" not in pre:
        raise ExportError(f"{path}: adds no '▁' prefix; run.c's tokenizer always adds it")


def json_special_id(tj, directory, vocab, which):
    """BOS/EOS id: tokenizer_config.json's bos_token/eos_token, else <s>/</s>."""
    config_path = os.path.join(directory, "tokenizer_config.json")
    token = None
    if os.path.isfile(config_path):
        token = read_json(config_path).get(which + "_token")
        if isinstance(token, dict):
            token = token.get("content")
    token = token or {"bos": "<s>", "eos": "</s>"}[which]
    return vocab.get(token, -1)


def merge_pair(merge, path):
    if isinstance(merge, str):
        merge = merge.split(" ")
    if not isinstance(merge, list) or len(merge) != 2:
        raise ExportError(f"{path}: merge {merge!r} is not a pair of pieces")
    return merge


def export_tokenizer_json(path, out_path):
    try:
        return convert_tokenizer_json(path, out_path)
    except (KeyError, TypeError, AttributeError) as e:
        raise ExportError(f"{path}: malformed tokenizer.json ({type(e).__name__}: {e})")


def convert_tokenizer_json(path, out_path):
    """A SentencePiece-BPE tokenizer.json to tokenizer.bin; scores from merge ranks."""
    tj = read_json(path)
    if not isinstance(tj, dict):
        raise ExportError(f"{path}: not a tokenizer.json object")
    check_sentencepiece_bpe_json(tj, path)
    pieces, scores, _, bos_id, eos_id, _, _ = spm_json_vocab(tj, path)
    config_path = os.path.join(os.path.dirname(os.path.abspath(path)), "tokenizer_config.json")
    write_tokenizer_bin(out_path, [p.encode("utf-8") for p in pieces],
                        [struct.pack("<f", s) for s in scores], bos_id, eos_id, [path, config_path])
    return len(pieces)


def spm_json_vocab(tj, path):
    """Pieces, scores (from merge ranks, see the top of this file), piece
    types, BOS and EOS ids ( -1 if absent), added tokens {text: id} and the
    unknown token's id (or None) of a SentencePiece-BPE tokenizer.json."""
    vocab = dict(tj["model"]["vocab"])
    added = {}
    for entry in tj.get("added_tokens") or []:
        if vocab.get(entry["content"], entry["id"]) != entry["id"]:
            raise ExportError(f"{path}: added token {entry['content']!r} has two ids")
        vocab[entry["content"]] = added[entry["content"]] = entry["id"]
    pieces = [None] * len(vocab)
    for piece, i in vocab.items():
        if not isinstance(i, int) or not 0 <= i < len(vocab) or pieces[i] is not None:
            raise ExportError(f"{path}: token ids are not 0..{len(vocab) - 1} each used once")
        pieces[i] = piece
    first_rank = {}
    for rank, merge in enumerate(tj["model"].get("merges") or []):
        left, right = merge_pair(merge, path)
        if left + right not in vocab or left not in vocab or right not in vocab:
            raise ExportError(f"{path}: merge {left!r} + {right!r} uses a piece not in the vocabulary")
        first_rank.setdefault(left + right, rank)
    special = {a["content"] for a in tj.get("added_tokens") or [] if a.get("special")}
    unk = tj["model"].get("unk_token")
    scores, types = [], []
    for piece in pieces:
        byte = re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", piece)
        if piece in first_rank:
            scores.append(-float(first_rank[piece]))
        elif len(piece) == 1 or piece in special or byte:
            scores.append(0.0)
        else:
            scores.append(-1e9)  # no merge makes it: Hugging Face never produces it
        types.append(TOKEN_UNKNOWN if piece == unk else TOKEN_CONTROL if piece in special else
                     TOKEN_BYTE if byte else TOKEN_NORMAL)
    directory = os.path.dirname(os.path.abspath(path))
    bos_id = json_special_id(tj, directory, vocab, "bos")
    eos_id = json_special_id(tj, directory, vocab, "eos")
    return pieces, scores, types, bos_id, eos_id, added, vocab.get(unk)


def export_tokenizer(path, out_path):
    if os.path.isdir(path):
        for name in ("tokenizer.model", "tokenizer.json"):
            if os.path.isfile(os.path.join(path, name)):
                return export_tokenizer(os.path.join(path, name), out_path)
        raise ExportError(f"{path}: no tokenizer.model or tokenizer.json")
    with open(path, "rb") as f:
        data = f.read()
    if data.lstrip()[:1] == b"{":
        return export_tokenizer_json(path, out_path)
    return export_sentencepiece(path, data, out_path)


# ---------------------------------------------------------------------------
# Tokenizers carried inside a GGUF file (tokenizer.ggml.*), as llama.cpp's
# converter and gguf-py's SpecialVocab write them.

# tokenizer.ggml.pre by the pre-tokenizer of a byte-level tokenizer.json.
# llama.cpp's converter recognizes these by hashing the ids of a fixed text,
# which needs the tokenizers library; the splitting rules themselves are in
# tokenizer.json, so they are recognized here by what they are.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
BYTE_LEVEL_PRE = {
    ("Split", LLAMA3_SPLIT, "ByteLevel"): "llama-bpe",   # Llama 3.x
    ("Split", QWEN2_SPLIT, "ByteLevel"): "qwen2",        # Qwen2, Qwen2.5
    ("Digits", "ByteLevel+regex"): "smollm",             # SmolLM, SmolLM2 (StarCoder's)
    ("ByteLevel+regex",): "gpt-2",                       # GPT-2's own pattern
}
# Tokens llama.cpp treats as the end of a turn, found by their text.
END_OF_TURN = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>")


def byte_level_pre(tj, path):
    """tokenizer.ggml.pre for a tokenizer.json's pre_tokenizer, or a refusal."""
    node = tj.get("pre_tokenizer")
    steps = node.get("pretokenizers") if isinstance(node, dict) and node.get("type") == "Sequence" else [node]
    shape = []
    for step in steps if isinstance(steps, list) else [steps]:
        kind = step.get("type") if isinstance(step, dict) else None
        if kind == "Split":
            pattern = step.get("pattern") if isinstance(step.get("pattern"), dict) else {}
            if step.get("behavior") != "Isolated" or step.get("invert"):
                shape.append(f"Split({step.get('behavior')}, invert {step.get('invert')})")
            shape += ["Split", pattern.get("Regex", pattern.get("String"))]
        elif kind == "ByteLevel":
            if step.get("add_prefix_space"):
                raise ExportError(f"{path}: ByteLevel with add_prefix_space is not supported")
            shape.append("ByteLevel+regex" if step.get("use_regex", True) else "ByteLevel")
        elif kind == "Digits" and step.get("individual_digits"):
            shape.append("Digits")
        else:
            shape.append(json.dumps(step)[:80])
    pre = BYTE_LEVEL_PRE.get(tuple(shape))
    if pre is None:
        raise ExportError(f"{path}: pre-tokenizer {' + '.join(str(s) for s in shape)[:200]!s} is not one "
                          f"run.c knows ({', '.join(BYTE_LEVEL_PRE.values())})")
    return pre


def is_byte_level(tj):
    return ("ByteLevel" in pre_tokenizer_types(tj.get("pre_tokenizer"))
            or (isinstance(tj.get("decoder"), dict) and tj["decoder"].get("type") == "ByteLevel"))


def token_content(entry):
    """A tokenizer_config.json *_token value: a string or {"content": ...}."""
    if isinstance(entry, dict):
        entry = entry.get("content")
    return entry if isinstance(entry, str) else None


def template_specials(tj):
    """(first, last) SpecialToken ids of the post-processor's single template."""
    node = tj.get("post_processor")
    for proc in (node.get("processors", [node]) if isinstance(node, dict) else []):
        if isinstance(proc, dict) and proc.get("type") == "TemplateProcessing":
            single = proc.get("single") or []
            first = single[0].get("SpecialToken", {}).get("id") if len(single) > 1 else None
            last = single[-1].get("SpecialToken", {}).get("id") if len(single) > 1 else None
            return first, last
    return None, None


class GgufTokenizer:
    """A tokenizer as tokenizer.ggml.* metadata: .path, .n_tokens, .metadata, .describe."""

    def __init__(self, path, n_tokens, metadata, describe):
        self.path, self.n_tokens, self.metadata, self.describe = path, n_tokens, metadata, describe


def hf_tokenizer_config(directory):
    path = os.path.join(directory, "tokenizer_config.json")
    tc = read_json(path) if os.path.isfile(path) else {}
    if not isinstance(tc, dict):
        raise ExportError(f"{path}: not a JSON object")
    return tc


def chat_template_metadata(directory, tc):
    """tokenizer.chat_template from tokenizer_config.json (a string, or a list
    of named templates: "default" and tokenizer.chat_template.NAME), else
    from chat_template.jinja."""
    template = tc.get("chat_template")
    jinja = os.path.join(directory, "chat_template.jinja")
    if template is None and os.path.isfile(jinja):
        with open(jinja, encoding="utf-8") as f:
            template = f.read()
    if template is None:
        return []
    if isinstance(template, str):
        return [("tokenizer.chat_template", GGUF_STRING, template)]
    if isinstance(template, list) and all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                          and isinstance(t.get("template"), str) for t in template):
        return [("tokenizer.chat_template" + ("" if t["name"] == "default" else "." + t["name"]), GGUF_STRING,
                 t["template"]) for t in template]
    raise ExportError(f"{os.path.join(directory, 'tokenizer_config.json')}: chat_template is neither a string "
                      "nor a list of named templates")


def special_token_metadata(path, tc, hf_cfg, added, n_tokens, fallback):
    """tokenizer.ggml.{bos,eos,unknown,padding}_token_id as gguf-py's
    SpecialVocab finds them: tokenizer_config.json's *_token looked up among
    the added tokens, else config.json's *_token_id, else fallback[kind]."""
    meta = []
    for kind, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding")):
        token = token_content(tc.get(f"{kind}_token"))
        tid = added.get(token) if token is not None else None
        if tid is None and isinstance(hf_cfg.get(f"{kind}_token_id"), int):
            tid = hf_cfg[f"{kind}_token_id"]
        if tid is None:
            tid = fallback.get(kind)
        if tid is None:
            continue
        if not 0 <= tid < n_tokens:
            raise ExportError(f"{path}: {kind} token id {tid} is outside the vocabulary of {n_tokens}")
        meta.append((f"tokenizer.ggml.{key}_token_id", GGUF_U32, tid))
    return meta


def pad_vocabulary(path, tokens, types, vocab_size, scores=None, pad_score=-1000.0):
    """Pads to vocab_size (the embedding's rows) with unused [PADn] tokens, as
    llama.cpp does for models whose embedding has spare rows."""
    if len(tokens) > vocab_size:
        raise ExportError(f"{path}: {len(tokens)} tokens, more than the model's vocab_size {vocab_size}")
    for i in range(len(tokens), vocab_size):
        tokens.append(f"[PAD{i}]")
        types.append(TOKEN_UNUSED)
        if scores is not None:
            scores.append(pad_score)


def byte_level_tokenizer(path, tj, directory, hf_cfg, vocab_size):
    """A byte-level BPE tokenizer.json (Llama 3, Qwen2, SmolLM) as
    tokenizer.ggml.model "gpt2": tokens spelled as in tokenizer.json (GPT-2's
    byte-to-unicode letters; added tokens as their text), merges in rank
    order, token types (normal; control for added tokens flagged special,
    user defined for the other added ones, which Hugging Face also finds in
    typed text; unused for padding). llama.cpp's converter makes every
    "<|...|>" control; the shared qwtiny file, like Hugging Face, follows
    the flag (Qwen's <|fim_prefix|> is user defined)."""
    model = tj.get("model") if isinstance(tj.get("model"), dict) else {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise ExportError(f"{path}: model type {model.get('type')!r} is not BPE with a vocab")
    if model.get("byte_fallback"):
        raise ExportError(f"{path}: byte-level BPE with byte_fallback is not supported")
    pre = byte_level_pre(tj, path)
    normalizer = tj.get("normalizer")
    if normalizer is not None and normalizer != {"type": "NFC"}:
        raise ExportError(f"{path}: normalizer {json.dumps(normalizer)[:80]} is not supported")
    if normalizer is not None:
        print(f"note: {path}: the NFC normalizer is not stored (llama.cpp does not apply it either); "
              "text already in NFC tokenizes the same")
    vocab = dict(model["vocab"])
    added = {}
    for entry in tj.get("added_tokens") or []:
        content, tid = entry["content"], entry["id"]
        if not isinstance(content, str) or not isinstance(tid, int) or content in added:
            raise ExportError(f"{path}: added token {content!r} is malformed or listed twice")
        added[content] = tid
    by_id = {}
    for piece, tid in list(vocab.items()) + list(added.items()):
        if not isinstance(tid, int) or tid < 0 or by_id.get(tid, piece) != piece:
            raise ExportError(f"{path}: token id {tid} is invalid or names two tokens")
        by_id[tid] = piece
    n = len(by_id)
    if sorted(by_id) != list(range(n)):
        raise ExportError(f"{path}: token ids are not 0..{n - 1} each used once")
    special = {e["content"] for e in tj.get("added_tokens") or [] if e.get("special")}
    added_ids = {tid: content for content, tid in added.items()}
    tokens, types = [], []
    for tid in range(n):
        if tid in added_ids:
            text = added_ids[tid]
            if text in special:
                types.append(TOKEN_CONTROL)
            else:
                text = text.replace("\u2581", " ")
                types.append(TOKEN_USER_DEFINED)
            tokens.append(text)
        else:
            tokens.append(by_id[tid])
            types.append(TOKEN_NORMAL)
    pad_vocabulary(path, tokens, types, vocab_size)
    merges = []
    for merge in model.get("merges") or []:
        left, right = merge_pair(merge, path)
        if not isinstance(merge, str):  # the list form may hold spaces, which the string form spells "Ġ"
            left, right = left.replace(" ", "\u0120"), right.replace(" ", "\u0120")
        merges.append(f"{left} {right}")
    tc = hf_tokenizer_config(directory)
    meta = [("tokenizer.ggml.model", GGUF_STRING, "gpt2"), ("tokenizer.ggml.pre", GGUF_STRING, pre),
            ("tokenizer.ggml.tokens", (GGUF_ARRAY, GGUF_STRING), tokens),
            ("tokenizer.ggml.token_type", (GGUF_ARRAY, GGUF_I32), types),
            ("tokenizer.ggml.merges", (GGUF_ARRAY, GGUF_STRING), merges)]
    meta += special_token_metadata(path, tc, hf_cfg, added, len(tokens), {})
    eot = next((added[t] for t in END_OF_TURN if t in added and types[added[t]] == TOKEN_CONTROL), None)
    if eot is not None:
        meta.append(("tokenizer.ggml.eot_token_id", GGUF_U32, eot))
    first, last = template_specials(tj)
    bos_text, eos_text = token_content(tc.get("bos_token")), token_content(tc.get("eos_token"))
    add_bos = tc.get("add_bos_token") if isinstance(tc.get("add_bos_token"), bool) else (
        first is not None and first == (bos_text or first))
    add_eos = tc.get("add_eos_token") if isinstance(tc.get("add_eos_token"), bool) else (
        last is not None and last == (eos_text or last))
    meta += [("tokenizer.ggml.add_bos_token", GGUF_BOOL, add_bos),
             ("tokenizer.ggml.add_eos_token", GGUF_BOOL, add_eos)]
    meta += chat_template_metadata(directory, tc)
    return GgufTokenizer(path, len(tokens), meta, f"gpt2 ({pre}), {n} tokens, {len(merges)} merges")


def apply_added_tokens(path, tc, tokens, scores, types):
    """tokenizer_config.json's added_tokens_decoder over the pieces, as
    llama.cpp's converter applies it: each listed id takes the listed text
    and score -1000, control when flagged special, else user defined (its
    "\u2581" read as a space). Returns {text: id} of the added tokens."""
    decoder = tc.get("added_tokens_decoder") or {}
    if not isinstance(decoder, dict):
        raise ExportError(f"{path}: added_tokens_decoder is not an object of ids")
    added = {}
    for key, entry in decoder.items():
        content = token_content(entry)
        if not key.isdigit() or not isinstance(content, str):
            raise ExportError(f"{path}: added_tokens_decoder entry {key!r} is not an id with a content")
        tid = int(key)
        if tid >= len(tokens):
            continue  # beyond the embedding, as the converter skips it
        special = isinstance(entry, dict) and entry.get("special") is True
        tokens[tid] = content if special else content.replace("\u2581", " ")
        scores[tid] = -1000.0
        types[tid] = TOKEN_CONTROL if special else TOKEN_USER_DEFINED
        added[content] = tid
    return added


def sentencepiece_tokenizer(path, directory, hf_cfg, vocab_size, tj=None, gemma=False):
    """A SentencePiece tokenizer.model (or a SentencePiece-BPE tokenizer.json)
    as tokenizer.ggml.model "llama": pieces, scores, piece types. From a
    tokenizer.model, tokenizer.ggml.add_space_prefix says its
    add_dummy_prefix where that is off, and always for Gemma (gemma), whose
    added_tokens_decoder also applies, as llama.cpp's converter does."""
    space_prefix = True
    if tj is None:
        with open(path, "rb") as f:
            data = f.read()
        try:
            spm = read_sentencepiece(path, data)
        except (ValueError, IndexError) as e:
            raise not_a_tokenizer(path, data, e)
        tokens = [p.decode("utf-8", "replace") for p in spm.pieces]
        scores = [struct.unpack("<f", s)[0] for s in spm.scores]
        types, added, fallback = spm.types, {}, {"bos": spm.bos_id, "eos": spm.eos_id, "unk": spm.unk_id}
        space_prefix = spm.add_dummy_prefix
    else:
        tokens, scores, types, bos, eos, added, unk = spm_json_vocab(tj, path)
        fallback = {"bos": bos, "eos": eos, "unk": unk}
    fallback = {k: v for k, v in fallback.items() if v is not None and 0 <= v < len(tokens)}
    n = len(tokens)
    # llama.cpp's converter gives Gemma's spare rows -10000 (its SentencePiece path)
    pad_vocabulary(path, tokens, types, vocab_size, scores, -10000.0 if gemma else -1000.0)
    tc = hf_tokenizer_config(directory)
    if tj is None and gemma:
        added = apply_added_tokens(os.path.join(directory, "tokenizer_config.json"), tc, tokens, scores, types)
    meta = [("tokenizer.ggml.model", GGUF_STRING, "llama")]
    meta += [("tokenizer.ggml.pre", GGUF_STRING, "default")] if gemma else []
    meta += [("tokenizer.ggml.tokens", (GGUF_ARRAY, GGUF_STRING), tokens),
             ("tokenizer.ggml.scores", (GGUF_ARRAY, GGUF_F32), scores),
             ("tokenizer.ggml.token_type", (GGUF_ARRAY, GGUF_I32), types)]
    meta += special_token_metadata(path, tc, hf_cfg, added, len(tokens), fallback)
    add_bos = tc.get("add_bos_token") if isinstance(tc.get("add_bos_token"), bool) else True
    add_eos = tc.get("add_eos_token") if isinstance(tc.get("add_eos_token"), bool) else False
    meta += [("tokenizer.ggml.add_bos_token", GGUF_BOOL, add_bos),
             ("tokenizer.ggml.add_eos_token", GGUF_BOOL, add_eos)]
    if gemma or not space_prefix:
        meta.append(("tokenizer.ggml.add_space_prefix", GGUF_BOOL, space_prefix))
    meta += chat_template_metadata(directory, tc)
    return GgufTokenizer(path, len(tokens), meta, f"llama (SentencePiece), {n} tokens")


def hf_gguf_tokenizer(directory, tj, hf_cfg, vocab_size):
    """The tokenizer of a Hugging Face directory for its GGUF file:
    tokenizer.json if byte-level BPE, else tokenizer.model, else a
    SentencePiece-BPE tokenizer.json."""
    json_path, model_path = (os.path.join(directory, n) for n in ("tokenizer.json", "tokenizer.model"))
    try:
        if tj is not None and is_byte_level(tj):
            return byte_level_tokenizer(json_path, tj, directory, hf_cfg, vocab_size)
        if os.path.isfile(model_path):
            return sentencepiece_tokenizer(model_path, directory, hf_cfg, vocab_size,
                                           gemma=hf_cfg.get("model_type") == "gemma3_text")
        if tj is not None:
            check_sentencepiece_bpe_json(tj, json_path)
            return sentencepiece_tokenizer(json_path, directory, hf_cfg, vocab_size, tj)
    except (KeyError, TypeError, AttributeError) as e:
        raise ExportError(f"{json_path}: malformed tokenizer.json ({type(e).__name__}: {e})")
    raise ExportError(f"{directory}: no tokenizer.json or tokenizer.model; a GGUF file carries its tokenizer")


# ---------------------------------------------------------------------------
# Command line

class OneLineParser(argparse.ArgumentParser):
    """Usage errors in one line, as run.c's: the problem, then where the usage is."""

    def error(self, message):
        self.exit(2, f"export.py: {message} (export.py -h for usage)\n")


def parse_args(argv):
    argv = sys.argv[1:] if argv is None else argv
    options = [a.split("=", 1)[0] for a in argv if a.startswith("--")]
    for name in options:
        if options.count(name) > 1:
            print(f"export.py: {name}: given twice (export.py -h for usage)", file=sys.stderr)
            sys.exit(2)
    parser = OneLineParser(
        prog="export.py", description="Convert Llama checkpoints and tokenizers for run.c.",
        epilog="examples: export.py model.bin --hf DIR | export.py --tokenizer tokenizer.model tok.bin")
    parser.add_argument("out", metavar="OUT.bin", help="the file to write")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--hf", metavar="DIR", help="Hugging Face Llama, Qwen2, Qwen3, Qwen3-MoE or Gemma 3 directory")
    source.add_argument("--meta", metavar="DIR", help="Meta consolidated.*.pth + params.json directory")
    source.add_argument("--llama2c", metavar="FILE", help="llama2.c checkpoint (version 0, 1 or 2)")
    source.add_argument("--tokenizer", metavar="FILE",
                        help="SentencePiece tokenizer.model or tokenizer.json -> tokenizer.bin")
    parser.add_argument("--seq-len", type=int, metavar="N", help="cap the context length")
    parser.add_argument("--dtype", default="f32",
                        help="weight type of the matrices: " + ", ".join(WEIGHT_TYPES) +
                             " (GGUF output: f32, f16, q8_0, q4_0)")
    parser.add_argument("--gguf", action="store_true",
                        help="with --hf: write GGUF (weights and tokenizer in one file) even for a model "
                             "run.c's own format can hold")
    args = parser.parse_args(argv)
    if args.dtype not in WEIGHT_TYPES:
        parser.error(f"--dtype {args.dtype}: not supported (supported: {', '.join(WEIGHT_TYPES)})")
    if args.seq_len is not None and args.seq_len <= 0:
        parser.error("--seq-len must be positive")
    if args.tokenizer and (args.seq_len is not None or args.dtype != "f32"):
        parser.error("--seq-len and --dtype apply to checkpoints, not to --tokenizer")
    if args.gguf and not args.hf:
        parser.error("--gguf applies to --hf directories")
    # OUT's folder is checked now, not after the conversion
    folder = os.path.dirname(os.path.abspath(args.out)) if args.out else ""
    if not args.out or args.out.endswith(os.sep) or os.path.isdir(args.out):
        parser.error(f"OUT {args.out!r}: give the name of a file to write")
    if not os.path.isdir(folder):
        parser.error(f"OUT {args.out}: the folder {folder} does not exist")
    return args


def export_model(args):
    if args.hf:
        source, inputs = HFModel(args.hf), glob.glob(os.path.join(args.hf, "*"))
    elif args.meta:
        source, inputs = MetaModel(args.meta), glob.glob(os.path.join(args.meta, "*"))
    else:
        source, inputs = Llama2cModel(args.llama2c), [args.llama2c]
    c = source.config
    if args.seq_len is not None:
        if args.seq_len > c.seq_len:
            print(f"note: --seq-len {args.seq_len} is above the model's {c.seq_len}; keeping {c.seq_len}")
        c.seq_len = min(c.seq_len, args.seq_len)
    if args.hf:
        # GGUF when the tokenizer is byte-level BPE or the model is more than
        # run.c's own format holds; tokenizer.json is read once, here.
        json_path = os.path.join(args.hf, "tokenizer.json")
        tj = read_json(json_path) if os.path.isfile(json_path) else None
        if tj is not None and not isinstance(tj, dict):
            raise ExportError(f"{json_path}: not a tokenizer.json object")
        if args.gguf or source.needs_gguf or (tj is not None and is_byte_level(tj)):
            tokenizer = hf_gguf_tokenizer(args.hf, tj, source.hf_config, c.vocab_size)
            export_hf_gguf(args.out, source, tokenizer, args.dtype, inputs)
            rope = source.rope_scaling["type"] + " RoPE scaling, " if source.rope_scaling else ""
            biases = "biases, " if source.biases else ""
            if source.experts:
                e = source.experts
                biases += f"{e['count']} experts ({e['used']} used, expert ff {e['ff']}), "
            if c.head_dim:
                biases += f"head size {c.head_dim}, "
            print(f"wrote {args.out}: GGUF v{GGUF_VERSION} {source.arch} {args.dtype}, {rope}{biases}"
                  f"{c.describe()}; tokenizer {tokenizer.describe}")
            return
        eos = source.hf_config.get("eos_token_id")
        if isinstance(eos, list):
            print(f"note: eos_token_id lists {eos}; the header holds only {c.eos_id}")
    write_runc(args.out, source, args.dtype, inputs)
    version = RUNC_VERSION_TYPES if len(set(matrix_types(c, args.dtype))) > 1 else RUNC_VERSION
    print(f"wrote {args.out}: run.c v{version} {args.dtype}, {c.describe()}")


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM: unwinds through atomic_output, which removes its temp file."""


def on_signal(signum, frame):
    raise Interrupted(signum)


def main(argv=None):
    args = parse_args(argv)
    if np is None:
        sys.exit(NO_NUMPY)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if args.tokenizer:
            n = export_tokenizer(args.tokenizer, args.out)
            print(f"wrote {args.out}: {n} tokens")
        else:
            export_model(args)
    except ExportError as e:
        print(f"export.py: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"export.py: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except MemoryError:
        print("export.py: out of memory", file=sys.stderr)
        return 1
    except RecursionError:
        print("export.py: an input file is nested too deeply to read", file=sys.stderr)
        return 1
    except Interrupted as e:
        print(f"export.py: interrupted; {args.out} not written", file=sys.stderr)
        return 128 + e.args[0]
    return 0


if __name__ == "__main__":
    sys.exit(main())
