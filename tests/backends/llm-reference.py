#!/usr/bin/env python3
"""Greedy decoding of a llama-architecture GGUF model in plain numpy: an
implementation independent of candle, to check the llm backend's output.

    llm-reference.py MODEL.gguf MAX_NEW_TOKENS ID [ID ...]

prints the generated token ids, space-separated, on one line. Needs the
`numpy` and `gguf` packages. Weights are dequantized to float32 and every
step recomputes the whole sequence (no KV cache): slow, but simple.
"""

import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def load(path):
    reader = GGUFReader(path)
    weights = {}
    for t in reader.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        # GGUF lists dimensions fastest first; numpy wants them slowest first.
        weights[t.name] = w.reshape([int(d) for d in reversed(t.shape)])
    arch = field(reader, "general.architecture")
    if arch != "llama":
        sys.exit(f"{path}: architecture {arch!r}, not llama")
    hp = {
        "layers": int(field(reader, "llama.block_count")),
        "heads": int(field(reader, "llama.attention.head_count")),
        "kv_heads": int(field(reader, "llama.attention.head_count_kv")),
        "eps": float(field(reader, "llama.attention.layer_norm_rms_epsilon")),
        "rope_base": float(field(reader, "llama.rope.freq_base", 10000.0)),
        "eos": int(field(reader, "tokenizer.ggml.eos_token_id", -1)),
    }
    return weights, hp


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, base):
    # x: (heads, seq, head_dim). GGUF llama weights are laid out for
    # rotating adjacent pairs (x[2i], x[2i+1]).
    _, seq, dim = x.shape
    inv = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    ang = np.arange(seq, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def logits_of(weights, hp, ids):
    emb = weights["token_embd.weight"]
    x = emb[np.array(ids)]
    seq = len(ids)
    heads, kv_heads = hp["heads"], hp["kv_heads"]
    head_dim = x.shape[1] // heads
    mask = np.triu(np.full((seq, seq), -np.inf, dtype=np.float32), k=1)
    for layer in range(hp["layers"]):
        w = lambda n: weights[f"blk.{layer}.{n}.weight"]  # noqa: E731
        h = rms_norm(x, w("attn_norm"), hp["eps"])
        q = (h @ w("attn_q").T).reshape(seq, heads, head_dim).transpose(1, 0, 2)
        k = (h @ w("attn_k").T).reshape(seq, kv_heads, head_dim).transpose(1, 0, 2)
        v = (h @ w("attn_v").T).reshape(seq, kv_heads, head_dim).transpose(1, 0, 2)
        q, k = rope(q, hp["rope_base"]), rope(k, hp["rope_base"])
        rep = heads // kv_heads
        k, v = np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0)
        att = q @ k.transpose(0, 2, 1) / np.sqrt(head_dim) + mask
        att = np.exp(att - att.max(axis=-1, keepdims=True))
        att /= att.sum(axis=-1, keepdims=True)
        y = (att @ v).transpose(1, 0, 2).reshape(seq, heads * head_dim)
        x = x + y @ w("attn_output").T
        h = rms_norm(x, w("ffn_norm"), hp["eps"])
        gate = h @ w("ffn_gate").T
        up = h @ w("ffn_up").T
        x = x + ((gate / (1.0 + np.exp(-gate))) * up) @ w("ffn_down").T
    x = rms_norm(x[-1], weights["output_norm.weight"], hp["eps"])
    # Small models tie the output projection to the embeddings.
    out = weights.get("output.weight", emb)
    return out @ x


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    weights, hp = load(sys.argv[1])
    max_new = int(sys.argv[2])
    ids = [int(a) for a in sys.argv[3:]]
    generated = []
    while len(generated) < max_new:
        nxt = int(np.argmax(logits_of(weights, hp, ids + generated)))
        generated.append(nxt)
        if nxt == hp["eos"]:
            break
    print(" ".join(map(str, generated)))


if __name__ == "__main__":
    main()
