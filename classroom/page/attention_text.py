"""Attention you can hover, the view CircuitsVis made familiar: a layer's pattern drawn on its tokens as text.
Pointing at (or tapping) a destination token shades every source token by the attention that destination pays it,
for one head or for every head at once (a line each). The browser draws it from the pattern sent with it: no CDN,
no rerun while the pointer moves. Each token carries its weight (``data-weight``) for a test to read.

The pattern travels packed (``packed``): the causal half of each head's [query key] square, 16 bits a weight, in
base64: GPT-2 small's 144 heads on 33 tokens are 215 KB a rerun, where the weights as JSON numbers were 3.2 MB."""

import base64

import numpy as np
import streamlit as st

from classroom.page.layout import prose
from classroom.page.slides import own_slide, presenting
from mechlib.circuits import head_label

__all__ = ["attention_text", "packed"]

PAGE_PX = {"size": 16, "small": 14}   # the tokens, and the buttons and the caption: a page's text and its captions
SLIDE_PX = {"size": 24, "small": 24}  # on a slide every text is at least 24 px
LEVELS = 65_535  # a weight is sent as one of these steps of 1 / 65,535: the shading shows 255

CSS = """
.attention-text { font-family: "Source Sans Pro", sans-serif; font-size: var(--size); color: #31333f; }
.attention-text .heads { display: flex; flex-wrap: wrap; gap: 6px; margin-bottom: 10px; }
.attention-text button { font: inherit; font-size: var(--small); padding: 2px 10px; cursor: pointer;
  border: 1px solid #d5d7de; border-radius: 6px; background: white; color: #31333f; }
.attention-text button[aria-pressed="true"] { background: #1f77b4; border-color: #1f77b4; color: white; }
.attention-text .line { display: flex; flex-wrap: wrap; align-items: baseline; gap: 3px 2px; margin: 4px 0; }
.attention-text .name { min-width: 5.5em; font-weight: 600; color: #555867; }
.attention-text .token { padding: 1px 3px; border-radius: 3px; cursor: default; white-space: pre;
  outline-offset: 1px; }
.attention-text .token.destination { outline: 2px solid #d62728; }
.attention-text .caption { color: #555867; font-size: var(--small); margin-top: 6px; }
"""

JS = """
export default function ({ data, parentElement }) {
  const { tokens, heads } = data;
  const packed = Uint8Array.from(atob(data.patterns), (c) => c.charCodeAt(0));
  const view = new DataView(packed.buffer), square = tokens.length * (tokens.length + 1) / 2;
  // head h's weight from query q to key k <= q: row q of its causal half starts at q (q + 1) / 2
  const pattern = (h, q, k) => view.getUint16(2 * (h * square + q * (q + 1) / 2 + k), true) / data.levels;
  let root = parentElement.querySelector(".attention-text");
  if (!root) {
    root = document.createElement("div");
    root.className = "attention-text";
    parentElement.appendChild(root);
  }
  root.style.setProperty("--size", data.size + "px");
  root.style.setProperty("--small", data.small + "px");
  const state = { head: root.dataset.head ?? data.head, dest: data.dest };
  if (state.head !== "all" && !(Number(state.head) < heads.length)) state.head = "all";
  root.replaceChildren();

  const bar = document.createElement("div");
  bar.className = "heads";
  const buttons = [["all", "all heads"], ...heads.map((name, h) => [String(h), name])].map(([value, label]) => {
    const button = document.createElement("button");
    button.textContent = label;
    button.dataset.head = value;
    button.addEventListener("click", () => { state.head = value; root.dataset.head = value; draw(); });
    bar.appendChild(button);
    return button;
  });
  root.appendChild(bar);
  const body = document.createElement("div");
  root.appendChild(body);
  const caption = document.createElement("div");
  caption.className = "caption";
  root.appendChild(caption);

  function shade() {
    for (const span of body.querySelectorAll(".token")) {
      const h = Number(span.dataset.head), k = Number(span.dataset.pos);
      const weight = k <= state.dest ? pattern(h, state.dest, k) : 0;
      span.dataset.weight = weight.toFixed(4);
      span.style.background = `rgba(31, 119, 180, ${weight})`;
      span.style.color = weight > 0.5 ? "white" : "#31333f";
      span.classList.toggle("destination", k === state.dest);
      span.title = `${heads[h]}: position ${state.dest} → ${k}, attention ${weight.toFixed(3)}`;
    }
    caption.textContent = `Destination: position ${state.dest}, "${tokens[state.dest]}". Each token is shaded by ` +
      "the attention it gets from there (white 0, blue 1); point at or tap another token.";
  }

  function draw() {
    buttons.forEach((button) => button.setAttribute("aria-pressed", String(button.dataset.head === state.head)));
    body.replaceChildren();
    const shown = state.head === "all" ? heads.map((_, h) => h) : [Number(state.head)];
    for (const h of shown) {
      const line = document.createElement("div");
      line.className = "line";
      line.dataset.head = String(h);
      const name = document.createElement("span");
      name.className = "name";
      name.textContent = heads[h];
      line.appendChild(name);
      tokens.forEach((text, k) => {
        const span = document.createElement("span");
        span.className = "token";
        span.textContent = text;
        span.dataset.head = String(h);
        span.dataset.pos = String(k);
        const point = () => { state.dest = k; shade(); };
        span.addEventListener("mouseenter", point);
        span.addEventListener("click", point);
        line.appendChild(span);
      });
      body.appendChild(line);
    }
    shade();
  }
  draw();
}
"""

HOVER = st.components.v2.component("attention_text", css=CSS, js=JS)


def attention_text(about: str, patterns: np.ndarray, labels: list[str], first: str | None, dest: int, key: str,
                   first_layer: int = 0) -> None:
    """``about`` (Markdown), then ``patterns`` [layer head query_pos key_pos] (of layers ``first_layer``, … on) on
    their tokens' ``labels``, one line per head ("L0H0", …; or one head, chosen above them), shaded first from the
    destination ``dest``. In presentation mode they are a slide of their own, the text 24 px (16 px otherwise), and
    the line shown first is head ``first``'s alone (None: the first head): a slide holds one line of large text."""
    layers, heads = patterns.shape[:2]
    names = [head_label(first_layer + layer, head) for layer in range(layers) for head in range(heads)]
    with own_slide():
        prose(about)
        HOVER(data={"tokens": labels, "heads": names, "patterns": packed(patterns.reshape(-1, *patterns.shape[2:])),
                    "levels": LEVELS, "dest": dest, **(SLIDE_PX if presenting() else PAGE_PX),
                    "head": str(names.index(first) if first else 0) if presenting() else "all"}, key=key)


def packed(patterns: np.ndarray) -> str:
    """[head query_pos key_pos] causal patterns as base64: each head's weights at key ≤ query, row by row, as
    little-endian 16-bit steps of 1 / LEVELS."""
    query, key = np.tril_indices(patterns.shape[-1])                       # row-major: row q holds keys 0 … q
    steps = np.rint(np.clip(patterns[:, query, key], 0, 1) * LEVELS)      # [head positions·(positions + 1)/2]
    return base64.b64encode(steps.astype("<u2").tobytes()).decode("ascii")
