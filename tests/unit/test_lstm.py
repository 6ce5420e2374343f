"""The LSTM: equal to torch.nn.LSTM on the same weights, gates in (0, 1), the cell decomposes exactly."""

import pytest
import torch

from mechlib.lstm import LSTM, LSTMConfig, cell_contributions


@pytest.mark.parametrize("layers", [1, 2])
@torch.inference_mode()
def test_equals_torch_lstm_on_the_same_weights(layers):
    cfg = LSTMConfig(d_vocab=30, d_model=12, d_hidden=16, n_layers=layers, seed=1)
    ours = LSTM(cfg).double()
    reference = torch.nn.LSTM(12, 16, num_layers=layers, batch_first=True).double()
    reference.load_state_dict(ours.rnn.state_dict())  # the same names and shapes
    tokens = torch.randint(0, 30, (3, 9), generator=torch.Generator().manual_seed(0))
    logits, states = ours.run_with_states(tokens)
    hidden, (h_n, c_n) = reference(ours.W_E[tokens])
    assert (hidden - states[f"L{layers - 1}.hidden"]).abs().max() <= 1e-10
    assert (hidden @ ours.W_U + ours.b_U - logits).abs().max() <= 1e-10
    assert (c_n[-1] - states[f"L{layers - 1}.cell"][:, -1]).abs().max() <= 1e-10
    ours.rnn.load_state_dict(reference.state_dict())  # and back


@torch.inference_mode()
def test_gates_lie_in_zero_one_and_the_cell_decomposes_exactly():
    model = LSTM(LSTMConfig(d_vocab=20, d_model=8, d_hidden=10, seed=2)).double()
    _, states = model.run_with_states(torch.randint(0, 20, (2, 12)))
    for gate in ("input", "forget", "output"):
        assert states[f"L0.{gate}"].min() > 0 and states[f"L0.{gate}"].max() < 1
    assert states["L0.candidate"].abs().max() < 1
    contributions = cell_contributions(states)
    assert contributions.shape == (2, 12, 10)
    assert (contributions.sum(1) - states["L0.cell"][:, -1]).abs().max() <= 1e-10
    # Up to any step t, the decomposition of c_t sums the same way.
    partial = cell_contributions({k: v[:, :5] for k, v in states.items()})
    assert (partial.sum(1) - states["L0.cell"][:, 4]).abs().max() <= 1e-10


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match="d_hidden=0 is out of range; choose d_hidden between 1 and 8192"):
        LSTMConfig(d_vocab=10, d_model=4, d_hidden=0)
    with pytest.raises(ValueError, match="n_layers=1000000 is out of range; choose n_layers between 1 and 48"):
        LSTMConfig(d_vocab=10, d_model=4, d_hidden=4, n_layers=1_000_000)
