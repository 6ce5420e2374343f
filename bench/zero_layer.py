"""The zero-layer model beside what its width allows: the four figures the Circuits page shows.

Run from the repository root: .venv/bin/python -m bench.zero_layer
For the shipped attn-only-0l (fitted by ``python -m mechlib.train attn-only-0l``): KL(corpus bigrams ‖ model), the
best rank-d_model fit's KL, the unigram baseline's KL and the corpus's bigram entropy, all in nats, and the time
the best fit takes. The goal: the model's KL ≤ 0.01 nats.
"""

import time

import torch

from mechlib import bigrams, zoo


def main() -> None:
    model = zoo.load("attn-only-0l")
    start = time.perf_counter()
    c = bigrams.ceiling(model)
    print("$ .venv/bin/python -m bench.zero_layer")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; attn-only-0l, d_model {model.cfg.d_model}, "
          f"vocab {model.cfg.d_vocab:,}; the four figures in {time.perf_counter() - start:.1f} s")
    print(f"KL(corpus bigrams ‖ model)        {c.model_kl:.2e} nats (goal ≤ 0.01)")
    print(f"KL of the best rank-{model.cfg.d_model} fit       {c.best_fit_kl:.2e} nats")
    print(f"KL of the unigram baseline         {c.unigram_kl:.3f} nats")
    print(f"bigram entropy H(next | current)   {c.entropy:.3f} nats")


if __name__ == "__main__":
    main()
