"""Byte-level BPE: training, encoding and the Hugging Face tokenizer.json that other tools read.

Exactly the GPT-2 scheme that the tokenizers library implements as ByteLevel + BPE: text is split by the GPT-2
pre-tokenisation pattern, each piece's UTF-8 bytes are mapped to printable characters (bytes_to_unicode), and
merges are applied in rank order inside each piece. Ids: 0 "<s>", 1 "</s>", then the 256 byte symbols in
bytes_to_unicode order, then one id per merge, as in tiny-llama-bpe4k's tokenizer.json.
"""
import collections
import json

import regex

# The pattern the tokenizers library uses for ByteLevel(use_regex=True).
GPT2_PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
SPECIAL = ("<s>", "</s>")


def bytes_to_unicode():
    """GPT-2's reversible map from the 256 byte values to printable characters, in its order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


BYTE_TO_CHAR = bytes_to_unicode()


def pieces(text):
    """The pre-tokenised pieces of `text`, each as a tuple of byte symbols."""
    return [tuple(BYTE_TO_CHAR[b] for b in p.encode("utf-8")) for p in GPT2_PATTERN.findall(text)]


def train(text, vocab_size):
    """Merges [(a, b)] learned from `text` until the vocabulary holds `vocab_size` ids.

    Keeps pair counts and, per pair, the words that hold it, so each merge touches only the words it changes.
    Ties between equally frequent pairs go to the lexicographically smallest pair, so training is deterministic.
    """
    n_merges = vocab_size - len(SPECIAL) - 256
    word_counts = collections.Counter(pieces(text))
    words = [list(w) for w in word_counts]
    counts = [word_counts[w] for w in word_counts]
    pair_count = collections.Counter()
    where = collections.defaultdict(set)
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += counts[i]
            where[(a, b)].add(i)
    merges = []
    while len(merges) < n_merges:
        if not pair_count:
            raise RuntimeError(f"the text holds only {len(merges)} merges; asked for {n_merges}")
        best = min(pair_count.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        merged = best[0] + best[1]
        for i in list(where[best]):
            w, c = words[i], counts[i]
            for a, b in zip(w, w[1:]):
                pair_count[(a, b)] -= c
                if pair_count[(a, b)] <= 0:
                    del pair_count[(a, b)]
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and (w[j], w[j + 1]) == best:
                    out.append(merged)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for a, b in zip(out, out[1:]):
                pair_count[(a, b)] += c
                where[(a, b)].add(i)
        del where[best]
    return merges


def vocabulary(merges):
    vocab = {s: i for i, s in enumerate(SPECIAL)}
    for ch in BYTE_TO_CHAR.values():
        vocab[ch] = len(vocab)
    for a, b in merges:
        vocab[a + b] = len(vocab)
    return vocab


class Tokenizer:
    def __init__(self, merges):
        self.merges = merges
        self.rank = {m: r for r, m in enumerate(merges)}
        self.vocab = vocabulary(merges)
        self.inverse = {i: s for s, i in self.vocab.items()}
        self.char_to_byte = {c: b for b, c in BYTE_TO_CHAR.items()}
        self.cache = {}

    @staticmethod
    def load(path):
        model = json.load(open(path))["model"]
        return Tokenizer([tuple(m) for m in model["merges"]])

    def _bpe(self, piece):
        if piece in self.cache:
            return self.cache[piece]
        w = list(piece)
        while len(w) > 1:
            ranked = [(self.rank.get((a, b), len(self.rank)), k) for k, (a, b) in enumerate(zip(w, w[1:]))]
            r, k = min(ranked)
            if r == len(self.rank):
                break
            w[k:k + 2] = [w[k] + w[k + 1]]
        ids = [self.vocab[s] for s in w]
        self.cache[piece] = ids
        return ids

    def encode(self, text):
        return [i for p in pieces(text) for i in self._bpe(p)]

    def decode(self, ids):
        data = bytes(self.char_to_byte[c] for i in ids if i >= len(SPECIAL) for c in self.inverse[i])
        return data.decode("utf-8", errors="replace")

    def save(self, path):
        """tokenizer.json in the layout the Hugging Face tokenizers library writes for a ByteLevel BPE."""
        byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
        doc = {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True} for i, s in enumerate(SPECIAL)],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", **byte_level},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", **byte_level},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": self.vocab, "merges": [list(m) for m in self.merges]},
        }
        with open(path, "w") as f:
            json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
