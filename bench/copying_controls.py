"""Controls on the copying task (issue 11 §4): the two-layer model beside a one-layer model and an LSTM.

Run from the repository root: .venv/bin/python -m bench.copying_controls
Trains the zoo's ``copying-2l``, ``copying-1l`` and ``copying-lstm`` from scratch by their recipes (one recipe:
``train.INDUCTION_PRESET``'s task, optimiser settings and batch, the same number of steps each), one after
another with one thread, as ``python -m mechlib.train NAME`` does, so each comes out equal to its shipped file bit
for bit; the script says whether it did. Prints each model's parameter count, its wall time for the step budget
(evaluations included, every steps / 20), and its loss on the second copy of repeated random sequences
(``copying.controls_of``, the LSTM page's figure), with ln d_vocab and the "some earlier token comes next" level.
The load average is printed too: other work on the 2 cores slows every time here.
"""

import os
import time

import torch

from mechlib import copying, train, zoo


def main() -> None:
    torch.set_num_threads(1)
    print("$ .venv/bin/python -m bench.copying_controls")
    recipe = zoo.RECIPES[copying.CONTROLS["two layers"]]
    print(f"torch {torch.__version__}, 1 thread, load average {os.getloadavg()[0]:.1f}; {recipe.steps:,} steps each, "
          f"lr {recipe.lr}, batch {recipe.batch_size}, warm-up {recipe.warmup}, clipping {recipe.clip}, "
          f"weight decay {recipe.weight_decay}")
    models, seconds = {}, {}
    for role, name in copying.CONTROLS.items():
        began = time.perf_counter()
        models[role] = train.train_recipe(name).model.share()
        seconds[role] = time.perf_counter() - began
        shipped = zoo.load(name).state_dict()
        same = all(torch.equal(value, shipped[key].cpu()) for key, value in models[role].state_dict().items())
        print(f"{name:13s} {role:10s} {models[role].cfg.n_params():8,} parameters  {seconds[role]:6.1f} s  "
              f"{'equal to' if same else 'DIFFERENT from'} the shipped file  (load average {os.getloadavg()[0]:.1f})")
    c = copying.controls_of(models, seed=0)
    print(f"loss on the second copy (nats; {copying.CONTROL_BATCH} sequences of <bos>, {c.length} random ids, the same "
          "ids again; seed 0):")
    for role, loss in c.second_copy.items():
        print(f"  {role:10s} {loss:.3f}   (first copy {c.first_copy[role]:.3f})")
    print(f"  ln {c.d_vocab} = {c.knows_nothing:.3f} (knows nothing); some earlier token comes next: {c.earlier:.3f}")
    print(f"ordered (each ≥ {copying.GAP_MIN} worse): {c.ordered}; LSTM within {copying.NOTHING_MARGIN} of ln {c.d_vocab}: "
          f"{c.lstm_knows_nothing}; one layer within {copying.EARLIER_MARGIN} of the earlier-token level: {c.one_layer_earlier}")


if __name__ == "__main__":
    main()
