"""Corpora and tokenizers: the built-in English text, uploads (validated), and synthetic repeats.

The built-in corpus is Python's own reference documentation, ``pydoc_data.topics``, which every
CPython ships: about 465,000 characters, cleaned of its reStructuredText underlines. Every tenth
paragraph is held out for evaluation, unless the same paragraph also appears in the training part.
"""

import codecs
import json
import re
from collections import Counter
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["BOS", "UNK", "DataError", "Tokenizer", "WordTokenizer", "CharTokenizer", "tokenizer_from_json", "bos_id", "token_labels", "word_ids", "Prompt", "prompt_ids", "random_ids", "repeated_sequences",
           "builtin_text", "bigram_distribution", "validate_upload", "SOURCES", "EVAL_LENGTH", "eval_length", "training_lengths", "training_data", "MAX_UPLOAD_BYTES", "TextData", "RandomTokens", "WithRepeats", "Mix",
           "Copies", "CopyingTask", "Data"]

BOS, UNK = "<bos>", "<unk>"
MAX_UPLOAD_BYTES = 5 * 1024 * 1024
_UNDERLINE = re.compile(r"^\s*([*=\-~^#\"'])\1{2,}\s*$")
_WORD = re.compile(r"[a-z]+|[0-9]+|[^\sa-z0-9]")
_CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 13)) + b"\x7f"  # not tab, newline, return


class DataError(ValueError):
    """Text that cannot be used for training; the message says what to do instead."""


def builtin_text(split: str = "train") -> str:
    """The cleaned pydoc topics, in name order: ``split`` is "train" (9 of 10 paragraphs) or "heldout"."""
    from pydoc_data.topics import topics

    if split not in ("train", "heldout"):
        raise ValueError(f"split={split!r}; choose 'train' or 'heldout'")
    lines = (line for name in sorted(topics) for line in topics[name].splitlines())
    paragraphs = "\n".join(line for line in lines if not _UNDERLINE.match(line)).split("\n\n")
    train = [p for i, p in enumerate(paragraphs) if i % 10 != 9]
    if split == "train":
        return "\n\n".join(train)
    seen = set(train)  # the documentation repeats some paragraphs: hold out only unseen ones
    return "\n\n".join(p for i, p in enumerate(paragraphs) if i % 10 == 9 and p not in seen)


class Tokenizer:
    """Ids ↔ strings. Id 0 is ``<bos>``, id 1 is ``<unk>``; ``labels`` are readable names for plots."""

    kind: str
    bos_id, unk_id = 0, 1

    def __init__(self, vocab: list[str]):
        if vocab[:2] != [BOS, UNK] or len(set(vocab)) != len(vocab):
            raise ValueError("a vocabulary starts with <bos>, <unk> and has no duplicates")
        self.vocab = vocab
        self.index = {s: i for i, s in enumerate(vocab)}

    @property
    def d_vocab(self) -> int:
        return len(self.vocab)

    def pieces(self, text: str) -> list[str]:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        return [self.index.get(p, 1) for p in self.pieces(text)]

    def labels(self, ids) -> list[str]:
        """A short readable label per id (spaces and newlines made visible)."""
        return [self.vocab[int(i)].replace(" ", "␣").replace("\n", "⏎") for i in ids]

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "vocab": self.vocab})


class WordTokenizer(Tokenizer):
    """Lower-cased words, numbers and single punctuation marks; the most frequent ``size − 2`` kept."""

    kind = "word"

    @staticmethod
    def pieces(text: str) -> list[str]:
        return _WORD.findall(text.lower())

    @classmethod
    def fit(cls, text: str, size: int) -> "WordTokenizer":
        if size < 3:
            raise ValueError(f"size={size}: a word vocabulary needs at least 3 entries")
        counts = Counter(cls.pieces(text))
        return cls([BOS, UNK] + [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: size - 2]])

    def decode(self, ids) -> str:
        return " ".join(self.vocab[int(i)] for i in ids)


