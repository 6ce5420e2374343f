"""The jargon the pages use, in one sentence each: the app shows each as a tooltip where the term first appears
(``sections.with_tooltips``)."""

TERMS = {
    "d_head": "The width of one head's query, key and value vectors: d_model / n_heads. W_QK and W_OV pass through "
              "it, so their rank is at most d_head.",
    "W_QK": "W_Q W_Kᵀ, a d_model × d_model matrix: the score of a query position against a key position is "
            "x_query W_QK x_keyᵀ / √d_head. It decides where a head looks (seed 002 calls it W_p).",
    "W_p": "Seed 002's name for W_Q W_Kᵀ (W_QK here), the pattern weight matrix: E W_p is a pattern matched against "
           "the embeddings of the other tokens, giving the scores that weight the messages.",
    "W_OV": "W_V W_O, a d_model × d_model matrix: what a head writes to its destination when it attends to a source "
            "is x_source W_OV. It decides what moves.",
    "residual stream": "The running sum every layer reads from and adds its output to; the final one, unembedded, "
                       "gives the logits.",
    "K-composition": "A later head's keys read what an earlier head wrote: the earlier head changes where the later "
                     "one looks. Induction heads use it.",
    "Q-composition": "A later head's queries read what an earlier head wrote.",
    "V-composition": "A later head's values read what an earlier head wrote: together they act as one virtual head.",
    "virtual head": "An earlier head's output moved again by a later head's OV circuit: W_OV of the pair is the "
                    "product of their two W_OV.",
    "copying score": "From the eigenvalues of a head's OV circuit (W_E W_OV W_U): the share of their sum that is "
                     "positive real. Near 1, the head raises the logits of the tokens it attends to.",
    "unembedding": "The read-out from the residual stream to logits: the final LayerNorm (if the model has one), then "
                   "W_U, a d_model × d_vocab matrix, and its bias b_U.",
    "logit lens": "Unembedding the residual stream part-way through the model, as if the later layers were absent, "
                  "to read what it would predict there.",
    "direct logit attribution": "Each component's output projected onto a token's unembedding direction: its own "
                                "additive share of that token's logit.",
    "shortformer": "Positional embeddings added to the input of queries and keys only, never to the residual "
                   "stream, so positions shape patterns but never travel in messages.",
    "induction": "A two-head circuit that continues repeats: a previous-token head marks each position with the token "
                 "before it, and an induction head attends from the current token to the one after its last "
                 "occurrence and copies it ([A][B] … [A] → [B]).",
    "skip-trigram": "What one attention layer adds: a source token, a current token and the next token it raises, "
                    "with anything in between.",
    "bigram": "A next-token prediction from the current token alone; a zero-layer model can only learn these.",
    "cell state": "An LSTM's long-term memory c_t: a vector carried from step to step and updated by "
                  "c_t = f_t ⊙ c_{t−1} + i_t ⊙ g_t, the forget gate scaling what it held, the input gate what it adds.",
    "forget gate": "f_t in an LSTM, between 0 and 1 for each cell: the share of the previous cell state kept at step "
                   "t. At f = 1 the update is a pure addition, as in the residual stream.",
    "one-hot": "A vector of d_vocab zeros with a single 1 at a token's id: multiplied by W_E, it picks that token's "
               "row, so the product is a lookup.",
    "channel": "In a convolutional network (CNN), one of the feature maps a layer reads: each output map is the sum "
               "of every input channel's filtered map.",
}
