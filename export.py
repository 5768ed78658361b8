#!/usr/bin/env python3
"""export.py: convert Llama-family checkpoints and tokenizers for run.c.

Checkpoints, written in run.c's checkpoint format version 1 (README.md):

    python3 export.py OUT.bin --hf DIR       [--seq-len N] [--dtype T]
    python3 export.py OUT.bin --meta DIR     [--seq-len N] [--dtype T]
    python3 export.py OUT.bin --llama2c FILE [--seq-len N] [--dtype T]

  --hf DIR       a Hugging Face Llama directory: config.json and
                 model.safetensors, sharded model-*-of-*.safetensors (with
                 model.safetensors.index.json), or pytorch_model*.bin (needs
                 torch). Safetensors may hold F32, F16 or BF16 tensors.
  --meta DIR     Meta's params.json and consolidated.*.pth (needs torch).
  --llama2c FILE a llama2.c checkpoint, version 0, 1 or 2 (Q8_0, dequantized).
  --seq-len N    cap the context length stored in the header.
  --dtype T      weight type of the matrices: f32 (default), f16, q8_0, q4_0,
                 q5_0, q4_k, q6_k, or q4_k_m (llama-quantize's mix of Q4_K and
                 Q6_K, written as run.c format version 2): GGUF's blocks,
                 rounded as run.c and llama-quantize round, byte for byte as
                 ./run -m quantize writes them; norms stay f32.

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
import struct
import sys
import tempfile

try:
    import numpy as np
except ImportError:  # a python3 without numpy: one line, not a traceback
    sys.exit("export.py: needs numpy, which this python3 (%s) does not have: install it "
             "(Debian/Ubuntu: apt-get install python3-numpy, then run /usr/bin/python3 export.py ...; "
             "elsewhere: pip install numpy)" % sys.executable)

RUNC_MAGIC = 0x434E5552  # the bytes "RUNC"
RUNC_VERSION = 1
RUNC_VERSION_TYPES = 2  # a mix: a table of each matrix's type follows the header
RUNC_HEADER_SIZE = 256
RUNC_ALIGN = 64
LLAMA2C_MAGIC = 0x616B3432  # "ak42"

# Output weight types: --dtype name -> GGML type id in the header. q8_0 (8) and
WEIGHT_TYPES = {"f32": 0, "f16": 1, "q8_0": 8, "q4_0": 2, "q5_0": 6, "q4_k": 12, "q6_k": 14, "q4_k_m": None}
QK = 32  # values per Q8_0 / Q4_0 block

# The largest sizes run.c accepts (run.c's MAX_* limits).
MAX_DIM, MAX_HIDDEN, MAX_LAYERS = 1 << 16, 1 << 20, 1 << 12
MAX_VOCAB, MAX_SEQ_LEN = 1 << 24, 1 << 24


class ExportError(Exception):
    """A refusal: its message is one line, "FILE: problem"."""


# ---------------------------------------------------------------------------
# Model description and the run.c writer

class Config:
    """The header fields of a run.c checkpoint."""

    def __init__(self, dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len,
                 rope_theta=10000.0, norm_eps=1e-5, shared_classifier=True, bos_id=1, eos_id=2):
        self.dim, self.hidden_dim, self.n_layers = dim, hidden_dim, n_layers
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.vocab_size, self.seq_len = vocab_size, seq_len
        self.rope_theta, self.norm_eps = rope_theta, norm_eps
        self.shared_classifier = bool(shared_classifier)
        self.bos_id, self.eos_id = bos_id, eos_id

    @property
    def head_size(self):
        return self.dim // self.n_heads

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
    if c.dim % c.n_heads or c.n_heads % c.n_kv_heads:
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
    if dtype in ("q4_k", "q6_k", "q5_0"):  # rows padded with zeros to whole blocks, as run.c pads
        block = QK if dtype == "q5_0" else QK_K
        padded = np.zeros((x.shape[0], -(-x.shape[1] // block) * block), dtype=np.float32)
        padded[:, :x.shape[1]] = x
        return {"q4_k": quantize_q4_k, "q6_k": quantize_q6_k, "q5_0": quantize_q5_0}[dtype](padded)
    return quantize_blocks(x, dtype)


def matrix_types(c, dtype):
    """Each matrix's type in file order (RUNC version 2's table order)."""
    types = []
    for kind, per_layer, shape in runc_tensors(c):
        if not kind.startswith("rms_"):
            for layer in range(c.n_layers) if per_layer else [0]:
                types.append(q4_k_m_type(c, kind, layer, shape[1]) if dtype == "q4_k_m" else dtype)
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
            f.write(runc_header(c, WEIGHT_TYPES["q4_k"], RUNC_VERSION_TYPES))
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
# K-quants (Q4_K, Q6_K) and the Q4_K_M mix, rounded exactly as run.c's
# quantize_q4_k / quantize_q6_k (and llama-quantize without an importance
# matrix). Every float operation is a float32 one in C's order: sums run
# over the values one at a time (vectorized across sub-blocks only), and
# a * b + c is rounded twice, as C without FP contraction does.

F32 = np.float32
QK_K = 256
GROUP_MAX_EPS = F32(1e-15)


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


def fit_scale_min(x, w, nmax, rmin, rdelta, nstep):
    """run.c's fit_scale_min (least squares, no MAD) for rows of x: (scale, min, L)."""
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
            best = best + w[:, i] * (diff * diff)
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
                err = err + w[:, i] * (diff * diff)
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


