"""Text the pages show: a user's string made literal for Markdown, quoted in a message, and a check's verdict."""

import re

from classroom.page import part
from mechlib.checks import Check

_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-!$~|<>:])")  # what Markdown, LaTeX ($) and Streamlit's :directives: act on


def literal(text: str) -> str:
    """User-supplied ``text`` (a file name, a session model's label, a token) shown as typed where Streamlit reads
    Markdown: a backslash before every character that bold, links, images, LaTeX or :red[…] would act on. A "."
    stays bare, so file names read as typed; alone it only numbers a list ("1. " opening a line)."""
    return _MARKDOWN.sub(r"\\\1", text)


_INVISIBLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")  # controls, bidi


QUOTE_CHARS = 80  # the most of a user's string a message quotes


def quoted(text: str) -> str:
    """A user's string (a file name, a link's value) quoted in a message: at most ``QUOTE_CHARS`` characters
    (the rest counted), control and bidirectional characters made visible as ⟨U+202E⟩ (one reversed the rest of
    its warning line), and ``literal`` for Markdown."""
    cut = text if len(text) <= QUOTE_CHARS else f"{text[:QUOTE_CHARS]}… ({len(text):,} characters)"
    return literal(_INVISIBLE.sub(lambda char: f"⟨U+{ord(char[0]):04X}⟩", cut))


def verdict(passed: bool, good: str = "pass", bad: str = "FAIL") -> str:
    """A check's outcome as coloured markdown, the same on every page."""
    return f":green[**✓ {good}**]" if passed else f":red[**✗ {bad}**]"


def check_line(what: str, check: Check) -> str:
    """An identity check as one markdown line, the same on every page: what was compared, the largest |a − b|,
    the scaled difference against its tolerance, and the verdict."""
    part.record(what, f"max |difference| {check.max_abs_diff:.3e}, scaled {check.max_scaled_diff:.3e}, tolerance "
                          f"{check.tolerance:.0e}: {'pass' if check.passed else 'FAIL'}")
    return (f"{what}: max |difference| **{check.max_abs_diff:.1e}**, scaled **{check.max_scaled_diff:.1e}** against "
            f"a tolerance of **{check.tolerance:.0e}** · max(1, |reference|) — {verdict(check.passed)}")
