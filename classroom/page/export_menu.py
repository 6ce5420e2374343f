"""A section's "Export this section" menu: PNG, SVG, CSV, a zip of everything, and each figure's "Reproduce in
Python" snippet (``snippet``)."""


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
                st.code(collected.snippets[name](), language="python")
        if reason:
            st.caption(f"{reason}. The chart's own camera button still saves a PNG at {export.SCALE}× scale.")
        for name, frame in collected.tables.items():
            st.download_button(f"{name} (CSV)", lambda frame=frame: export.csv(frame), export.file_name(name) + ".csv",
                               "text/csv",
                               key=f"csv {collected.title} {name}", on_click="ignore")
        st.download_button("Everything in this section (zip)", lambda: export.bundle(
            collected.figures, collected.tables, collected.numbers,
            {name: write() for name, write in collected.snippets.items()}),
            export.file_name(collected.title) + ".zip", "application/zip", key=f"zip {collected.title}",
            on_click="ignore", type="primary")