def quantize_q4_k(x):
    """Rows of whole super-blocks -> Q4_K blocks (bytes), as run.c's quantize_q4_k."""
    nb = x.shape[0] * x.shape[1] // QK_K
    sub = x.reshape(nb * 8, 32)
    sum_x2 = np.zeros(len(sub), dtype=F32)
    for i in range(32):
        sum_x2 = sum_x2 + sub[:, i] * sub[:, i]
    av_x = np.sqrt(sum_x2 / F32(32)).astype(F32)
    w = (av_x[:, None] + np.abs(sub)).astype(F32)
    scales, mins, L = fit_scale_min(sub, w, 15, -1.0, 0.1, 20)
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
            new = np.clip(nearest_int((xb[:, j] + dm[:, None]) / dj[:, None]), 0, 15)
            L[:, j] = np.where((dj != 0)[:, None], new, L[:, j])
    L = L.reshape(nb, 4, 2, 32)
    blocks = np.empty(nb, dtype=[("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("qs", "u1", 128)])
    blocks["d"], blocks["dmin"], blocks["scales"] = d, dmin, packed
    blocks["qs"] = (L[:, :, 0] | L[:, :, 1] << 4).reshape(nb, 128).astype(np.uint8)
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


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def q4_k_m_type(c, kind, layer, row_len):
    """run.c's matrix_dtype for the Q4_K_M mix (llama-quantize's rules, README)."""
    classifier = kind == "wcls" or (kind == "token_embedding" and c.shared_classifier)
    t = "q4_k"
    if classifier or (kind in ("wv", "w2") and use_more_bits(layer, c.n_layers)):
        t = "q6_k"
    if row_len % QK_K:
        t = "f16" if row_len % QK else "q8_0" if t == "q6_k" else "q5_0"
    return t


# ---------------------------------------------------------------------------
# Files

@contextlib.contextmanager
def atomic_output(path, inputs):
    """A file object for path, written to OUT.tmp-XXXX and renamed at the end.
    Refuses to overwrite any of inputs; removes the temp file on failure."""
    if os.path.isdir(path):
        raise ExportError(f"{path}: is a directory")
    for p in inputs:
        if os.path.exists(path) and os.path.exists(p) and os.path.samefile(path, p):
            raise ExportError(f"{path}: is an input file; refusing to overwrite it")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-", dir=directory)
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

    DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}

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

    def add(self, path, reader, names):
        for name in names:
            if name in self.files:
                raise ExportError(f"{path}: tensor {name} is also in {self.files[name][0]}")
            self.files[name] = (path, reader)

    def where(self, name):
        return f"{self.files[name][0]}: tensor {name}"

    def load(self, name):
        """Loads one tensor as float32; a torch tensor is dropped from memory once read."""
        path, reader = self.files[name]
        if isinstance(reader, SafetensorsFile):
            return reader.load(name)
        return torch_to_float32(reader.pop(name), self.where(name))


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


def hf_config(directory, store):
    """The run.c Config of a Hugging Face Llama directory, or a refusal."""
    path = os.path.join(directory, "config.json")
    cfg = read_json(path)
    if not isinstance(cfg, dict):
        raise ExportError(f"{path}: not a JSON object")
    check_hf_architecture(cfg, path)
    get = lambda key, default=None: cfg[key] if cfg.get(key) is not None else default
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "vocab_size"):
        if not isinstance(cfg.get(key), int):
            raise ExportError(f"{path}: {key} is missing or not a whole number")
    dim, n_heads = cfg["hidden_size"], cfg["num_attention_heads"]
    if n_heads <= 0 or dim % n_heads:
        raise ExportError(f"{path}: hidden_size {dim} is not a multiple of num_attention_heads {n_heads}")
    if get("head_dim", dim // n_heads) != dim // n_heads:
        raise ExportError(f"{path}: head_dim {cfg['head_dim']} differs from hidden_size / "
                          f"num_attention_heads = {dim // n_heads}; run.c needs them equal")
    rope = get("rope_parameters", {})
    eos = get("eos_token_id", 2)
    if isinstance(eos, list):
        if not eos:
            raise ExportError(f"{path}: eos_token_id is an empty list")
        print(f"note: {path}: eos_token_id lists {eos}; the header holds only {eos[0]}")
        eos = eos[0]
    return Config(
        dim=dim, hidden_dim=cfg["intermediate_size"], n_layers=cfg["num_hidden_layers"],
        n_heads=n_heads, n_kv_heads=get("num_key_value_heads", n_heads),
        vocab_size=cfg["vocab_size"], seq_len=get("max_position_embeddings", 2048),
        rope_theta=real(rope.get("rope_theta", get("rope_theta", 10000.0)), "rope_theta", path),
        norm_eps=real(get("rms_norm_eps", 1e-6), "rms_norm_eps", path),  # LlamaConfig's default
        shared_classifier=bool(get("tie_word_embeddings", False)) or "lm_head.weight" not in store.files,
        bos_id=get("bos_token_id", 1), eos_id=eos)


def check_hf_architecture(cfg, path):
    """Refuses configs that are not a plain Llama run.c can compute exactly."""
    model_type, archs = cfg.get("model_type"), cfg.get("architectures")
    if model_type is None and archs is None:
        raise ExportError(f"{path}: has neither model_type nor architectures")
    if model_type is not None and model_type != "llama":
        raise ExportError(f"{path}: model_type is {model_type!r}, not 'llama'")
    if archs is not None and archs != ["LlamaForCausalLM"]:
        raise ExportError(f"{path}: architectures {archs} is not ['LlamaForCausalLM']")
    for key in ("attention_bias", "mlp_bias"):
        if cfg.get(key):
            raise ExportError(f"{path}: {key} is true; run.c has no bias terms")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ExportError(f"{path}: hidden_act {cfg['hidden_act']!r} is not silu")
    for key in ("rope_scaling", "rope_parameters"):
        rope = cfg.get(key)
        if rope is None:
            continue
        implied = "default" if key == "rope_parameters" else None  # a bare rope_theta holder
        kind = rope.get("rope_type", rope.get("type", implied)) if isinstance(rope, dict) else None
        if kind != "default":
            raise ExportError(f"{path}: {key} {rope} is not implemented (plain RoPE only)")
    if cfg.get("quantization_config") is not None:
        raise ExportError(f"{path}: quantized checkpoints (quantization_config) are not supported")


class HFModel:
    """Reads a Hugging Face Llama directory; tensor() gives run.c's tensors."""

    def __init__(self, directory):
        self.path = directory
        if not os.path.isdir(directory):
            raise ExportError(f"{directory}: not a directory")
        if not os.path.isfile(os.path.join(directory, "config.json")):
            raise ExportError(f"{os.path.join(directory, 'config.json')}: missing")
        self.store = open_hf_tensors(directory)
        self.config = hf_config(directory, self.store)
        self.check_names()

    def name(self, kind, layer):
        return HF_NAMES[kind].format(layer)

    def check_names(self):
        """Every tensor present, none unexpected (biases, extra layers...)."""
        c = self.config
        expected = {self.name(kind, layer)
                    for kind, per_layer, _ in runc_tensors(c)
                    for layer in (range(c.n_layers) if per_layer else [None])}
        if "lm_head.weight" in self.store.files and c.shared_classifier:
            expected.add("lm_head.weight")  # tied: Hugging Face uses embed_tokens instead
        for name in expected:
            if name not in self.store.files:
                raise ExportError(f"{self.path}: tensor {name} is missing")
        for name in self.store.files:
            if name not in expected and not name.endswith(".rotary_emb.inv_freq"):
                problem = "a bias" if name.endswith(".bias") else "not part of a plain Llama model"
                raise ExportError(f"{self.store.where(name)} is unexpected ({problem})")

    def where(self, kind, layer):
        return self.store.where(self.name(kind, layer))

    def tensor(self, kind, layer):
        c, name = self.config, self.name(kind, layer)
        w = self.store.load(name)
        if kind in ("wq", "wk"):
            heads = c.n_heads if kind == "wq" else c.n_kv_heads
            if w.ndim != 2 or w.shape[0] != heads * c.head_size:
                raise ExportError(f"{self.where(kind, layer)} has shape {tuple(w.shape)}, expected "
                                  f"({heads * c.head_size}, {c.dim})")
            w = unpermute_rotate_half(w, heads)
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


def read_sentencepiece(path, data):
    """Pieces, raw score bytes (kept bit-exact), BOS and EOS ids of a
    SentencePiece ModelProto: pieces = field 1 {1: piece, 2: score, 3: type},
    trainer_spec = field 2 {3: model_type, 41: bos_id, 42: eos_id},
    normalizer_spec = field 3 {3: add_dummy_prefix}."""
    pieces, scores = [], []
    model_type, bos_id, eos_id, dummy_prefix = 1, 1, 2, 1  # SentencePiece's defaults
    for field, value in proto_fields(data):
        if field == 1:
            piece, score = b"", struct.pack("<f", 0.0)
            for f, v in proto_fields(value):
                if f == 1:
                    piece = bytes(v)
                elif f == 2:
                    score = bytes(v)
            pieces.append(piece)
            scores.append(score)
        elif field == 2:
            for f, v in proto_fields(value):
                if f == 3:
                    model_type = v
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
    if not dummy_prefix:
        raise ExportError(f"{path}: add_dummy_prefix is off; run.c's tokenizer always adds it")
    return pieces, scores, bos_id, eos_id


def export_sentencepiece(path, data, out_path):
    try:
        pieces, scores, bos_id, eos_id = read_sentencepiece(path, data)
    except (ValueError, IndexError) as e:
        raise ExportError(f"{path}: not a SentencePiece model ({e})")
    write_tokenizer_bin(out_path, pieces, scores, bos_id, eos_id, [path])
    return len(pieces)


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
        raise ExportError(f"{path}: GPT-2-style byte-level BPE (ByteLevel, 'Ġ' pieces) is not "
                          "supported; run.c's tokenizer is SentencePiece BPE")
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
    vocab = dict(tj["model"]["vocab"])
    for added in tj.get("added_tokens") or []:
        if vocab.get(added["content"], added["id"]) != added["id"]:
            raise ExportError(f"{path}: added token {added['content']!r} has two ids")
        vocab[added["content"]] = added["id"]
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
    scores = []
    for piece in pieces:
        if piece in first_rank:
            scores.append(-float(first_rank[piece]))
        elif len(piece) == 1 or piece in special or re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", piece):
            scores.append(0.0)
        else:
            scores.append(-1e9)  # no merge makes it: Hugging Face never produces it
    directory = os.path.dirname(os.path.abspath(path))
    bos_id = json_special_id(tj, directory, vocab, "bos")
    eos_id = json_special_id(tj, directory, vocab, "eos")
    write_tokenizer_bin(out_path, [p.encode("utf-8") for p in pieces],
                        [struct.pack("<f", s) for s in scores], bos_id, eos_id, [path])
    return len(pieces)


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
# Command line

def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="export.py", description="Convert Llama checkpoints and tokenizers for run.c.",
        epilog="examples: export.py model.bin --hf DIR | export.py --tokenizer tokenizer.model tok.bin")
    parser.add_argument("out", metavar="OUT.bin", help="the file to write")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--hf", metavar="DIR", help="Hugging Face Llama directory")
    source.add_argument("--meta", metavar="DIR", help="Meta consolidated.*.pth + params.json directory")
    source.add_argument("--llama2c", metavar="FILE", help="llama2.c checkpoint (version 0, 1 or 2)")
    source.add_argument("--tokenizer", metavar="FILE",
                        help="SentencePiece tokenizer.model or tokenizer.json -> tokenizer.bin")
    parser.add_argument("--seq-len", type=int, metavar="N", help="cap the context length")
    parser.add_argument("--dtype", default="f32",
                        help="weight type of the matrices: f32, f16, q8_0, q4_0, q5_0, q4_k, q6_k or q4_k_m (a mix)")
    args = parser.parse_args(argv)
    if args.dtype not in WEIGHT_TYPES:
        parser.error(f"--dtype {args.dtype}: not supported (supported: {', '.join(WEIGHT_TYPES)})")
    if args.seq_len is not None and args.seq_len <= 0:
        parser.error("--seq-len must be positive")
    if args.tokenizer and (args.seq_len is not None or args.dtype != "f32"):
        parser.error("--seq-len and --dtype apply to checkpoints, not to --tokenizer")
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
    write_runc(args.out, source, args.dtype, inputs)
    version = RUNC_VERSION_TYPES if len(set(matrix_types(c, args.dtype))) > 1 else RUNC_VERSION
    print(f"wrote {args.out}: run.c v{version} {args.dtype}, {c.describe()}")


def main(argv=None):
    args = parse_args(argv)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
