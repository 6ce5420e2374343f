"""``mechlib.interop.from_transformers`` against ``transformers`` itself, on three GPT-2 shapes with random weights
(GPT-2 small's among them; nothing is downloaded), and its tokenizer against ``tokenizers`` on 1,000 strings.

    .venv/bin/python -m bench.hf_interop

For each shape: a ``GPT2LMHeadModel`` drawn by ``transformers``' own initialisation, saved in Hugging Face's format
(``save_pretrained``) and read back by ``from_transformers`` from the directory, in float32 and in float64; a batch
of 2 × 128 random tokens; printed: the largest |a − b| / max(1, |reference|) of the logits (goals: float32 ≤ 1e-4,
float64 ≤ 1e-10), the read's time, and each library's forward. Then a byte-level BPE tokenizer (GPT-2's kind),
trained here on Python's documentation with ``tokenizers`` and asked for GPT-2's 50,257 tokens (the documentation's
words allow fewer), encodes 1,000 strings (paragraphs of that documentation, and lines in other scripts and with
emoji); printed: how many of mechlib's encodings equal ``tokenizers``' and ``transformers``' (goal: all), and how
many decode back to their string.
"""

import pydoc_data.topics
import sys
import tempfile
import time
from pathlib import Path

import torch

from mechlib.hf_tokenizer import HFTokenizer
from mechlib.interop import from_transformers

SHAPES = {
    "2 layers, d_model 64": dict(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128),
    "6 layers, d_model 256": dict(n_layer=6, n_embd=256, n_head=8, vocab_size=8000, n_positions=256),
    "GPT-2 small": dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024),
}
GOALS = {torch.float32: 1e-4, torch.float64: 1e-10}
BATCH, POSITIONS = 2, 128
OTHER_SCRIPTS = ["Größe und Maß: naïve café", "Привет, мир", "こんにちは世界", "שלום עולם", "emoji 🧮➕🤖 and tabs\t\t",
                 "  leading spaces", "trailing newline\n", "mixed 数学 and math: ∑ᵢ xᵢ²", "", " "]


def scaled_difference(ours: torch.Tensor, reference: torch.Tensor) -> float:
    return float(((ours - reference).abs() / reference.abs().clamp(min=1.0)).max())


def compare_shape(transformers, name: str, fields: dict) -> None:
    last = fields["vocab_size"] - 1  # GPT-2's <|endoftext|> is its last id
    config = transformers.GPT2Config(**fields, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=last,
                                     eos_token_id=last)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, fields["vocab_size"], (BATCH, POSITIONS), generator=torch.Generator().manual_seed(1))
    for dtype in (torch.float32, torch.float64):
        hf.to(dtype)  # in place: the same weights, float64's from float32's
        with tempfile.TemporaryDirectory() as directory:
            hf.save_pretrained(directory)
            start = time.perf_counter()
            model = from_transformers(directory)
            read_s = time.perf_counter() - start
        with torch.inference_mode():
            start = time.perf_counter()
            ours = model(ids)
            ours_s = time.perf_counter() - start
            start = time.perf_counter()
            theirs = hf(ids).logits
            theirs_s = time.perf_counter() - start
        difference = scaled_difference(ours, theirs)
        verdict = "met" if difference <= GOALS[dtype] else "MISSED"
        print(f"  {name:22s} {str(dtype).removeprefix('torch.'):8s} max |Δlogit| / max(1, |logit|) {difference:8.1e} "
              f"(goal ≤ {GOALS[dtype]:.0e}: {verdict}); read {read_s:5.2f} s; forward mechlib {ours_s * 1e3:6.0f} ms, "
              f"transformers {theirs_s * 1e3:6.0f} ms")
        del model


def strings() -> list[str]:
    paragraphs = [p.strip() for text in pydoc_data.topics.topics.values() for p in text.split("\n\n") if p.strip()]
    return (OTHER_SCRIPTS + paragraphs)[:1000]


def compare_tokenizers(transformers) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=50257, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    start = time.perf_counter()
    tokenizer.train_from_iterator(pydoc_data.topics.topics.values(), trainer)
    trained_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "tokenizer.json"
        tokenizer.save(str(path))
        ours = HFTokenizer.from_file(path, 50257)
        reference = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path))
    texts = strings()
    same_tokenizers = sum(ours.encode(text) == tokenizer.encode(text).ids for text in texts)
    same_transformers = sum(ours.encode(text) == reference(text)["input_ids"] for text in texts)
    round_trips = sum(ours.decode(ours.encode(text)) == text for text in texts)
    print(f"  tokenizer: byte-level BPE, {tokenizer.get_vocab_size():,} tokens (trained in {trained_s:.1f} s); "
          f"{len(texts):,} strings: identical to tokenizers' {same_tokenizers:,}, to transformers' "
          f"{same_transformers:,} (goal: all); decoded back to the string {round_trips:,}")


def main() -> None:
    import transformers
    transformers.utils.logging.disable_progress_bar()  # save_pretrained's bar, once per read
    print(f"$ .venv/bin/python -m bench.hf_interop {' '.join(sys.argv[1:])}".rstrip())
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads; "
          f"batch {BATCH} × {POSITIONS} random tokens, random weights (transformers' initialisation)")
    for name, fields in SHAPES.items():
        compare_shape(transformers, name, fields)
    compare_tokenizers(transformers)


if __name__ == "__main__":
    main()
