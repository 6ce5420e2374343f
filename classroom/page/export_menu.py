"""A section's "Export this section" menu (PNG, SVG, CSV, a zip of everything) and the "Reproduce in Python"
snippet each figure carries."""

from collections.abc import Callable

import streamlit as st

from classroom.page import export, slides
from classroom.page.part import Collected
from classroom.page.slides import presenting
from mechlib import figures


def export_key(title: str) -> str:
    """The widget key of the part ``title``'s export menu, whose value is whether it is open."""
    return f"export {title}"


def menu(collected: Collected) -> None:
    """The part's "Export this section" menu, whose contents are drawn once it is opened (opening it reruns the
    page): drawn on every run, its buttons, snippets and the figures they keep alive took a tenth of a class's
    server time (py-spy)."""
    if not (collected.figures or collected.tables or collected.numbers):
        return
    menu = (slides.export_place() or st).popover("Export this section", icon=":material/download:",
                                                 width="stretch" if presenting() else "content",
                                                 key=export_key(collected.title), on_change="rerun")
    if not menu.open:
        return
    with menu:
        reason = export.available()
        for name, fig in collected.figures.items():
            st.markdown(f"**{figures.plain(name)}**")
            png, svg = st.columns([3, 1])  # the PNG button names its size: "PNG, 2340 × 1260 px"
            width, height = export.size(fig)  # the screen's size: the PNG keeps its aspect ratio, at SCALE × its pixels
            png.download_button(f"PNG, {width * export.SCALE} × {height * export.SCALE} px", lambda fig=fig: export.png(fig),
                                export.file_name(name) + ".png",
                                "image/png", key=f"png {collected.title} {name}", on_click="ignore", disabled=bool(reason))
            svg.download_button("SVG", lambda fig=fig: export.svg(fig), export.file_name(name) + ".svg", "image/svg+xml",
                                key=f"svg {collected.title} {name}", on_click="ignore", disabled=bool(reason))
            with st.expander("Reproduce in Python"):
                st.code(collected.snippets[name], language="python")
        if reason:
            st.caption(f"{reason}. The chart's own camera button still saves a PNG at {export.SCALE}× scale.")
        for name, frame in collected.tables.items():
            st.download_button(f"{name} (CSV)", lambda frame=frame: export.csv(frame), export.file_name(name) + ".csv",
                               "text/csv",
                               key=f"csv {collected.title} {name}", on_click="ignore")
        st.download_button("Everything in this section (zip)", lambda: export.bundle(
            collected.figures, collected.tables, collected.numbers, collected.snippets),
            export.file_name(collected.title) + ".zip", "application/zip", key=f"zip {collected.title}",
            on_click="ignore", type="primary")


def model_line(model_key: tuple) -> str:
    """Python that loads the page's model, from its cache key."""
    kind, what = model_key[:2]
    if kind == "folder":  # the class's models folder: the same directory or file, where the notebook finds it
        return f"model = zoo.from_folder(Path({what!r}))  # from the class's models folder"
    if kind == "zoo":
        return f"model = zoo.load({what!r})"
    if kind == "random":
        return f"model = zoo.random_model(ModelConfig.from_json({what!r}))"
    return "model = zoo.from_checkpoint(open('model.safetensors', 'rb').read())[1]  # the model, downloaded"


def snippet(collected: Collected, code: str, using: Callable | None = None) -> str:
    """A script that rebuilds a figure: imports, the model (for an experiment on the page's model), the
    experiment's call with the page's values, then ``code``, which builds ``fig`` from ``result``."""
    calls = [call for call in collected.calls if using is None or call[0] is using]
    lines = ["import numpy as np", "", "from mechlib import data, figures, zoo"]
    if calls:
        experiment, (model_key, args) = calls[-1]
        module = experiment.__module__.rsplit(".", 1)[-1]
        lines[-1] += f", {module}"
        if model_key is None:
            lines.append(f"\nresult = {module}.{experiment.__name__}({', '.join(map(repr, args))})")
            return "\n".join(lines + [code, "fig.show()"])
        if model_key[0] == "random":
            lines.append("from mechlib.config import ModelConfig")
        if model_key[0] == "folder":
            lines.insert(0, "from pathlib import Path\n")
        lines += ["", model_line(model_key)]
        ids = next((arg for arg in args[1:] if isinstance(arg, tuple) and arg and all(isinstance(i, int) for i in arg)), None)
        if ids is not None:
            lines += [f"ids = {ids!r}", "labels = data.token_labels(model.tokenizer, ids)"]
        shown = ", ".join("ids" if arg is ids else repr(arg) for arg in args[1:])
        lines.append(f"result = {module}.{experiment.__name__}(model{', ' if shown else ''}{shown})")
    return "\n".join(lines + [code, "fig.show()"])
