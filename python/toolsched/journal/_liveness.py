"""Liveness: whether the process named by an owner string still runs, and this process's own owner string."""

from __future__ import annotations

import os
import secrets
import socket

__all__ = ["boot_id", "default_owner", "holder_is_dead", "pid_namespace"]

# Where Linux shows this process's PID namespace and the running kernel's boot; absent on other platforms.
_PID_NAMESPACE = "/proc/self/ns/pid"
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def pid_namespace() -> str:
    """The inode of this process's PID namespace, as text; ``""`` where it cannot be read (not Linux)."""
    try:
        return str(os.stat(_PID_NAMESPACE).st_ino)
    except OSError:
        return ""


def boot_id() -> str:
    """The running kernel's boot ID (a UUID, new at every boot); ``""`` where it cannot be read (not Linux)."""
    try:
        with open(_BOOT_ID, encoding="ascii") as source:
            found = source.read().strip()
    except (OSError, ValueError):
        return ""
    # The owner string is split on colons; a boot ID never has one, a stranger file might.
    return found if found and ":" not in found else ""


def holder_is_dead(owner: str | None) -> bool:
    """Whether a run's holder is known to be gone: an owner named the default way
    (``host:pid:random:pidns:boot``) by a process that shares this host, PID namespace and boot,
    whose process no longer exists (or is a zombie: killed, not yet reaped by its parent). Any other holder may
    be alive, and only its lease decides.

    A pid means something only inside its PID namespace and boot: containers sharing the host's
    network (and so its hostname) number their processes apart, and two machines may share a
    hostname. A holder is judged by its pid only when all three match, and never when this
    process cannot read its own namespace or boot (not Linux): there the pid proves nothing.
    """
    if owner is None:
        return False
    parts = owner.split(":")
    # Owners written before the namespace and boot were recorded (``host:pid:random``) have 3
    # parts and are left to their lease: their pid may belong to another namespace.
    if len(parts) != 5:
        return False
    host, pid_text, _, namespace, boot = parts
    if not pid_text.isdigit() or host != socket.gethostname():
        return False
    if not namespace or namespace != pid_namespace() or not boot or boot != boot_id():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    # Killed but not yet reaped by its parent (a zombie): it runs nothing, though its pid still answers.
    return _state(pid) in (b"Z", b"X")


def _state(pid: int) -> bytes:
    """The process's state letter from ``/proc/PID/stat`` (``Z`` a zombie), ``b""`` where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as source:
            stat = source.read()
    except OSError:
        return b""
    # The command name (in parentheses) may hold any byte: the state follows its last closing parenthesis.
    end = stat.rfind(b")")
    return stat[end + 2 : end + 3] if end >= 0 else b""


def default_owner() -> str:
    """``host:pid:random:pidns:boot``: unique to this journal object, readable in ``RunClaimedError``.

    The PID namespace and boot ID say where the pid is meaningful (see ``holder_is_dead``); they
    are empty where they cannot be read.
    """
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}:{pid_namespace()}:{boot_id()}"
