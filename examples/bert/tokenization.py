"""WordPiece tokenization as in Google's BERT (basic tokenizer: lower case,
split on whitespace and punctuation; then greedy longest-match-first
WordPiece with "##" continuation pieces), and a vocab builder for corpora
that come without a vocab.txt."""
import collections
import unicodedata

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def load_vocab(path):
    vocab = collections.OrderedDict()
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            tok = line.rstrip("\n")
            if tok:
                vocab[tok] = len(vocab)
    for s in SPECIAL:
        if s not in vocab:
            raise ValueError(f"{path}: vocab lacks {s}; a BERT vocab.txt has {', '.join(SPECIAL)}")
    return vocab


def _is_punct(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def basic_tokenize(text, lower=True):
    if lower:
        text = unicodedata.normalize("NFD", text.lower())
        text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    out = []
    for word in text.split():
        cur = ""
        for ch in word:
            if _is_punct(ch):
                if cur:
                    out.append(cur)
                    cur = ""
                out.append(ch)
            else:
                cur += ch
        if cur:
            out.append(cur)
    return out


class WordPiece:
    def __init__(self, vocab, lower=True, max_chars=100):
        self.vocab = vocab
        self.inv = {i: t for t, i in vocab.items()}
        self.lower = lower
        self.max_chars = max_chars

    def tokenize(self, text):
        pieces = []
        for word in basic_tokenize(text, self.lower):
            if len(word) > self.max_chars:
                pieces.append("[UNK]")
                continue
            start, sub = 0, []
            while start < len(word):
                end, cur = len(word), None
                while start < end:
                    s = word[start:end] if start == 0 else "##" + word[start:end]
                    if s in self.vocab:
                        cur = s
                        break
                    end -= 1
                if cur is None:
                    sub = ["[UNK]"]
                    break
                sub.append(cur)
                start = end
            pieces.extend(sub)
        return pieces

    def ids(self, tokens):
        unk = self.vocab["[UNK]"]
        return [self.vocab.get(t, unk) for t in tokens]


def build_vocab(sentences, size=8000, lower=True):
    """A WordPiece vocab from a corpus: the special tokens, every character
    (alone and as a "##" continuation), then the most frequent words and word
    endings until `size` entries."""
    words = collections.Counter()
    for s in sentences:
        words.update(basic_tokenize(s, lower))
    chars = collections.Counter()
    suffixes = collections.Counter()
    for w, c in words.items():
        for ch in w:
            chars[ch] += c
        for k in range(2, min(len(w), 6)):
            suffixes["##" + w[-k:]] += c
    vocab = list(SPECIAL)
    vocab += sorted(chars)
    vocab += sorted("##" + ch for ch in chars)
    seen = set(vocab)
    budget = size - len(vocab)
    cands = [(c, w) for w, c in words.items()] + [(c // 2, s) for s, c in suffixes.items()]
    for c, tok in sorted(cands, key=lambda x: (-x[0], x[1])):
        if budget <= 0:
            break
        if tok not in seen:
            vocab.append(tok)
            seen.add(tok)
            budget -= 1
    return collections.OrderedDict((t, i) for i, t in enumerate(vocab))


def save_vocab(vocab, path):
    with open(path, "w", encoding="utf-8") as f:
        for t in vocab:
            f.write(t + "\n")
