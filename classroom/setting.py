"""A server setting read the one way the app reads each: the environment variable first, then the same setting in
Streamlit's secrets (``.streamlit/secrets.toml``), so a teacher may use either."""

import os

__all__ = ["setting"]


def setting(variable: str, secret: str) -> str | None:
    """The value of the environment's ``variable``, else of the secret ``secret``, stripped; None when neither is
    set (no secrets file, or not under Streamlit: the environment's alone)."""
    if named := os.environ.get(variable, "").strip():
        return named
    try:
        import streamlit as st
        return str(st.secrets.get(secret, "")).strip() or None
    except Exception:  # no secrets file, or not under Streamlit
        return None
