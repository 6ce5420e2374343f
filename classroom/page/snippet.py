"""A figure's "Reproduce in Python", derived from what ran: the experiment the door computed (``experiments.compute``
records its call and its result), the values derived from it (``derived``), and the figure builder's own call
(``layout.figure``). Nothing is spelled twice: an argument of the builder is written as the path that reaches it
from a recorded result (``result.composition.scores['K']``), as the call that derived it, or as its literal value.
Where Streamlit's hello app shows its own source, this shows the computation the page made, with its values."""

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Call", "Records", "snippet", "Untraceable"]

PLAIN = (type(None), bool, int, float, str)


class Untraceable(TypeError):
    """A figure's argument that is no recorded result's, no derived value and no literal: the page must derive it
    through ``derived`` (or the experiment return it)."""


@dataclass(frozen=True)
class Call:
    """An experiment the door ran: ``model_key`` (a ``ModelChoice``; None for one that builds its own models), its
    arguments after the model, and the result the page received."""

    experiment: Callable
    model_key: object
    args: tuple
    result: object


@dataclass
class Records:
    """What a part (or the page, before its parts) computed: the door's calls, values derived from them, each kept
    with the Python that derives it (the value is kept too, so its identity stays its own), and values the page
    made by code of its own (a training), given with that code and the name it binds them to."""

    calls: list[Call] = field(default_factory=list)
    derived: list[tuple[object, Callable, tuple, dict]] = field(default_factory=list)
    given: list[tuple[object, str, str]] = field(default_factory=list)  # (value, its name in code, code that binds it)

    def copy(self) -> "Records":
        return Records(list(self.calls), list(self.derived), list(self.given))


def _path(value, root, depth: int = 3) -> str | None:
    """The attribute or key path from ``root`` to ``value`` by identity (``.composition.scores['K']``), or None."""
    if value is root:
        return ""
    if depth == 0 or isinstance(root, PLAIN):
        return None
    if dataclasses.is_dataclass(root) and not isinstance(root, type):
        items = ((f".{f.name}", getattr(root, f.name)) for f in dataclasses.fields(root))
    elif isinstance(root, dict):
        items = ((f"[{key!r}]", item) for key, item in root.items() if isinstance(key, PLAIN))
    else:
        return None
    for step, item in items:
        if (rest := _path(value, item, depth - 1)) is not None:
            return step + rest
    return None


def _literal(value) -> str | None:
    if isinstance(value, np.generic):  # a NumPy scalar: its Python value (NumPy 2 writes np.float64(…))
        return repr(value.item())
    if isinstance(value, PLAIN):
        return repr(value)
    if isinstance(value, list | tuple):
        parts = [_literal(item) for item in value]
        if None in parts:
            return None
        inner = ", ".join(parts) + ("," if isinstance(value, tuple) and len(value) == 1 else "")
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        parts = [(_literal(key), _literal(item)) for key, item in value.items()]
        if any(None in pair for pair in parts):
            return None
        return "{" + ", ".join(f"{key}: {item}" for key, item in parts) + "}"
    return None


def _arguments(call: Call, ids, modules: set[str]) -> str:
    """The experiment's arguments as the page passed them, named by its signature where a name helps (``seed=0``):
    ``model`` first for one on the page's model, ``ids`` for the tokens, a mechlib value (a frozen dataclass such as
    ``shapley.Metric(right=78, wrong=96)``) by its module, which joins ``modules``."""
    params = list(inspect.signature(call.experiment).parameters)[call.model_key is not None:]
    written, named = ["model"] * (call.model_key is not None), False
    for i, arg in enumerate(call.args):
        text = "ids" if arg is ids else repr(arg)
        if dataclasses.is_dataclass(arg) and not isinstance(arg, type) and type(arg).__module__.startswith("mechlib."):
            modules.add(_module(type(arg)))
            text = f"{_module(type(arg))}.{text}"
        named = i < len(params) and (named or isinstance(arg, PLAIN))  # after a name, every argument is named
        written.append(f"{params[i]}={text}" if named else text)
    return ", ".join(written)


def _module(fn: Callable) -> str:
    """The name a snippet calls ``fn`` by: ``np`` for NumPy's, else its mechlib module."""
    return "np" if fn.__module__.split(".")[0] == "numpy" else fn.__module__.rsplit(".", 1)[-1]


class _Writer:
    """Writes values as Python against the records, remembering which call became ``result`` and which modules the
    lines use."""

    def __init__(self, records: list[Records]):
        self.calls = [call for level in records for call in level.calls]
        self.derived = [item for level in records for item in level.derived]
        self.given = [item for level in records for item in level.given]
        self.used: Call | None = None
        self.preamble: list[str] = []
        self.modules = {"figures"}

    def value(self, value) -> str:
        if isinstance(value, (*PLAIN, np.generic)) and not isinstance(value, float):
            return _literal(value)  # a float may be a result's field (its path says what it is); an int is its value
        for call in reversed(self.calls):
            if (path := _path(value, call.result)) is not None:
                if self.used is not None and self.used is not call:
                    raise Untraceable(f"one figure drawn from two experiments' results ({call.experiment.__name__})")
                self.used = call
                return "result" + path
        for made, name, code in reversed(self.given):
            if (path := _path(value, made)) is not None:
                if code not in self.preamble:
                    self.preamble.append(code)
                return name + path
        for made, fn, args, kwargs in reversed(self.derived):
            if value is made:
                return self.call(fn, args, kwargs)
            if (path := _path(value, made)) is not None:
                return self.call(fn, args, kwargs) + path
        if (text := _literal(value)) is not None:
            return text
        raise Untraceable(f"a figure's argument of type {type(value).__name__} is no recorded result's, no derived "
                          "value and no literal")

    def call(self, fn: Callable, args: tuple, kwargs: dict) -> str:
        self.modules.add(_module(fn))
        written = [self.value(arg) for arg in args] + [f"{key}={self.value(arg)}" for key, arg in kwargs.items()]
        return f"{_module(fn)}.{fn.__name__}({', '.join(written)})"


def snippet(records: list[Records], builder: Callable, args: tuple, kwargs: dict) -> str:
    """A script that rebuilds the figure ``builder(*args, **kwargs)``: imports, the model and the experiment's call
    with the page's values (when an argument comes from its result), then ``fig = …`` and ``fig.show()``."""
    writer = _Writer(records)
    fig_line = f"fig = {writer.call(builder, args, kwargs)}"
    lines: list[str] = []
    if (call := writer.used) is not None:
        module = _module(call.experiment)
        writer.modules.add(module)
        ids = next((arg for arg in call.args if isinstance(arg, tuple) and arg and all(isinstance(i, int) for i in arg)),
                   None) if call.model_key is not None else None
        if call.model_key is not None:
            lines += call.model_key.snippet_imports() + ["", call.model_key.snippet_line()]
        if ids is not None:
            lines.append(f"ids = {ids!r}")
        lines.append(f"result = {module}.{call.experiment.__name__}({_arguments(call, ids, writer.modules)})")
    modules = writer.modules | ({"zoo"} if call is not None and call.model_key is not None else set())
    imports = ["import numpy as np"] * ("np" in modules) + [f"from mechlib import {', '.join(sorted(modules - {'np'}))}"]
    return "\n".join(imports + writer.preamble + lines) + f"\n{fig_line}\nfig.show()"
