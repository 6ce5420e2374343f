"""A Hugging Face ``tokenizers`` tokenizer (a model directory's ``tokenizer.json``, GPT-2's byte-level BPE) with
mechlib's tokenizer API: text → ids exactly as ``tokenizers`` encodes it, ids → text, a readable label per id."""

from pathlib import Path

__all__ = ["HFTokenizer"]

MAX_BYTES = 50 * 10**6  # GPT-2's tokenizer.json is 1.4 MB
END_OF_TEXT = "<|endoftext|>"


class HFTokenizer:
    """``vocab[i]`` is id i's own text (" the", "\\n"); ids the tokenizer lacks (a vocabulary padded to a round
    size) read ``<id i>``. A sequence starts with ``bos_id``: the config's ``bos_token_id`` (GPT-2's
    <|endoftext|>, 50256), else the tokenizer's <|endoftext|>, else 0. Byte-level BPE has no unknown token."""

    kind = "hf"
    unk_id = None

    def __init__(self, tokenizer, d_vocab: int, bos_id: int | None = None):
        size = tokenizer.get_vocab_size()
        if size > d_vocab:
            raise ValueError(f"has {size:,} tokens but the model's d_vocab is {d_vocab:,}")
        self.tokenizer = tokenizer
        self.vocab = tokenizer.decode_batch([[i] for i in range(size)]) + [f"<id {i}>" for i in range(size, d_vocab)]
        named = tokenizer.token_to_id(END_OF_TEXT)
        self.bos_id = next(i for i in (bos_id, named, 0) if isinstance(i, int) and 0 <= i < d_vocab)

    @classmethod
    def from_file(cls, path: str | Path, d_vocab: int, bos_id: int | None = None) -> "HFTokenizer":
        """The tokenizer of ``path`` (a ``tokenizer.json``); raises ``ValueError`` whose sentence follows the file's
        name ("tokenizer.json is 60 MB; …")."""
        path = Path(path)
        if path.stat().st_size > MAX_BYTES:
            raise ValueError(f"is {path.stat().st_size / 10**6:,.0f} MB; a tokenizer.json is a few MB")
        try:
            from tokenizers import Tokenizer
        except ImportError as error:
            raise ImportError("a model directory's tokenizer.json is read by Hugging Face's tokenizers: "
                              "pip install tokenizers") from error
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as error:  # tokenizers reports a malformed file with its own exception type
            raise ValueError(f"cannot be read by tokenizers ({str(error)[:120]})") from None
        return cls(tokenizer, d_vocab, bos_id)

    @property
    def d_vocab(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def pieces(self, text: str) -> list[str]:
        return [self.vocab[i] for i in self.encode(text)]

    def decode(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids])

    def to_json(self) -> str:
        """Refused: a mechlib checkpoint stores mechlib's own word and character tokenizers, not Hugging Face's."""
        raise TypeError("a Hugging Face tokenizer is not stored in a mechlib checkpoint: keep the model's directory "
                        "(from_transformers reads it again), or set model.tokenizer = None before mechlib.io.save")

    def labels(self, ids) -> list[str]:
        """A short readable label per id (spaces and newlines made visible), as mechlib's own tokenizers give."""
        return [self.vocab[int(i)].replace(" ", "␣").replace("\n", "⏎") for i in ids]
