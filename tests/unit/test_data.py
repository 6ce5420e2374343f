"""Corpora and tokenizers: round trips, upload validation messages, synthetic repeats."""

import math

import pytest
import torch

from mechlib import data
from mechlib.data import CharTokenizer, DataError, WordTokenizer
from mechlib.loss import next_token_loss


@pytest.fixture(scope="module")
def corpus() -> str:
    return data.builtin_text()


def test_builtin_corpus_is_cleaned_and_split(corpus):
    heldout = data.builtin_text("heldout")
    assert 350_000 < len(corpus) < 480_000 and 20_000 < len(heldout) < 80_000
    underlines = [line for line in corpus.splitlines() if line.strip() and set(line.strip()) <= set("*=-~^#")]
    assert underlines == []  # reST heading underlines removed
    assert "assert" in corpus
    assert not set(heldout.split("\n\n")) & set(corpus.split("\n\n"))  # no paragraph in both


def test_word_tokenizer_round_trip_and_unknowns(corpus):
    tok = WordTokenizer.fit(corpus, 500)
    assert tok.d_vocab == 500 and tok.vocab[:2] == ["<bos>", "<unk>"]
    text = "The class is an object, and the value of x is 1."
    ids = tok.encode(text)
    assert tok.decode(ids) == "the class is an object , and the value of x is 1 ."
    assert tok.encode("zyzzyva") == [1]  # an unknown word is <unk>
    assert tok.labels([0, 1, tok.index["the"]]) == ["<bos>", "<unk>", "the"]


def test_char_tokenizer_round_trip(corpus):
    tok = CharTokenizer.fit(corpus)
    text = "def f(x):\n    return x + 1"
    assert tok.decode(tok.encode(text)) == text
    assert tok.labels(tok.encode(" \n")) == ["␣", "⏎"]


@pytest.mark.parametrize("tok", [WordTokenizer(["<bos>", "<unk>", "a", "b"]), CharTokenizer(["<bos>", "<unk>", "a"])])
def test_tokenizer_json_round_trip(tok):
    again = data.tokenizer_from_json(tok.to_json())
    assert type(again) is type(tok) and again.vocab == tok.vocab


def test_bad_tokenizer_json():
    with pytest.raises(ValueError, match="tokenizer is not"):
        data.tokenizer_from_json('{"kind": "bpe", "vocab": []}')
    with pytest.raises(ValueError, match="starts with <bos>, <unk>"):
        data.tokenizer_from_json('{"kind": "word", "vocab": ["a", "b"]}')


@pytest.mark.parametrize("payload, message", [
    (b"", "the file is empty"),
    (b"x" * (data.MAX_UPLOAD_BYTES + 1), "upload at most 5 MB"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 10, "looks binary"),
    (b"plain words " * 10_000 + b"\x00" * 5000, "looks binary"),  # a NUL far past the start
    (b"ab\x7f" * 1000, "looks binary"),                           # DEL bytes count as control
    ("naïve café".encode("latin-1") * 100, "not UTF-8 (bad byte at offset 2)"),
    (b"a few words only", "the text has 4 words and marks, too short for a context of 64; upload at least 256"),
])
def test_each_bad_upload_gets_a_message(payload, message):
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        data.validate_upload(payload, n_ctx=64)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_utf16_with_its_byte_order_mark_is_read_as_text(encoding):
    text = "the café sat on the mat. " * 60
    payload = text.encode(encoding)
    if encoding != "utf-16":  # the explicit-endian codecs write no mark; Notepad does
        payload = "\ufeff".encode(encoding) + payload
    assert b"\x00" in payload  # what made it read as binary
    assert data.validate_upload(payload, n_ctx=64) == text


def test_broken_utf16_is_named_as_utf16():
    payload = ("the cat sat on the mat. " * 60).encode("utf-16") + b"\x00\xd8a\x00"  # a lone surrogate
    with pytest.raises(DataError, match=r"starts as UTF-16 text but has a bad byte at offset 2882; save it as UTF-8"):
        data.validate_upload(payload, n_ctx=64)


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_without_its_mark_is_named_and_binary_with_nuls_on_both_sides_is_not(encoding):
    text = ("the cat sat on the mat. " * 60).encode(encoding)
    with pytest.raises(DataError, match="looks like UTF-16 text without a byte-order mark; save it as UTF-8"):
        data.validate_upload(text, n_ctx=64)
    binary = b"\x00\x00ab" * 1000  # NULs at even and odd offsets alike
    with pytest.raises(DataError, match="looks binary"):
        data.validate_upload(binary, n_ctx=64)


