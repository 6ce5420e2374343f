"""An LSTM whose gates and cell state are exposed step by step, for the LSTM analogy (seed 002).

c_t = f_t ⊙ c_{t−1} + i_t ⊙ g_t and h_t = o_t ⊙ tanh(c_t): the cell state is the long-term memory
carried from step to step, as the residual stream is carried from layer to layer. The recurrent
weights use ``torch.nn.LSTM``'s names, shapes and gate order (input, forget, cell, output), so
``model.rnn.load_state_dict(torch_lstm.state_dict())`` moves weights between the two.
"""

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from mechlib.config import JsonConfig, whole
from mechlib.shared import Shareable

__all__ = ["LSTMConfig", "LSTM", "cell_contributions"]

GATES = ("input", "forget", "candidate", "output")  # torch.nn.LSTM's order: i, f, g, o
LIMITS = {"d_vocab": (2, 200_000), "d_model": (1, 8192), "d_hidden": (1, 8192), "n_layers": (1, 48),
          "n_ctx": (1, 8192)}  # as ModelConfig's: a config is bounded before anything is built from it


@dataclass(frozen=True, kw_only=True)
class LSTMConfig(JsonConfig):
    d_vocab: int
    d_model: int     # embedding size
    d_hidden: int    # cell and hidden state size
    n_layers: int = 1
    n_ctx: int = 64  # the training window (the LSTM itself reads any length)
    seed: int = 0

    def __post_init__(self) -> None:
        for name, (low, high) in LIMITS.items():
            whole(name, getattr(self, name), low, high)
        whole("seed", self.seed, 0, 2**63 - 1)

    def n_params(self) -> int:
        H, recurrent = self.d_hidden, 0
        for k in range(self.n_layers):
            recurrent += 4 * H * ((self.d_model if k == 0 else H) + H + 2)
        return self.d_vocab * self.d_model + recurrent + H * self.d_vocab + self.d_vocab

    def estimate_mb(self, batch: int, bytes_per_number: int = 4) -> float:
        """Weights plus one batch's gates, states and logits over the training window, in MB."""
        per_step = 6 * self.d_hidden * self.n_layers + self.d_model + self.d_vocab
        return (self.n_params() + batch * self.n_ctx * per_step) * bytes_per_number / 1e6


class Recurrence(nn.Module):
    """The recurrent weights, named and shaped as in torch.nn.LSTM: weight_ih_l{k} [4·d_hidden, in], …"""

    def __init__(self, cfg: LSTMConfig):
        super().__init__()
        for k in range(cfg.n_layers):
            d_in = cfg.d_model if k == 0 else cfg.d_hidden
            self.register_parameter(f"weight_ih_l{k}", nn.Parameter(torch.empty(4 * cfg.d_hidden, d_in)))
            self.register_parameter(f"weight_hh_l{k}", nn.Parameter(torch.empty(4 * cfg.d_hidden, cfg.d_hidden)))
            self.register_parameter(f"bias_ih_l{k}", nn.Parameter(torch.empty(4 * cfg.d_hidden)))
            self.register_parameter(f"bias_hh_l{k}", nn.Parameter(torch.empty(4 * cfg.d_hidden)))


class LSTM(Shareable):
    """Embedding W_E [d_vocab d_model] → n_layers LSTM layers → W_U [d_hidden d_vocab] + b_U."""

    def __init__(self, cfg: LSTMConfig):
        super().__init__()
        self.cfg = cfg
        self.tokenizer = None  # a mechlib.data.Tokenizer for models trained on text; saved with the model
        self.W_E = nn.Parameter(torch.empty(cfg.d_vocab, cfg.d_model))
        self.rnn = Recurrence(cfg)
        self.W_U = nn.Parameter(torch.empty(cfg.d_hidden, cfg.d_vocab))
        self.b_U = nn.Parameter(torch.zeros(cfg.d_vocab))
        generator = torch.Generator().manual_seed(cfg.seed)
        bound = cfg.d_hidden**-0.5  # torch.nn.LSTM's own initialisation: U(−1/√H, 1/√H)
        with torch.no_grad():
            self.W_E.normal_(0.0, 1.0, generator=generator)
            for param in self.rnn.parameters():
                param.uniform_(-bound, bound, generator=generator)
            self.W_U.normal_(0.0, cfg.d_hidden**-0.5, generator=generator)

    def forward(self, tokens: Tensor, states: dict[str, Tensor] | None = None) -> Tensor:
        """tokens [batch pos] -> logits [batch pos d_vocab]. With ``states``, it receives per layer
        "L{k}.{input,forget,candidate,output,cell,hidden}", each [batch pos d_hidden]."""
        x = self.W_E[tokens]                                                    # [batch pos d_model]
        batch, n_pos, H = tokens.shape[0], tokens.shape[1], self.cfg.d_hidden
        for k in range(self.cfg.n_layers):
            W_ih, W_hh = getattr(self.rnn, f"weight_ih_l{k}"), getattr(self.rnn, f"weight_hh_l{k}")
            bias = getattr(self.rnn, f"bias_ih_l{k}") + getattr(self.rnn, f"bias_hh_l{k}")
            from_input = x @ W_ih.T + bias                                      # [batch pos 4·d_hidden]
            h = c = x.new_zeros(batch, H)
            steps: dict[str, list[Tensor]] = {name: [] for name in (*GATES, "cell", "hidden")}
            for t in range(n_pos):
                i, f, g, o = (from_input[:, t] + h @ W_hh.T).chunk(4, dim=-1)   # each [batch d_hidden]
                i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
                c = f * c + i * g                                               # the additive update
                h = o * c.tanh()
                for name, value in zip((*GATES, "cell", "hidden"), (i, f, g, o, c, h)):
                    steps[name].append(value)
            x = torch.stack(steps["hidden"], dim=1)                             # [batch pos d_hidden]
            if states is not None:
                states.update({f"L{k}.{name}": torch.stack(values, dim=1) for name, values in steps.items()})
        return x @ self.W_U + self.b_U

    @torch.inference_mode()
    def run_with_states(self, tokens: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        states: dict[str, Tensor] = {}
        return self(tokens, states), states


def cell_contributions(states: dict[str, Tensor], layer: int = 0) -> Tensor:
    """What each step wrote into the final cell state: (Π_{s>t} f_s) ⊙ i_t ⊙ g_t, [batch pos d_hidden].
    Summed over steps it is exactly c_T (the cell starts at 0)."""
    forget, written = states[f"L{layer}.forget"], states[f"L{layer}.input"] * states[f"L{layer}.candidate"]
    later_forgets = forget.flip(1).cumprod(1).flip(1)                        # Π_{s ≥ t} f_s
    kept = torch.cat([later_forgets[:, 1:], torch.ones_like(forget[:, :1])], dim=1)  # Π_{s > t} f_s
    return written * kept
