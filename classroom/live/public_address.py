"""The address students open to join a class: the server as their laptops reach it, not as the teacher's browser does.

A teacher usually opens the app on the server itself (``http://localhost:8501``), and a link built from that
address reaches only that machine. In order: the setting ``CLASSROOM_PUBLIC_URL`` (else the Streamlit secret
``public_url``), for a server behind a proxy or a name the class knows (``deploy/class.sh`` sets it to nginx's
address); else the teacher's browser's own address when it is not on loopback (the teacher reached it over the
network, so the class can); else this machine's network address with the browser's port. A server that listens on
loopback only cannot be reached from another machine at all, and the card says so."""

import fcntl
import ipaddress
import socket
import struct
from urllib.parse import urlsplit

from classroom.setting import setting as from_setting

__all__ = ["SETTING", "setting", "network_address", "join_origin"]

SETTING = "CLASSROOM_PUBLIC_URL"
_SIOCGIFADDR = 0x8915  # Linux's ioctl for an interface's IPv4 address: read from the kernel, no packet sent


def setting() -> str | None:
    """The class's public address the setting names, or None."""
    return from_setting(SETTING, "public_url")


def network_address() -> str | None:
    """This machine's first IPv4 address on an interface other than loopback, or None (no such interface, or not
    Linux)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address on it
                continue
            address = ipaddress.ip_address(packed[20:24])
            if not address.is_loopback and not address.is_link_local:
                return str(address)
    return None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: whoever typed it reached the server by it
        return False


def join_origin(browser_url: str, listening: str | None, named: str | None, network: str | None) -> tuple[str, str | None]:
    """(the origin students open, a note for the teacher or None), from the teacher's browser's address, the address
    the server listens on (Streamlit's ``server.address``; empty or None: every interface), the setting's value and
    this machine's network address."""
    if named:
        return named.rstrip("/"), None
    parts = urlsplit(browser_url)
    origin = f"{parts.scheme}://{parts.netloc}"
    if not _loopback(parts.hostname or ""):
        return origin, None
    if listening and _loopback(listening):
        return origin, (f"This server listens on {listening} only, so no other machine can open this link: start it "
                        f"with --server.address 0.0.0.0, or set {SETTING} to the address students reach")
    if network is None:
        return origin, f"This machine has no network address: set {SETTING} to the address students reach"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{network}{port}", None
