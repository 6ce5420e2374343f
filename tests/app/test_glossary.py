"""Glossary tooltips (classroom.page.glossary's terms, drawn by classroom.page.layout.with_tooltips): the first occurrence of a term becomes an <abbr>, code and maths are left alone."""

import html

from classroom.page.glossary import TERMS
from classroom.page.layout import with_tooltips


def test_the_first_occurrence_gets_the_definition_and_later_ones_stay_plain():
    out = with_tooltips("d_head is small; d_head again.")
    assert out == f'<abbr title="{html.escape(TERMS["d_head"])}">d_head</abbr> is small; d_head again.'


def test_code_spans_maths_and_longer_words_are_left_alone():
    text = "`d_head` and $d_head$ and my_d_heads and logit lens"
    assert with_tooltips(text) == ("`d_head` and $d_head$ and my_d_heads and "
                                   f'<abbr title="{html.escape(TERMS["logit lens"])}">logit lens</abbr>')


def test_every_definition_is_one_or_two_sentences_without_html():
    for term, text in TERMS.items():
        assert "<" not in text and text.endswith((".", ")")) and text.count(". ") <= 2, term


def test_no_term_is_defined_twice():
    """A dict literal keeps the last of two equal keys silently: read the source, not the dict."""
    import ast
    import inspect

    from classroom.page import glossary

    literal = next(node for node in ast.walk(ast.parse(inspect.getsource(glossary))) if isinstance(node, ast.Dict))
    keys = [key.value for key in literal.keys]
    assert len(keys) == len(set(keys)) == len(TERMS)