def test_the_size_cap_is_stated_in_the_uploaders_megabytes():
    # Streamlit's uploader counts MB of 2**20 bytes; 5 MiB is 5.2 million bytes, and the message must say 5
    assert data.MAX_UPLOAD_BYTES == 5 * 2**20
    with pytest.raises(DataError, match=r"^the file is 5\.0 MB; upload at most 5 MB of text$"):
        data.validate_upload(b"x" * (data.MAX_UPLOAD_BYTES + 1), n_ctx=64)


def test_good_upload_returns_its_text():
    text = "the cat sat on the mat. " * 60
    assert data.validate_upload(text.encode(), n_ctx=64) == text


def test_random_tokens_with_repeats_copy_a_segment():
    g = torch.Generator().manual_seed(0)
    source = data.WithRepeats(data.RandomTokens(50), lengths=(5,))
    tokens = source.batch(g, 16, 24)
    assert tokens.shape == (16, 24) and torch.all(tokens[:, 0] == 0) and torch.all(tokens[:, 1:] >= 2)
    for row in tokens:
        assert any(torch.equal(row[s : s + 5], row[s + 5 : s + 10]) for s in range(1, 15))


def test_repeats_vary_in_length_and_start():
    g = torch.Generator().manual_seed(1)
    tokens = data.WithRepeats(data.RandomTokens(1000), lengths=(3, 7)).batch(g, 64, 32)
    found = set()
    for row in tokens:
        for n in (7, 3):
            starts = [s for s in range(1, 32 - 2 * n + 1) if torch.equal(row[s : s + n], row[s + n : s + 2 * n])]
            if starts:
                found.add((n, starts[0]))
                break
    assert {n for n, _ in found} == {3, 7} and len({s for _, s in found}) > 5


def test_text_windows_start_with_bos_and_mix_draws_from_both():
    g = torch.Generator().manual_seed(2)
    text = data.TextData(torch.arange(2, 500))
    windows = text.batch(g, 8, 10)
    assert torch.all(windows[:, 0] == 0) and torch.all(windows[:, 2:] - windows[:, 1:-1] == 1)
    mixed = data.Mix(text, data.RandomTokens(5), 0.5).batch(g, 64, 10)
    consecutive = (mixed[:, 2:] - mixed[:, 1:-1] == 1).all(-1)
    assert 10 < int(consecutive.sum()) < 54
    with pytest.raises(DataError, match="fits twice"):
        data.WithRepeats(data.RandomTokens(5), (20,)).batch(g, 1, 10)


def test_prompt_ids_put_bos_first_cut_to_the_context_and_count_unknown_words():
    tokenizer = data.WordTokenizer.fit("the class of an object is its type", 100)
    prompt = data.prompt_ids(tokenizer, "the class of zzz qqq", n_ctx=4)
    assert prompt.ids == (0, *tokenizer.encode("the class of"))
    assert prompt.full_length == 6
    assert prompt.unknown_share == pytest.approx(2 / 5)
    assert data.prompt_ids(tokenizer, "", n_ctx=4) == data.Prompt((0,), 1, 0.0)


def test_random_ids_start_with_bos_avoid_unk_and_follow_the_seed():
    ids = data.random_ids(50, 24, seed=3)
    assert len(ids) == 24 and ids[0] == 0 and min(ids[1:]) >= 2 and max(ids) < 50
    assert ids == data.random_ids(50, 24, seed=3) != data.random_ids(50, 24, seed=4)


def test_token_labels_fall_back_to_ids_without_a_tokenizer():
    assert data.token_labels(None, [0, 7]) == ["0", "7"]
    assert data.token_labels(data.CharTokenizer.fit("ab c"), [0, 2]) == ["<bos>", data.CharTokenizer.fit("ab c").labels([2])[0]]


def test_words_are_tokens_of_letters_only_read_from_their_text():
    tokenizer = WordTokenizer(["<bos>", "<unk>", "the", "_", "(", "0", "x2", "class", "é"])
    assert data.word_ids(tokenizer, range(9)) == [2, 7, 8]                           # not <bos>, <unk>, "_", "0", "x2"
    assert data.word_ids(tokenizer, [7, 3, 2]) == [7, 2]                             # in the order asked
    assert data.word_ids(None, [2, 3]) == []                                         # ids without text are no words


def _best_fixed_offset_accuracy(tokens: torch.Tensor, mask: torch.Tensor) -> float:
    """The best a position-only rule does on the masked positions: at each position p, predict token p + 1 as the
    token p + 1 − d for the one distance d that is right most often at p (over the batch)."""
    hits, count = 0, 0
    for p in range(tokens.shape[1] - 1):
        rows = mask[:, p]
        if not rows.any():
            continue
        best = max(int((tokens[rows, p + 1] == tokens[rows, p + 1 - d]).sum()) for d in range(1, p + 2))
        hits, count = hits + best, count + int(rows.sum())
    return hits / count


