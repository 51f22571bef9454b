"""Where ``wb.sweep`` runs its tasks: a local Ray bound to loopback, or a cluster it can reach.

A local Ray listens on 127.0.0.1 only (no dashboard): by default Ray binds its services to all
interfaces and its autoscaler's metrics endpoint answers without authentication, which a
sweep on a laptop or a shared host must not expose. A cluster address is probed with a plain TCP
connect first, so an unreachable one fails in ``connect_timeout_s`` with the address in the
message, instead of Ray retrying for minutes. Clusters started with token authentication
(``RAY_AUTH_MODE=token``, Ray 2.5x and later) need the same mode and token in this driver's
environment. ``ray://`` addresses go through Ray Client, which needs ``ray[client]`` (the
``sweep`` extra installs it).
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import socket

__all__ = ["ray_module", "ray_session", "check_reachable", "LOOPBACK", "AUTH_HINT"]

LOOPBACK = "127.0.0.1"
AUTH_HINT = ("if the cluster was started with token authentication (RAY_AUTH_MODE=token), set "
             "RAY_AUTH_MODE=token and its RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) in this process's "
             "environment before the sweep")


def ray_module():
    try:
        import ray
    except ImportError as exc:
        raise ImportError("wb.sweep() runs on Ray, which is not installed: pip install "
                          "'neuron-workbench[sweep]' (the sweep extra)") from exc
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``"host:port"`` or ``"ray://host:port"``; None when there is no port
    to probe (``"auto"``, ``"local"``)."""
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or LOOPBACK, int(port)


def check_reachable(address: str, timeout_s: float) -> None:
    """Raise ``ConnectionError`` unless ``address``'s port accepts a TCP connection in ``timeout_s``."""
    target = _host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=timeout_s):
            pass
    except OSError as exc:
        raise ConnectionError(
            f"wb.sweep(address={address!r}): cannot reach {target[0]}:{target[1]} within {timeout_s:g} s "
            f"({exc}). Check the head node's address and port (GCS: 6379 by default; Ray Client: "
            f"ray://host:10001) and that the port is open to this machine; {AUTH_HINT}.") from None


def _check_client_installed(address: str) -> None:
    if address.startswith("ray://") and importlib.util.find_spec("grpc") is None:
        raise ImportError(f"wb.sweep(address={address!r}): ray:// addresses go through Ray Client, which "
                          "needs ray[client]: pip install 'neuron-workbench[sweep]' (or 'ray[client]')")


_SINGLE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def _single_machine(ray):
    """Ray's single-machine mode while a local Ray starts: every service on loopback.

    On Linux Ray resolves even ``_node_ip_address="127.0.0.1"`` to the host's routable address
    and binds its GCS and raylet to all interfaces; the single-machine mode Ray uses on macOS and
    Windows (``ray_constants.ENABLE_RAY_CLUSTER`` False, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
    for the processes it starts) keeps the node IP, and with it every listener, on 127.0.0.1.
    """
    from ray._private import ray_constants

    saved_env, saved_flag = os.environ.get(_SINGLE_MACHINE_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[_SINGLE_MACHINE_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        if saved_env is None:
            os.environ.pop(_SINGLE_MACHINE_ENV, None)
        else:
            os.environ[_SINGLE_MACHINE_ENV] = saved_env


@contextlib.contextmanager
def ray_session(address: str | None, num_cpus: int, connect_timeout_s: float):
    """Ray, initialised for the block: a loopback-only local Ray when ``address`` is None, the
    cluster at ``address`` otherwise; an already initialised Ray is used as it is and left running."""
    ray = ray_module()
    if ray.is_initialized():
        yield ray
        return
    if address is None:
        with _single_machine(ray):
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, _node_ip_address=LOOPBACK)
    else:
        _check_client_installed(address)
        check_reachable(address, connect_timeout_s)
        try:
            ray.init(address=address, log_to_driver=False)
        except Exception as exc:        # Ray raises several types here; say what to check
            raise ConnectionError(f"wb.sweep(address={address!r}): Ray could not connect ({exc}); "
                                  f"{AUTH_HINT}") from exc
    try:
        yield ray
    finally:
        ray.shutdown()

