"""What goes wrong in live capture, worded for the user."""

from __future__ import annotations


class LiveError(Exception):
    """A problem starting or running a live capture, with a message meant for the user."""


class LivePermissionError(LiveError):
    """Capturing needs privileges this process does not have."""


def permission_message(iface: str) -> str:
    return (
        f"capturing on {iface!r} needs root or the CAP_NET_RAW capability "
        "(run with sudo, or grant it: sudo setcap cap_net_raw,cap_net_admin=eip <python binary>)"
    )
