"""BERT for pretraining (masked LM + next-sentence prediction) in plain PyTorch,
with the architecture of Devlin et al. (post-LayerNorm encoder, GELU, learned
positions, MLM decoder tied to the word embeddings)."""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class BertConfig:
    vocab_size: int = 30522
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    intermediate: int = 3072
    max_positions: int = 512
    type_vocab: int = 2
    dropout: float = 0.1
    init_range: float = 0.02


CONFIGS = {
    # 2 layers: the quick configuration for checks and demos.
    "tiny": dict(hidden=128, layers=2, heads=2, intermediate=512),
    "mini": dict(hidden=256, layers=4, heads=4, intermediate=1024),
    "base": dict(hidden=768, layers=12, heads=12, intermediate=3072),
    # BERT-Large: 24 layers, hidden 1024, 16 heads (~335M parameters with the 30522-token vocab).
    "large": dict(hidden=1024, layers=24, heads=16, intermediate=4096),
}


def make_config(name, vocab_size):
    if name not in CONFIGS:
        raise ValueError(f"unknown config {name!r}; accepted: {', '.join(CONFIGS)}")
    return BertConfig(vocab_size=vocab_size, **CONFIGS[name])


class SelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.h, self.d = c.heads, c.hidden // c.heads
        self.qkv = nn.Linear(c.hidden, 3 * c.hidden)
        self.out = nn.Linear(c.hidden, c.hidden)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.d) + mask
        a = self.drop(torch.softmax(s, dim=-1))
        return self.out((a @ v).transpose(1, 2).reshape(b, t, -1))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attn = SelfAttention(c)
        self.ln1 = nn.LayerNorm(c.hidden, eps=1e-12)
        self.ff1 = nn.Linear(c.hidden, c.intermediate)
        self.ff2 = nn.Linear(c.intermediate, c.hidden)
        self.ln2 = nn.LayerNorm(c.hidden, eps=1e-12)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x, mask):
        x = self.ln1(x + self.drop(self.attn(x, mask)))
        return self.ln2(x + self.drop(self.ff2(F.gelu(self.ff1(x)))))


class BertForPreTraining(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.word = nn.Embedding(c.vocab_size, c.hidden)
        self.pos = nn.Embedding(c.max_positions, c.hidden)
        self.segment = nn.Embedding(c.type_vocab, c.hidden)
        self.ln = nn.LayerNorm(c.hidden, eps=1e-12)
        self.drop = nn.Dropout(c.dropout)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.layers))
        self.pool = nn.Linear(c.hidden, c.hidden)
        # Heads: MLM transform + decoder tied to the word embeddings, NSP classifier.
        self.mlm_dense = nn.Linear(c.hidden, c.hidden)
        self.mlm_ln = nn.LayerNorm(c.hidden, eps=1e-12)
        self.mlm_bias = nn.Parameter(torch.zeros(c.vocab_size))
        self.nsp = nn.Linear(c.hidden, 2)
        self.apply(self._init)

    def _init(self, m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            m.weight.data.normal_(0.0, self.c.init_range)
        if isinstance(m, nn.Linear) and m.bias is not None:
            m.bias.data.zero_()
        if isinstance(m, nn.LayerNorm):
            m.weight.data.fill_(1.0)
            m.bias.data.zero_()

    def forward(self, input_ids, token_type_ids, attention_mask, mlm_labels=None, nsp_labels=None):
        t = input_ids.shape[1]
        pos = torch.arange(t, device=input_ids.device).unsqueeze(0)
        x = self.drop(self.ln(self.word(input_ids) + self.pos(pos) + self.segment(token_type_ids)))
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        pooled = torch.tanh(self.pool(x[:, 0]))
        nsp_logits = self.nsp(pooled)
        if mlm_labels is None:
            return self._mlm(x), nsp_logits
        # The vocabulary projection only where a token was masked (~15%): the
        # loss is the same, the largest matmul of the model shrinks ~7x.
        sel = mlm_labels.view(-1) != -100
        logits = self._mlm(x.reshape(-1, self.c.hidden)[sel])
        mlm = F.cross_entropy(logits, mlm_labels.view(-1)[sel])
        nsp = F.cross_entropy(nsp_logits, nsp_labels)
        return mlm + nsp, mlm, nsp

    def _mlm(self, h):
        h = self.mlm_ln(F.gelu(self.mlm_dense(h)))
        return h @ self.word.weight.t() + self.mlm_bias
