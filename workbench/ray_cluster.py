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


@contextlib.contextmanager
def ray_session(address: str | None, num_cpus: int, connect_timeout_s: float):
    """Ray, initialised for the block: a loopback-only local Ray when ``address`` is None, the
    cluster at ``address`` otherwise; an already initialised Ray is used as it is and left running."""
    ray = ray_module()
    if ray.is_initialized():
        yield ray
        return
    if address is None:
        # The node IP on loopback keeps Ray's services (GCS, raylet, object manager, the
        # autoscaler's metrics endpoint) off the network.
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

