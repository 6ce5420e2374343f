"""How to join a live class, on the teacher's screen: the code in large type, the join link and its QR code (drawn
here, ``segno``; nothing is fetched); in presentation mode the code in the slide's top row, opening the card over
the slide."""

from urllib.parse import urlencode

import segno
import streamlit as st

from classroom import keys
from classroom.live import public_address
from classroom.live.membership import ROOM, code, leading, room
from classroom.page import slides
from classroom.page.text import literal

__all__ = ["public", "showing_join", "join_card", "join_banner"]


def public() -> tuple[str, str | None]:
    """(the origin students open, a note for the teacher where they cannot): ``public_address.join_origin`` for the
    teacher's browser's address and the address this server listens on."""
    return public_address.join_origin(st.context.url or "", st.get_option("server.address"), public_address.setting(),
                                      public_address.network_address())


def _qr_svg(link: str) -> str:
    """The join link as a QR code, drawn here (``segno``), as SVG markup."""
    return segno.make(link, error="m").svg_inline(scale=8, dark="#111111", light="#ffffff")


def showing_join() -> bool:
    """Whether the teacher's screen shows how to join (the teacher panel's toggle, on by default)."""
    return leading() and st.session_state.get(keys.ROOM_SHOW_JOIN, True)


def join_card(qr_px: int, beside: bool) -> None:
    """How to join, drawn here: the code in large type, the link students open and its QR code (``beside`` the
    text, else under it); where no other machine can open that link, the teacher is told why."""
    code_ = code()
    origin, note = public()
    link = f"{origin}/?{urlencode({ROOM: code_})}"
    text, qr = st.columns([3, 1], vertical_alignment="center") if beside else (st.container(), st.container())
    with text:
        st.markdown(f"### Join the class: **{code_[:4]} {code_[4:]}**")
        st.markdown(f"Open **{literal(link)}**, or open the app and type the code under *Join a class*.")
        if note:
            st.warning(f"{note}.", icon=":material/wifi_off:")
    qr.image(_qr_svg(link), width=qr_px)


@st.dialog("Join the class", width="large")
def _join_dialog() -> None:
    join_card(qr_px=320, beside=False)


def _open_dialog() -> None:
    room().join_dialog = True


def join_banner() -> None:
    """On the teacher's screen while it shows how to join: the card above the page; in presentation mode, where a
    slide fills the screen, the code in the top row (``slides.join_place``), whose button opens the card over the
    slide until it is closed (and opens it once when a class starts while presenting). The start page's title slide
    draws the card in its own layout (``join_card``)."""
    if not showing_join():
        return
    if not slides.presenting():
        with st.container(border=True):
            join_card(qr_px=180, beside=True)
        return
    code_ = code()
    slides.join_place().button(f"{code_[:4]} {code_[4:]}", icon=":material/qr_code_2:", width="stretch",
                               help="How to join this class: its code, link and QR code", on_click=_open_dialog)
    if room().join_dialog:
        room().join_dialog = False
        _join_dialog()