class CharTokenizer(Tokenizer):
    """Single characters; every character of the fitted text is kept."""

    kind = "char"

    @staticmethod
    def pieces(text: str) -> list[str]:
        return list(text)

    @classmethod
    def fit(cls, text: str) -> "CharTokenizer":
        counts = Counter(text)
        return cls([BOS, UNK] + [c for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))])

    def decode(self, ids) -> str:
        return "".join(self.vocab[int(i)] for i in ids)


def tokenizer_from_json(text: str) -> Tokenizer:
    fields = json.loads(text)
    kinds = {"word": WordTokenizer, "char": CharTokenizer}
    if not isinstance(fields, dict) or fields.get("kind") not in kinds or not isinstance(fields.get("vocab"), list):
        raise ValueError("the tokenizer is not a {kind: word|char, vocab: [...]} object")
    if not all(isinstance(v, str) for v in fields["vocab"]):
        raise ValueError("the tokenizer's vocabulary must be strings")
    return kinds[fields["kind"]](fields["vocab"])


def bos_id(tokenizer: Tokenizer | None) -> int:
    """The id a sequence starts with: the tokenizer's <bos> (GPT-2's <|endoftext|>), or 0 without one."""
    return tokenizer.bos_id if tokenizer else 0


def token_labels(tokenizer: Tokenizer | None, ids) -> list[str]:
    """A readable label per id: the tokenizer's, or the id itself for a model without one."""
    return tokenizer.labels(ids) if tokenizer else [str(int(i)) for i in ids]


def word_ids(tokenizer: Tokenizer | None, ids) -> list[int]:
    """The ids among ``ids``, in their order, whose token is a word: its own text is letters only, after the space a
    BPE token starts a word with ("class", "the", GPT-2's " the"; never "_", "(", "0" or "<bos>"). Empty without
    a tokenizer: its ids have no text."""
    return [int(i) for i in ids if tokenizer is not None and tokenizer.vocab[int(i)].removeprefix(" ").isalpha()]


@dataclass(frozen=True)
class Prompt:
    """A prompt's ids, with <bos> first, cut to the context; what was cut and how much is unknown."""

    ids: tuple[int, ...]
    full_length: int     # ids with <bos> before cutting to the context
    unknown_share: float  # share of the text's tokens that are <unk>


def prompt_ids(tokenizer: Tokenizer, text: str, n_ctx: int) -> Prompt:
    """The tokenizer's <bos> and the encoded text, the first n_ctx ids of it."""
    encoded = tokenizer.encode(text)
    ids = (tokenizer.bos_id, *encoded)
    return Prompt(ids[:n_ctx], len(ids), encoded.count(tokenizer.unk_id) / len(encoded) if encoded else 0.0)


def covered_prompts(tokenizer: Tokenizer, count: int = 5, words: tuple[int, int] = (8, 20)) -> list[str]:
    """Up to ``count`` sentences of the held-out built-in text in which every token is in ``tokenizer``'s
    vocabulary (no <unk>), ``words`` tokens long at least and at most: prompts this model can read whole.
    Held-out text, so the model has not seen them in training; the same ones every time."""
    found = []
    for sentence in re.split(r"(?<=\.)\s+", builtin_text("heldout")):
        sentence = " ".join(sentence.split())
        encoded = tokenizer.encode(sentence)
        if (sentence[:1].isalpha() and words[0] <= len(encoded) <= words[1] and tokenizer.unk_id not in encoded
                and sentence not in found):
            found.append(sentence)
            if len(found) == count:
                break
    return found


def random_ids(d_vocab: int, length: int, seed: int, bos: int = 0) -> tuple[int, ...]:
    """``bos`` (the tokenizer's <bos>: mechlib's 0, GPT-2's 50256), then ``length`` − 1 random ids from the seed
    (≥ 2: never mechlib's <bos> or <unk> where there is room)."""
    g = torch.Generator().manual_seed(seed)
    return (bos, *torch.randint(min(2, d_vocab - 1), d_vocab, (length - 1,), generator=g).tolist())


