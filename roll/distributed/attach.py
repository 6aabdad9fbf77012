"""Checking a Ray cluster address before `ray.init` attaches to it.

`ray.init(address=...)` on an address where no Ray answers retries for ~20 × 35 s with only Ray's own
warnings (issue 31: ≥ 500 s for `RAY_ADDRESS=127.0.0.1:1`), and on a cluster with token authentication it
fails with "Failed to connect" alone. `check_cluster_address` answers within `timeout` seconds with the
address and the cause: nothing listening, no route, a port that is not Ray's, or the authentication mode.
"""

import os
import socket
import threading
import time

AUTH_MODE_ENV = "RAY_AUTH_MODE"  # Ray 2.60: 'token' to attach to a cluster with token authentication


class ClusterAttachError(ConnectionError):
    """The Ray cluster named by RAY_ADDRESS (or `ray start`'s record) cannot be attached to; says why."""


def split_address(address: str) -> tuple[str, int] | None:
    """(host, port) of a GCS address such as '10.0.0.1:6379' or '[::1]:6379'; None where it is not one
    (a `ray://` client address, 'auto')."""
    if "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def local_ray_hint(from_env: bool) -> str:
    """How to run on a Ray of one's own instead, for an address from RAY_ADDRESS or from `ray start`'s record."""
    if from_env:
        return "or unset RAY_ADDRESS to run on a local Ray of this process's own"
    return (
        "or set RAY_ADDRESS=local to run on a local Ray of this process's own (the address was read from the "
        "file a `ray start --head` on this machine left, which outlives a cluster that has stopped)"
    )


def check_cluster_address(address: str, from_env: bool, timeout: float = 20.0, refused_for: float = 5.0) -> None:
    """Raises ClusterAttachError within about `timeout` seconds when no Ray cluster can be attached at
    `address`; `from_env`: the address is RAY_ADDRESS's (else `ray start`'s record). A refused connection is
    retried for `refused_for` seconds (a head node that is still starting)."""
    source = "from RAY_ADDRESS" if from_env else "recorded by `ray start` on this machine"
    where = f"the Ray cluster at {address!r} ({source})"
    target = split_address(address)
    if target is None:
        if "://" in address:
            return  # ray:// (Ray Client) and other schemes: ray.init checks them itself
        raise ClusterAttachError(
            f"{where}: not an address; give HOST:PORT, the GCS port `ray start --head --port=PORT` printed "
            f"(6379 by default), e.g. RAY_ADDRESS=10.0.0.1:6379 (docs/cluster.md)"
        )
    deadline = time.monotonic() + timeout
    _check_port(where, *target, deadline, min(deadline, time.monotonic() + refused_for), local_ray_hint(from_env))
    _check_gcs(where, address, max(1.0, deadline - time.monotonic()))


def _check_port(where: str, host: str, port: int, deadline: float, refused_deadline: float, hint: str) -> None:
    """A TCP connection to host:port; 'refused' is retried until `refused_deadline`, anything else until
    `deadline`."""
    try:
        socket.getaddrinfo(host, port)
    except socket.gaierror as error:
        raise ClusterAttachError(f"{where}: the host name {host!r} does not resolve ({error})") from None
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.5, min(5.0, left))):
                return
        except ConnectionRefusedError:
            if time.monotonic() >= refused_deadline - 0.5:
                raise ClusterAttachError(
                    f"{where}: connection refused: nothing listens on port {port} of {host}. Start the head "
                    f"node there (`ray start --head --port={port}`, docs/cluster.md), correct the address, {hint}"
                ) from None
            time.sleep(0.5)
        except OSError as error:  # timeout, no route, network unreachable
            if time.monotonic() >= deadline - 0.5:
                raise ClusterAttachError(
                    f"{where}: no answer from {host}:{port} ({error or type(error).__name__}): a wrong IP address, "
                    f"a firewall between the nodes, or the head node is down"
                ) from None
            time.sleep(0.5)


def _check_gcs(where: str, address: str, timeout: float) -> None:
    """Asks the cluster's GCS for its id. A daemon thread: Ray's client has no timeout of its own and
    retries a port that answers without speaking Ray's protocol for minutes."""
    try:
        from ray._raylet import GcsClient
    except ImportError:  # a Ray that moved its client: the port check above is all there is
        return
    outcome: dict = {}

    def ask():
        try:
            outcome["id"] = GcsClient(address=address).cluster_id
        except Exception as error:  # Ray raises its own types (AuthenticationError, RpcError, ...)
            outcome["error"] = error

    thread = threading.Thread(target=ask, name="roll-gcs-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise ClusterAttachError(
            f"{where}: the port answers but no Ray GCS replied within {timeout:.0f} s; is it the GCS port "
            f"(`ray start --head --port=PORT`, 6379 by default) and not, e.g., the dashboard's 8265?"
        )
    error = outcome.get("error")
    if error is None:
        return
    if type(error).__name__ == "AuthenticationError" or "Unauthenticated" in str(error):
        raise ClusterAttachError(auth_message(where)) from None
    raise ClusterAttachError(f"{where}: Ray's GCS refused the connection: {error}") from None


def auth_message(where: str) -> str:
    mode = os.environ.get(AUTH_MODE_ENV) or "disabled"
    here = f"{AUTH_MODE_ENV}={mode}" + (" (roll's default where it is unset)" if mode == "disabled" else "")
    return (
        f"{where}: the cluster uses Ray's token authentication and this process has {here}. Attach with "
        f"`export {AUTH_MODE_ENV}=token` and the cluster's token in ~/.ray/auth_token (or RAY_AUTH_TOKEN / "
        f"RAY_AUTH_TOKEN_PATH); every node of the cluster needs the same token. Or start the cluster's nodes "
        f"with {AUTH_MODE_ENV}=disabled on a private network (docs/cluster.md)"
    )
