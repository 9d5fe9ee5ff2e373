"""The Transformer (Vaswani et al. 2017), base configuration: encoder-decoder, post-layer-norm.

d_model 512, 8 heads, 6 encoder and 6 decoder layers, d_ff 2048, one 37,000-token (shared source/target
BPE) embedding used for the source embedding, the target embedding and the pre-softmax projection (sec.
3.4: the three share one weight matrix, counted once).

How it is written (per sample; sequences are ``Tensor(d_model, length, 1)``):

* inputs: the source and target token ids, ``Tensor(1, length, 1)`` without gradient; the embedding
  lookups (``net.embed``) and everything after them need gradients. Sinusoidal positional encodings have
  no parameters: their sum with the embedding is an element-wise add of a constant. The sqrt(d_model)
  scaling and dropout fuse into neighbouring ops and are not separate layers.
* attention: Q, K, V and output projections are linear layers with bias (fairseq's ``q_proj``, ``k_proj``,
  ``v_proj``, ``out_proj``); per head, ``Q K^T`` and ``softmax(.) V`` are weight-free batched matmuls with
  ``repeat = heads``; the softmax over the scores is a vector op. The decoder's self-attention is causal,
  but the masked product is computed in full (as dense kernels do). In cross-attention, K and V project the
  encoder output (``src_len`` rows), Q the decoder's (``tgt_len`` rows).
* each sub-layer (attention, then the position-wise ReLU feed-forward) is followed by a residual add and a
  layer norm (post-LN, the paper's ``LayerNorm(x + Sublayer(x))``); no final layer norm.
* the output projection to the vocabulary is the tied embedding matrix without a bias (the paper names
  only the shared weight matrix; fairseq and tensor2tensor add no bias), followed by the softmax of the
  loss, kept as a vector op because at 37,000 classes per target token it is one of the largest.

Parameters in closed form (V vocabulary, d = d_model, f = d_ff, N layers per stack):
``V d + N (4 (d^2 + d) + 2 d f + f + d + 2 * 2d) + N (8 (d^2 + d) + 2 d f + f + d + 3 * 2d)``
= 18,944,000 + 6 * 3,152,384 + 6 * 4,204,032 = 63,082,496 for the base model (the paper's Table 3 rounds
its count to 65 M).

Builder keyword arguments: ``src_len`` and ``tgt_len``, tokens per sample, default 128 each (a common padded
length; the paper batches by length, about 25,000 source and 25,000 target tokens per batch, and WMT
sentences are mostly shorter than 128 BPE tokens); ``d_model``, ``heads``, ``layers``, ``d_ff`` default to
the base model. ``num_classes`` overrides the vocabulary size (the classes of its softmax). Data set:
``native`` only (WMT 2014 English-German token sequences).
"""

from __future__ import annotations

from models.graph import Net, Tensor
from models.nets.registry import register

#: the base model (the paper's Table 3, row "base")
D_MODEL = 512
HEADS = 8
LAYERS = 6
D_FF = 2048
VOCAB = 37000
SRC_LEN = 128
TGT_LEN = 128


def _attention(net: Net, q_in: Tensor, kv_in: Tensor, heads: int, name: str) -> Tensor:
    """Multi-head attention of ``q_in`` (queries) over ``kv_in`` (keys and values)."""
    d = q_in.c
    if d % heads:
        raise ValueError(f"{name}: d_model {d} not divisible by {heads} heads")
    dk = d // heads
    lq, lk = q_in.h, kv_in.h
    net.linear(q_in, d, name=f"{name}.q_proj")
    net.linear(kv_in, d, name=f"{name}.k_proj")
    net.linear(kv_in, d, name=f"{name}.v_proj")
    net.matmul(lq, dk, lk, heads, name=f"{name}.qk")
    net.softmax(Tensor(heads, lq, lk), name=f"{name}.softmax")
    net.matmul(lq, lk, dk, heads, name=f"{name}.av")
    return net.linear(Tensor(d, lq, 1), d, name=f"{name}.out_proj")


def _residual_norm(net: Net, x: Tensor, y: Tensor, layer: str, sublayer: str, norm: str) -> Tensor:
    """Post-LN: ``LayerNorm(x + Sublayer(x))``, the add named after the sub-layer, the norm fairseq's way."""
    return net.layernorm(net.add(x, y, name=f"{layer}.{sublayer}.residual"), name=f"{layer}.{norm}")


def _feed_forward(net: Net, x: Tensor, d_ff: int, name: str) -> Tensor:
    h = net.relu(net.linear(x, d_ff, name=f"{name}.fc1"), name=f"{name}.relu")
    return net.linear(h, x.c, name=f"{name}.fc2")


def _embed(net: Net, tokens: Tensor, vocab: int, d: int, name: str, tied: bool) -> Tensor:
    x = net.embed(tokens, vocab, d, name=f"{name}.embed_tokens", tied=tied)
    return net.add(x, Tensor(d, tokens.h, 1, grad=False), name=f"{name}.embed_positions")


def transformer(name: str, *, dataset: str, num_classes: int | None, src_len: int = SRC_LEN,
                tgt_len: int = TGT_LEN, d_model: int = D_MODEL, heads: int = HEADS, layers: int = LAYERS,
                d_ff: int = D_FF) -> Net:
    if src_len < 1 or tgt_len < 1:
        raise ValueError(f"{name}: src_len and tgt_len must be positive, got {src_len}, {tgt_len}")
    vocab = num_classes or VOCAB
    net = Net(name, (1, src_len + tgt_len, 1), vocab, input_desc=f"src {src_len} + tgt {tgt_len} tokens")
    src = Tensor(1, src_len, 1, grad=False)
    tgt = Tensor(1, tgt_len, 1, grad=False)

    x = _embed(net, src, vocab, d_model, "encoder", tied=False)
    for i in range(layers):
        ln = f"encoder.layers.{i}"
        a = _attention(net, x, x, heads, f"{ln}.self_attn")
        x = _residual_norm(net, x, a, ln, "self_attn", "self_attn_layer_norm")
        f = _feed_forward(net, x, d_ff, ln)
        x = _residual_norm(net, x, f, ln, "ffn", "final_layer_norm")
    memory = x

    y = _embed(net, tgt, vocab, d_model, "decoder", tied=True)
    for i in range(layers):
        ln = f"decoder.layers.{i}"
        a = _attention(net, y, y, heads, f"{ln}.self_attn")
        y = _residual_norm(net, y, a, ln, "self_attn", "self_attn_layer_norm")
        a = _attention(net, y, memory, heads, f"{ln}.encoder_attn")
        y = _residual_norm(net, y, a, ln, "encoder_attn", "encoder_attn_layer_norm")
        f = _feed_forward(net, y, d_ff, ln)
        y = _residual_norm(net, y, f, ln, "ffn", "final_layer_norm")

    logits = net.linear(y, vocab, bias=False, tied=True, name="decoder.output_projection")
    net.softmax(logits, name="decoder.log_softmax")
    return net


register("transformer_base", family="transformer",
         description="Transformer base (Vaswani et al. 2017; 6+6 layers, d_model 512, tied 37k vocabulary)",
         default_dataset="native", datasets=("native",))(
    lambda **kw: transformer("transformer_base", **kw)
)