def repeated_sequences(d_vocab: int, length: int, batch: int, seed: int, bos: int = 0) -> Tensor:
    """[batch, 1 + 2·length]: ``bos`` (as ``random_ids``), a random segment of ``length`` ids from the seed (≥ 2, as
    ``random_ids``), then the segment again: on the repeat, an induction head attends to the token after the current
    token's earlier occurrence. One sequence's segment is ``random_ids(d_vocab, length + 1, seed)[1:]``."""
    generator = torch.Generator().manual_seed(seed)
    segment = torch.randint(min(2, d_vocab - 1), d_vocab, (batch, length), generator=generator)  # [batch length]
    return torch.cat([torch.full((batch, 1), bos, dtype=torch.long), segment, segment], dim=1)


def _utf16_without_mark(data: bytes) -> bool:
    """Latin-script UTF-16 saved without its byte-order mark: nearly every byte on one side of each pair is NUL and
    nearly none on the other (a binary file's NULs fall on both sides)."""
    half = len(data) // 2
    evens, odds = data[0::2].count(0), data[1::2].count(0)
    return half > 0 and max(evens, odds) > 0.9 * half and min(evens, odds) < 0.1 * half


def validate_upload(data: bytes, n_ctx: int) -> str:
    """The text of an uploaded .txt file (UTF-8, or UTF-16 with its byte-order mark), or ``DataError`` saying what
    is wrong and what to do. Sizes are in MB of 2²⁰ bytes, as Streamlit's uploader counts them."""
    if not data:
        raise DataError("the file is empty; upload a .txt file with some English text")
    if len(data) > MAX_UPLOAD_BYTES:
        raise DataError(f"the file is {len(data) / 2**20:.1f} MB; upload at most {MAX_UPLOAD_BYTES // 2**20} MB of text")
    if data[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):  # Windows Notepad's "Unicode": its NULs are not binary
        try:
            data = data.decode("utf-16").encode("utf-8")
        except UnicodeDecodeError as error:
            raise DataError(f"the file starts as UTF-16 text but has a bad byte at offset {error.start}; save it as UTF-8 "
                            "text and upload again") from None
    if _utf16_without_mark(data):
        raise DataError("the file looks like UTF-16 text without a byte-order mark; save it as UTF-8 text and upload again")
    controls = len(data) - len(data.translate(None, _CONTROL_BYTES))
    if b"\x00" in data or controls > 0.01 * len(data):
        raise DataError("the file looks binary, not text; upload a plain .txt file (UTF-8)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"the file is not UTF-8 (bad byte at offset {error.start}); save it as UTF-8 text and upload again") from None
    n_tokens = len(WordTokenizer.pieces(text))
    if n_tokens < 4 * n_ctx:
        raise DataError(f"the text has {n_tokens:,} words and marks, too short for a context of {n_ctx}; "
                        f"upload at least {4 * n_ctx:,}")
    return text


def bigram_distribution(tokens: Tensor, d_vocab: int) -> tuple[Tensor, Tensor]:
    """The corpus's bigram statistics: p(current) [d_vocab] and P(next | current) [d_vocab, d_vocab].

    Rows of tokens never seen as "current" are uniform (they carry no weight in p(current)).
    """
    counts = torch.zeros(d_vocab, d_vocab, dtype=torch.float64)
    counts.index_put_((tokens[:-1], tokens[1:]), torch.ones(len(tokens) - 1, dtype=torch.float64), accumulate=True)
    totals = counts.sum(-1, keepdim=True)                                     # [d_vocab 1]
    conditional = torch.where(totals > 0, counts / totals.clamp(min=1), 1.0 / d_vocab)
    return (totals[:, 0] / totals.sum()), conditional


@dataclass
class TextData:
    """Random windows of a token stream, each starting with <bos>."""

    tokens: Tensor  # [n_tokens] int64

    def batch(self, generator: torch.Generator, batch: int, n_ctx: int) -> Tensor:
        if len(self.tokens) < n_ctx:
            raise DataError(f"{len(self.tokens)} tokens is shorter than the context of {n_ctx}")
        starts = torch.randint(0, len(self.tokens) - n_ctx + 2, (batch,), generator=generator)
        windows = torch.stack([self.tokens[s : s + n_ctx - 1] for s in starts.tolist()])  # [batch n_ctx-1]
        return torch.cat([torch.zeros(batch, 1, dtype=torch.long), windows], dim=1)           # [batch n_ctx]


@dataclass
class RandomTokens:
    """<bos>, then uniformly random ids (≥ 2, never <bos> or <unk>)."""

    d_vocab: int

    def batch(self, generator: torch.Generator, batch: int, n_ctx: int) -> Tensor:
        tokens = torch.randint(2, self.d_vocab, (batch, n_ctx), generator=generator)
        tokens[:, 0] = 0
        return tokens


@dataclass
class WithRepeats:
    """Sequences from ``source`` in which a segment is copied right after itself.

    Segment lengths come from ``lengths`` and the segment's start varies, so a model cannot solve
    the repeat by position alone: it must find the earlier copy (an induction head).
    """

    source: "Data"
    lengths: tuple[int, ...]

    def batch(self, generator: torch.Generator, batch: int, n_ctx: int) -> Tensor:
        tokens = self.source.batch(generator, batch, n_ctx).clone()  # [batch pos]
        choices = [n for n in self.lengths if 2 * n + 1 <= n_ctx]
        if not choices:
            raise DataError(f"no segment length in {self.lengths} fits twice in a context of {n_ctx}")
        picks = torch.randint(0, len(choices), (batch,), generator=generator).tolist()
        for row, pick in enumerate(picks):
            n = choices[pick]
            start = 1 + int(torch.randint(0, n_ctx - 2 * n, (1,), generator=generator))
            tokens[row, start + n : start + 2 * n] = tokens[row, start : start + n]
        return tokens


@dataclass
class Mix:
    """Each sequence drawn from ``first`` with probability ``share``, else from ``second``."""

    first: "Data"
    second: "Data"
    share: float

    def batch(self, generator: torch.Generator, batch: int, n_ctx: int) -> Tensor:
        a, b = self.first.batch(generator, batch, n_ctx), self.second.batch(generator, batch, n_ctx)
        pick = torch.rand(batch, generator=generator) < self.share
        return torch.where(pick[:, None], a, b)


@dataclass(frozen=True)
class Copies:
    """A batch of the copying task: the tokens, and where each sequence's segment and its copy lie."""

    tokens: Tensor   # [batch pos]
    starts: Tensor   # [batch] position of the segment's first token
    lengths: Tensor  # [batch] segment length n: the copy fills starts + n … starts + 2n − 1

    @property
    def predictable(self) -> Tensor:
        """[batch pos − 1] bool, aligned with ``next_token_loss``: position p is True when token p + 1 is a copied
        token after the copy's first (p from start + n to start + 2n − 2), which the earlier copy tells."""
        p = torch.arange(self.tokens.shape[1] - 1)                                        # [pos − 1]
        first, last = self.starts + self.lengths, self.starts + 2 * self.lengths - 2      # [batch] each
        return (p >= first[:, None]) & (p <= last[:, None])

    @classmethod
    def repeats(cls, tokens: Tensor, length: int) -> "Copies":
        """Repeated sequences (``repeated_sequences``, [batch 1 + 2·length]) as copies: each segment at position 1,
        ``length`` long."""
        batch = tokens.shape[0]
        return cls(tokens, torch.ones(batch, dtype=torch.long), torch.full((batch,), length))


@dataclass(frozen=True)
class CopyingTask:
    """The copying task that forms induction heads fastest: <bos>, a random prefix, a random segment of n ids,
    the same n ids again, random ids to the end of the context.

    n varies per sequence from ``length`` / 2 to ``length`` and the prefix from 0 to what fits, so the copy's
    distance and place both vary: no position-only rule predicts it, only finding the earlier copy (an
    induction head). Ids are 2 … d_vocab − 1 (never <bos> or <unk>).
    """

    d_vocab: int
    length: int  # the longest segment, T

    def sample(self, generator: torch.Generator, batch: int, n_ctx: int) -> Copies:
        if 2 * self.length + 1 > n_ctx:
            raise DataError(f"a segment of {self.length} fits twice after <bos> only in a context of "
                            f"{2 * self.length + 1} or more, not {n_ctx}")
        lengths = torch.randint(self.length // 2, self.length + 1, (batch,), generator=generator)  # [batch]
        starts = 1 + (torch.rand(batch, generator=generator) * (n_ctx - 2 * lengths)).long()       # [batch]
        tokens = torch.randint(2, self.d_vocab, (batch, n_ctx), generator=generator)
        tokens[:, 0] = 0
        p = torch.arange(n_ctx)                                                                     # [pos]
        copy = (p >= (starts + lengths)[:, None]) & (p < (starts + 2 * lengths)[:, None])           # [batch pos]
        source = torch.where(copy, p - lengths[:, None], p)                                         # [batch pos]
        return Copies(tokens.gather(1, source), starts, lengths)

    def batch(self, generator: torch.Generator, batch: int, n_ctx: int) -> Tensor:
        return self.sample(generator, batch, n_ctx).tokens


Data = TextData | RandomTokens | WithRepeats | Mix | CopyingTask


SOURCES = {"words": "built-in text, words", "chars": "built-in text, characters",
           "random": "random tokens with repeats", "upload": "uploaded text"}
WORD_VOCAB = 1000    # the word tokenizer keeps the 1,000 most frequent words (with <bos> and <unk>)
RANDOM_VOCAB = 100   # ids of the random-token data
EVAL_LENGTH = 20     # induction is scored at this segment length; training sequences avoid it


def eval_length(n_ctx: int) -> int:
    """The segment length scores use for a context of n_ctx: 20, or what fits twice after <bos>."""
    return min(EVAL_LENGTH, (n_ctx - 1) // 2)


def training_lengths(n_ctx: int) -> tuple[int, ...]:
    """Segment lengths for training repeats: 4 … (n_ctx−1)/2, without the one scores are measured at."""
    return tuple(n for n in range(4, (n_ctx - 1) // 2 + 1) if n != eval_length(n_ctx))


def training_data(source: str, n_ctx: int, repeats: float, text: str | None = None,
                  random_share: float = 0.5) -> tuple[Tokenizer | None, Data]:
    """The tokenizer and batches for ``source`` (a key of ``SOURCES``; "upload" needs ``text``).

    ``repeats`` is the share of sequences that get a copied segment; of those, ``random_share`` are random
    tokens of the same vocabulary and the rest spans of the text itself. Source "random" always repeats.
    Raises ``DataError``.
    """
    if source not in SOURCES:
        raise ValueError(f"source={source!r}; choose one of {', '.join(SOURCES)}")
    if not 0 <= repeats <= 1:
        raise ValueError(f"repeats={repeats}: a share between 0 and 1")
    lengths = training_lengths(n_ctx)
    if source == "random":
        return None, WithRepeats(RandomTokens(RANDOM_VOCAB), lengths)
    if source == "upload" and text is None:
        raise DataError("no uploaded text; upload a .txt file first")
    corpus = builtin_text() if source in ("words", "chars") else text
    tokenizer = CharTokenizer.fit(corpus) if source == "chars" else WordTokenizer.fit(corpus, WORD_VOCAB)
    stream = TextData(torch.tensor(tokenizer.encode(corpus)))
    if len(stream.tokens) < 4 * n_ctx:
        raise DataError(f"the text has {len(stream.tokens):,} tokens, too short for a context of {n_ctx}")
    if not repeats:
        return tokenizer, stream
    copies = Mix(WithRepeats(RandomTokens(tokenizer.d_vocab), lengths), WithRepeats(stream, lengths), random_share)
    return tokenizer, Mix(copies, stream, repeats)
