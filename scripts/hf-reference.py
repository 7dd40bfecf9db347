#!/usr/bin/env python3
"""An independent reference forward pass of a Hugging Face checkpoint, in numpy, written from
the transformers modeling code (not from llama.cpp or Wick): llama, qwen2, qwen3, gemma3,
lfm2, lfm2moe, reading config.json and the safetensors directly (HF tensor names and layouts,
HF's rotate-half RoPE, Gemma's 1 + w norms and √d embedding scale, LFM2's short convolution
and sigmoid-routed experts). Everything is computed in float64, so the reference's own
rounding is far below the float32 engine's.

    python3 scripts/hf-reference.py <hf_dir> <token ids, comma-separated> [--kv-f16] [--ggml-gelu]

Prints the last position's logits as a JSON list. Two options model the f16 roundings of
llama.cpp's CPU backend (which Wick follows): --kv-f16 rounds keys and values as its default
f16 KV cache stores them, and the query and the attention weights as they meet the cache
(ggml converts them to the cache's type); --ggml-gelu rounds GELU's input and output to f16
(ggml looks GELU up in an f16 table).
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np

F = np.float64


def load_weights(d: Path) -> dict[str, np.ndarray]:
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        raw = f.read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        base = 8 + n
        for name, t in header.items():
            if name == "__metadata__":
                continue
            b, e = t["data_offsets"]
            buf = raw[base + b:base + e]
            if t["dtype"] == "F32":
                a = np.frombuffer(buf, dtype="<f4")
            elif t["dtype"] == "F16":
                a = np.frombuffer(buf, dtype="<f2").astype(F)
            elif t["dtype"] == "BF16":
                a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(F)
            else:
                raise SystemExit(f"{name}: dtype {t['dtype']}")
            out[name] = a.reshape(t["shape"]).astype(F)
    return out


def rms(x, w, eps):
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + F(eps))).astype(F) * w


def rope(x, pos, theta, dim):
    # transformers' rotate_half: pairs (i, i + dim/2), θ_i = theta^(-2i/dim).
    inv = (1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.int64).astype(F) / F(dim)))).astype(F)
    ang = pos[:, None].astype(F) * inv[None, :]
    cos = np.concatenate([np.cos(ang), np.cos(ang)], -1).astype(F)[:, None, :]
    sin = np.concatenate([np.sin(ang), np.sin(ang)], -1).astype(F)[:, None, :]
    half = dim // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return (x * cos + rot * sin).astype(F)


def attention(n, W, p, cfg, il, pos, kv_f16, norm=None, theta=None, scale=None):
    T = n.shape[0]
    nh = cfg["num_attention_heads"]
    kvh = cfg["num_key_value_heads"] if not isinstance(cfg["num_key_value_heads"], list) else cfg["num_key_value_heads"][il]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // nh
    names = ("q_proj", "k_proj", "v_proj")
    q, k, v = ((n @ W[f"{p}.self_attn.{w}.weight"].T) + W.get(f"{p}.self_attn.{w}.bias", F(0)) for w in names)
    q, k, v = q.reshape(T, nh, hd), k.reshape(T, kvh, hd), v.reshape(T, kvh, hd)
    if norm is not None:
        q, k = norm(q, "q"), norm(k, "k")
    q, k = rope(q, pos, theta, hd), rope(k, pos, theta, hd)
    h16 = (lambda a: a.astype(np.float32).astype(np.float16).astype(F)) if kv_f16 else (lambda a: a)
    q, k, v = h16(q), h16(k), h16(v)
    rep = nh // kvh
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("thd,shd->hts", q, k).astype(F) * F(scale if scale is not None else hd ** -0.5)
    s = s + np.triu(np.full((T, T), -np.inf, dtype=F), 1)[None]
    s = np.exp(s - s.max(-1, keepdims=True)).astype(F)
    s = h16(s / s.sum(-1, keepdims=True))
    o = np.einsum("hts,shd->thd", s, v).reshape(T, nh * hd).astype(F)
    return o


def silu(x):
    return (x / (F(1) + np.exp(-x))).astype(F)


def gelu_tanh(x, ggml=False):
    g = lambda t: (F(0.5) * t * (F(1) + np.tanh(F(np.sqrt(2 / np.pi)) * t * (F(1) + F(0.044715) * t * t)))).astype(F)  # noqa: E731
    if not ggml:
        return g(x)
    # ggml's CPU GELU: a table indexed by the f16 input, holding f16 results; ±10 cut-offs.
    y = g(x.astype(np.float32).astype(np.float16).astype(F)).astype(np.float32).astype(np.float16).astype(F)
    return np.where(x <= -10, F(0), np.where(x >= 10, x, y)).astype(F)


def forward(d: Path, ids: list[int], kv_f16: bool) -> np.ndarray:
    cfg = json.loads((d / "config.json").read_text())
    cfg = {**cfg, **cfg.get("text_config", {})}
    W = load_weights(d)
    arch = cfg["architectures"][0]
    pos = np.arange(len(ids))
    x = W["model.embed_tokens.weight"][ids]
    L = cfg["num_hidden_layers"]
    if arch.startswith("Gemma3"):
        eps = cfg["rms_norm_eps"]
        x = x * F(cfg["hidden_size"] ** 0.5)
        g = lambda t, w: rms(t, F(1) + W[w], eps)  # noqa: E731
        pattern = cfg.get("sliding_window_pattern", 6)
        for il in range(L):
            p = f"model.layers.{il}"
            local = (il + 1) % pattern != 0
            theta = cfg["rope_local_base_freq"] if local else cfg["rope_theta"]
            qk = lambda t, w, p=p: rms(t, F(1) + W[f"{p}.self_attn.{w}_norm.weight"], eps)  # noqa: E731
            a = attention(g(x, f"{p}.input_layernorm.weight"), W, p, cfg, il, pos, kv_f16, qk, theta,
                          cfg["query_pre_attn_scalar"] ** -0.5)
            h = x + g(a @ W[f"{p}.self_attn.o_proj.weight"].T, f"{p}.post_attention_layernorm.weight")
            n = g(h, f"{p}.pre_feedforward_layernorm.weight")
            f = (gelu_tanh(n @ W[f"{p}.mlp.gate_proj.weight"].T, GGML_GELU) * (n @ W[f"{p}.mlp.up_proj.weight"].T)) @ W[f"{p}.mlp.down_proj.weight"].T
            x = h + g(f, f"{p}.post_feedforward_layernorm.weight")
        y = g(x, "model.norm.weight")
    elif arch.startswith("Lfm2"):
        eps = cfg["norm_eps"]
        types = cfg["layer_types"]
        kvh = [cfg["num_key_value_heads"] if t == "full_attention" else 0 for t in types]
        c2 = {**cfg, "num_key_value_heads": kvh}
        dd = cfg["hidden_size"]
        for il in range(L):
            p = f"model.layers.{il}"
            u = rms(x, W[f"{p}.operator_norm.weight"], eps)
            if types[il] == "conv":
                bcx = u @ W[f"{p}.conv.in_proj.weight"].T
                B, C, X = bcx[:, :dd], bcx[:, dd:2 * dd], bcx[:, 2 * dd:]
                bx = B * X
                w = W[f"{p}.conv.conv.weight"][:, 0, :]  # [d, L]
                Lc = w.shape[1]
                pad = np.concatenate([np.zeros((Lc - 1, dd), F), bx], 0)
                y = np.stack([sum(w[:, k] * pad[t + k] for k in range(Lc)) for t in range(len(ids))]).astype(F)
                o = (C * y) @ W[f"{p}.conv.out_proj.weight"].T
            else:
                qk = lambda t, w, p=p: rms(t, W[f"{p}.self_attn.{w}_layernorm.weight"], eps)  # noqa: E731
                a = attention(u, W, p, c2, il, pos, kv_f16, qk, cfg["rope_theta"])
                o = a @ W[f"{p}.self_attn.out_proj.weight"].T
            h = x + o
            n = rms(h, W[f"{p}.ffn_norm.weight"], eps)
            if f"{p}.feed_forward.gate.weight" in W:
                s = n @ W[f"{p}.feed_forward.gate.weight"].T
                prob = (F(1) / (F(1) + np.exp(-s))).astype(F)
                sel_score = prob + W[f"{p}.feed_forward.expert_bias"]
                k = cfg["num_experts_per_tok"]
                f = np.zeros_like(h)
                for t in range(len(ids)):
                    sel = np.argsort(-sel_score[t], kind="stable")[:k]
                    wts = prob[t, sel]
                    if cfg.get("norm_topk_prob", True):
                        wts = wts / (wts.sum() + F(1e-6))
                    for e, we in zip(sel, wts):
                        q = f"{p}.feed_forward.experts.{e}"
                        v = silu(n[t] @ W[f"{q}.w1.weight"].T) * (n[t] @ W[f"{q}.w3.weight"].T)
                        f[t] += F(we) * (v @ W[f"{q}.w2.weight"].T)
            else:
                f = (silu(n @ W[f"{p}.feed_forward.w1.weight"].T) * (n @ W[f"{p}.feed_forward.w3.weight"].T)) @ W[f"{p}.feed_forward.w2.weight"].T
            x = (h + f).astype(F)
        y = rms(x, W["model.embedding_norm.weight"], eps)
    else:  # llama, qwen2, qwen3
        eps = cfg["rms_norm_eps"]
        for il in range(L):
            p = f"model.layers.{il}"
            norm = None
            if f"{p}.self_attn.q_norm.weight" in W:
                norm = lambda t, w, p=p: rms(t, W[f"{p}.self_attn.{w}_norm.weight"], eps)  # noqa: E731
            a = attention(rms(x, W[f"{p}.input_layernorm.weight"], eps), W, p, cfg, il, pos, kv_f16, norm, cfg["rope_theta"])
            h = x + a @ W[f"{p}.self_attn.o_proj.weight"].T
            n = rms(h, W[f"{p}.post_attention_layernorm.weight"], eps)
            x = h + (silu(n @ W[f"{p}.mlp.gate_proj.weight"].T) * (n @ W[f"{p}.mlp.up_proj.weight"].T)) @ W[f"{p}.mlp.down_proj.weight"].T
        y = rms(x, W["model.norm.weight"], eps)
    head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return (y[-1] @ head.T).astype(F)


GGML_GELU = False

if __name__ == "__main__":
    GGML_GELU = "--ggml-gelu" in sys.argv[3:]
    ids = [int(t) for t in sys.argv[2].split(",")]
    logits = forward(Path(sys.argv[1]), ids, "--kv-f16" in sys.argv[3:])
    print(json.dumps([float(v) for v in logits]))
