"""Pretraining data in the format of Google's create_pretraining_data.py input:
one sentence per line, a blank line between documents. Examples are built
the same way: sentence pairs A/B with B the true continuation half of the
time (next-sentence prediction), 15% of tokens chosen for masked-LM (80%
[MASK], 10% random token, 10% unchanged)."""
import random

import torch


def read_documents(paths):
    docs, cur = [], []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    if cur:
                        docs.append(cur)
                    cur = []
                else:
                    cur.append(line)
        if cur:
            docs.append(cur)
            cur = []
    return [d for d in docs if d]


class PretrainingData:
    def __init__(self, docs, tokenizer, seq_len=128, seed=0, mask_prob=0.15):
        self.tok = tokenizer
        self.seq_len = seq_len
        self.mask_prob = mask_prob
        self.rng = random.Random(seed)
        # Documents as lists of token-id sentences.
        self.docs = [[tokenizer.ids(tokenizer.tokenize(s)) for s in d] for d in docs]
        self.docs = [[s for s in d if s] for d in self.docs]
        self.docs = [d for d in self.docs if d]
        v = tokenizer.vocab
        self.cls, self.sep, self.mask, self.pad = v["[CLS]"], v["[SEP]"], v["[MASK]"], v["[PAD]"]
        self.vocab_size = len(v)
        self.n_special = 5

    def _segment(self, doc, start, budget):
        toks, i = [], start
        while i < len(doc) and len(toks) + len(doc[i]) <= budget:
            toks += doc[i]
            i += 1
        if not toks:  # one long sentence: truncate it
            toks, i = doc[start][:budget], start + 1
        return toks, i

    def example(self):
        r = self.rng
        budget = self.seq_len - 3
        d = r.randrange(len(self.docs))
        doc = self.docs[d]
        start = r.randrange(len(doc))
        a, nxt = self._segment(doc, start, max(1, budget // 2))
        if nxt < len(doc) and r.random() < 0.5:
            b, _ = self._segment(doc, nxt, budget - len(a))
            is_next = 1
        else:
            other = self.docs[r.randrange(len(self.docs))]
            b, _ = self._segment(other, r.randrange(len(other)), budget - len(a))
            is_next = 0
        b = b[:max(0, budget - len(a))]
        ids = [self.cls] + a + [self.sep] + b + [self.sep]
        seg = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        labels = [-100] * len(ids)
        for i, t in enumerate(ids):
            if t in (self.cls, self.sep) or r.random() >= self.mask_prob:
                continue
            labels[i] = t
            p = r.random()
            if p < 0.8:
                ids[i] = self.mask
            elif p < 0.9:
                ids[i] = r.randrange(self.n_special, self.vocab_size)
        pad = self.seq_len - len(ids)
        attn = [1] * len(ids) + [0] * pad
        return (ids + [self.pad] * pad, seg + [0] * pad, attn, labels + [-100] * pad, is_next)

    def batch(self, n):
        cols = list(zip(*[self.example() for _ in range(n)]))
        return {
            "input_ids": torch.tensor(cols[0]),
            "token_type_ids": torch.tensor(cols[1]),
            "attention_mask": torch.tensor(cols[2]),
            "mlm_labels": torch.tensor(cols[3]),
            "nsp_labels": torch.tensor(cols[4]),
        }