def test_the_copying_task_copies_a_segment_of_varied_length_from_a_varied_start():
    task = data.CopyingTask(d_vocab=512, length=16)
    copies = task.sample(torch.Generator().manual_seed(0), 256, 40)
    tokens, starts, lengths = copies.tokens, copies.starts.tolist(), copies.lengths.tolist()
    assert tokens.shape == (256, 40) and (tokens[:, 0] == 0).all() and (tokens[:, 1:] >= 2).all()
    for row, (start, n) in enumerate(zip(starts, lengths)):
        assert 8 <= n <= 16 and 1 <= start and start + 2 * n <= 40
        assert torch.equal(tokens[row, start + n : start + 2 * n], tokens[row, start : start + n])
        # the mask marks the positions whose next token is a copied one after the copy's first: p + 1 in
        # start + n + 1 … start + 2n − 1
        assert copies.predictable[row].nonzero().flatten().tolist() == list(range(start + n, start + 2 * n - 1))
    assert set(lengths) == set(range(8, 17)) and len(set(starts)) > 10


def test_no_position_only_rule_solves_the_copying_task_as_one_does_a_fixed_distance():
    """The fixed-distance trap: when the copy is always the same distance back, one distance per position
    predicts every copied token. The copying task varies the distance, so the best such rule fails most of the time."""
    copies = data.CopyingTask(d_vocab=512, length=16).sample(torch.Generator().manual_seed(1), 512, 40)
    assert _best_fixed_offset_accuracy(copies.tokens, copies.predictable) < 0.3
    segment = torch.randint(2, 512, (512, 16), generator=torch.Generator().manual_seed(2))
    fixed = torch.cat([torch.zeros(512, 1, dtype=torch.long), segment, segment], dim=1)   # always 16 back
    mask = torch.zeros(512, 32, dtype=torch.bool)
    mask[:, 17:32] = True
    assert _best_fixed_offset_accuracy(fixed, mask) == 1.0


def test_the_copying_task_refuses_a_context_too_short_for_two_copies():
    with pytest.raises(DataError, match="fits twice after <bos> only in a context of 33 or more, not 32"):
        data.CopyingTask(d_vocab=512, length=16).sample(torch.Generator(), 4, 32)


def test_example_prompts_are_whole_in_the_vocabulary_and_held_out(corpus):
    tokenizer = WordTokenizer.fit(corpus, 1000)
    examples = data.covered_prompts(tokenizer, 5, (8, 20))
    assert len(examples) == 5 and len(set(examples)) == 5
    held_out = " ".join(data.builtin_text("heldout").split())
    for text in examples:
        prompt = data.prompt_ids(tokenizer, text, 64)
        assert prompt.unknown_share == 0 and 8 <= prompt.full_length - 1 <= 20 and text in held_out
    assert data.prompt_ids(tokenizer, "the cat sat on the mat", 64).unknown_share > 0  # the example fails


def test_repeated_sequences_repeat_the_seeds_segment():
    batch = data.repeated_sequences(50, 7, 4, seed=3)                                   # [batch 1 + 2·7]
    ids = tuple(data.repeated_sequences(50, 7, 1, seed=3, bos=49)[0].tolist())
    assert batch.shape == (4, 15) and (batch[:, 0] == 0).all() and torch.equal(batch[:, 1:8], batch[:, 8:])
    assert ids[0] == 49 and ids[1:] == tuple(batch[0, 1:].tolist())                     # one sequence: the batch's first
    assert ids[1:8] == ids[8:] == data.random_ids(50, 8, 3)[1:] and min(ids[1:]) >= 2


def test_repeats_as_copies_predict_the_second_copy_after_its_first_token():
    tokens = data.repeated_sequences(d_vocab=50, length=6, batch=4, seed=1)               # [batch 1 + 2·6]
    predictable = data.Copies.repeats(tokens, 6).predictable                              # [batch pos − 1]
    p = torch.arange(12)
    assert torch.equal(predictable, ((p >= 7) & (p <= 11)).expand(4, -1))                # L+1 … 2L−1 predict L+2 … 2L
    uniform, perfect = torch.zeros(4, 13, 50), torch.full((4, 13, 50), -1e9)
    perfect.scatter_(-1, tokens.roll(-1, dims=1)[..., None], 0.0)
    assert next_token_loss(uniform, tokens, mask=predictable) == pytest.approx(math.log(50))
    assert next_token_loss(perfect, tokens, mask=predictable) == pytest.approx(0.0)
