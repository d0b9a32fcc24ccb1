"""Keeping a local cluster off the network: one network namespace for all its tasks, with only `lo`.

TensorFlow's gRPC server listens on 0.0.0.0 whatever host TF_CONFIG names, and runs
any graph a client sends it, without authentication. Inside a namespace of its own,
whose only interface is the loopback, nothing outside the cluster can reach it, and
its tasks can reach nothing outside either: an isolated cluster downloads nothing.
"""
import ctypes
import errno
import fcntl
import os
import socket
import struct
import threading
import time

# Set by the launcher in each task's environment when the cluster has no network.
ISOLATED_VARIABLE = "LOCAL_CLUSTER_ISOLATED"
# Set (to anything but 0) to make the launcher act as where no namespace can be made (for its test).
NO_ISOLATION_VARIABLE = "LOCAL_CLUSTER_NO_ISOLATION"

_CLONE_NEWNET, _CLONE_NEWUSER = 0x40000000, 0x10000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def isolate_network():
    """Moves this process (and every process it starts later) into a new network namespace whose
    only interface is `lo`, brought up; returns None, or why that is not possible here.

    As root (CAP_SYS_ADMIN) a network namespace is made directly; otherwise inside an
    unprivileged user namespace that maps this user to itself, so files keep their owner. Call
    it before starting any thread: a user namespace can only be entered by a single thread.
    """
    if os.environ.get(NO_ISOLATION_VARIABLE, "") not in ("", "0"):
        return f"{NO_ISOLATION_VARIABLE} is set"
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWNET) != 0:
        first = ctypes.get_errno()
        if first not in (errno.EPERM, errno.EACCES) or libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
            code = ctypes.get_errno() if first in (errno.EPERM, errno.EACCES) else first
            return (f"no network namespace can be made here ({os.strerror(code)}; unprivileged user namespaces "
                    "are off, or seccomp forbids unshare)")
        try:
            for path, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{path}", "w") as f:
                    f.write(text)
        except OSError as e:
            return f"the user namespace's id maps cannot be written ({e.strerror})"
    try:
        _bring_up("lo")
    except OSError as e:
        return f"the new namespace's loopback cannot be brought up ({e.strerror})"
    return None


def _bring_up(interface):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", interface.encode(), 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH14x", interface.encode(), flags | _IFF_UP))


def interfaces(pid="self"):
    """Returns the names of the network interfaces in process `pid`'s network namespace."""
    with open(f"/proc/{pid}/net/dev") as f:
        return [line.split(":", 1)[0].strip() for line in f.readlines()[2:]]


def namespace(pid="self"):
    """Returns the id of process `pid`'s network namespace, as 'net:[4026531840]'."""
    return os.readlink(f"/proc/{pid}/ns/net")


def listening_sockets(pid="self"):
    """Returns sorted (address, port) of the TCP sockets process `pid` listens on, read from its
    socket table (/proc/<pid>/net/tcp and tcp6, its own namespace's) and its open files."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except FileNotFoundError:  # no IPv6
            continue
        for row in rows:
            if row[3] == "0A" and row[9] in inodes:  # 0A: TCP_LISTEN
                address, port = row[1].split(":")
                found.add((_address(address, family), int(port, 16)))
    return sorted(found)


def _address(hex_address, family):
    raw = bytes.fromhex(hex_address)
    # The kernel prints each 32-bit word in host order (little-endian here).
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, raw)


def reach(pid="self"):
    """Returns who can connect to the sockets of process `pid`: its namespace alone, when
    that has only `lo`, or every interface it has."""
    names = interfaces(pid)
    if names == ["lo"]:
        return f"only this cluster (network namespace {namespace(pid)}, whose only interface is lo)"
    return f"anyone who reaches this machine's interfaces ({', '.join(names)})"


def with_network_advice(message, environ=None):
    """Returns `message` (a job's one-line error) with, in an isolated cluster's task and when it is
    about a download, why nothing could be downloaded and how to allow it."""
    environ = os.environ if environ is None else environ
    if environ.get(ISOLATED_VARIABLE) != "1" or "download" not in message:
        return message
    return (f"{message}. This cluster is kept off the network and downloads nothing: pass --data-dir or --weights "
            "with files already on disk, or launch it with --allow-network")


def log_listening_ports(cluster, log, wait_secs=300):
    """Starts a daemon thread that logs, once this task's gRPC server listens (the evaluator's at once),
    every TCP port this process listens on and who can reach it; returns the thread."""
    own = cluster.addresses.get(cluster.task_type, [])
    port = int(own[cluster.index].rsplit(":", 1)[1]) if cluster.task_type != "evaluator" else None

    def watch():
        deadline = time.monotonic() + wait_secs
        while True:
            sockets = listening_sockets()
            if port is None or any(p == port for _, p in sockets) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        me = f"{cluster.task_type} {cluster.index}"
        if not sockets:
            log.info("%s listens on no port", me)
        else:
            log.info("%s listens on %s (TCP); reachable by %s", me,
                     ", ".join(f"{address}:{p}" for address, p in sockets), reach())
    thread = threading.Thread(target=watch, daemon=True, name="port-log")
    thread.start()
    return thread
