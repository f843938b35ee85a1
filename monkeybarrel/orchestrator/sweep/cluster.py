"""Does the Ray cluster a sweep will sample on answer, and does it let this driver in? Checked before any point.

Ray 2.60's ``ray start`` turns token authentication on where a token exists (``$RAY_AUTH_TOKEN``,
the file ``$RAY_AUTH_TOKEN_PATH``, or ``~/.ray/auth_token``, which any earlier local ``ray.init()``
creates), and a driver joining by an explicit address sends its token only with
``RAY_AUTH_MODE=token`` (``auto`` sends it whenever one exists). A driver that sends none gets
``InvalidAuthToken`` after ~20 s of retries, a warning line a second, for every point. Here one gRPC
call to the cluster's GCS (``NodeInfoGcsService.GetAllNodeInfo``, 10 s deadline), sending what
``ray.init`` would send, gives either a line describing the cluster (nodes, CPUs, GPUs, whether
the token was sent) or a :class:`ClusterError`: one line saying what is wrong and what to set.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ...core.config import ConfigError, ExperimentConfig

TIMEOUT_S = 10.0


class ClusterError(ConfigError):
    """The Ray cluster does not answer, or refuses this driver (exit 2, before anything runs)."""


def cluster_addresses(configs: Iterable[ExperimentConfig]) -> list[str]:
    """The cluster addresses the configs' ``ray`` generators join (``options.address`` or ``$RAY_ADDRESS``);
    generators that start a local Ray instance have none."""
    found: list[str] = []
    for config in configs:
        for spec in config.generators:
            if spec.backend == "ray":
                address = spec.options.get("address") or os.environ.get("RAY_ADDRESS") or None
                if address and address not in found:
                    found.append(address)
    return found


def auth_token(address: str) -> tuple[str | None, str]:
    """The token this driver's ``ray.init(address)`` sends, and where it comes from (or why none is sent)."""
    mode = (os.environ.get("RAY_AUTH_MODE") or "").lower()
    token, source = _local_token()
    if mode == "token" or (not mode and address == "auto" and token):
        return token, source
    if mode and mode != "token":
        return None, f"RAY_AUTH_MODE={mode}"
    return None, "RAY_AUTH_MODE is not token" + (f" (a token is at {source})" if token else " and no token is here")


def _local_token() -> tuple[str | None, str]:
    """Ray's token sources in Ray's order: ``$RAY_AUTH_TOKEN``, ``$RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``."""
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return os.environ["RAY_AUTH_TOKEN"].strip(), "$RAY_AUTH_TOKEN"
    for path in (os.environ.get("RAY_AUTH_TOKEN_PATH"), str(Path.home() / ".ray" / "auth_token")):
        if path and Path(path).is_file():
            text = Path(path).read_text().strip()
            if text:
                return text, path
    return None, "nowhere"


@dataclass(frozen=True)
class Probe:
    """What the cluster answered: its GCS address, live nodes and their CPUs and GPUs (None via Ray Client)."""

    target: str
    nodes: int | None = None
    cpus: float = 0.0
    gpus: float = 0.0
    auth: str = ""

    def describe(self) -> str:
        if self.nodes is None:  # a Ray Client server, or a GCS asked without grpcio: it answers, no more is known
            return f"ray {self.auth or 'client server'} {self.target} answers"
        return (f"ray cluster {self.target}: {self.nodes} node{'s' if self.nodes != 1 else ''}, {self.cpus:g} CPUs, "
                f"{self.gpus:g} GPUs ({self.auth})")


def check_cluster(address: str, timeout_s: float = TIMEOUT_S) -> str:
    """One line describing the cluster at ``address`` (``auto``, ``host:port``, ``ray://host:port``).

    Raises:
        ClusterError: it does not answer, is not a Ray cluster, or refuses this driver's token (or its lack).
    """
    return probe(address, timeout_s).describe()


def probe(address: str, timeout_s: float = TIMEOUT_S) -> Probe:
    """Ask the cluster at ``address`` for its live nodes, sending what ``ray.init`` would send (see the module)."""
    if address.startswith(("http://", "https://")):
        raise ClusterError(f"Ray address {address}: this is a dashboard (job submission) address; a driver "
                           "joins the cluster's GCS: host:6379, auto, or ray://host:10001")
    if address.startswith("ray://"):
        return _check_client(address, timeout_s)
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError as exc:
        raise ClusterError(f"the ray backend needs Ray: `pip install 'monkeybarrel[ray]'` ({exc})") from None
    try:
        target = canonicalize_bootstrap_address(address)
    except Exception as exc:  # Ray raises ConnectionError or ValueError here
        raise ClusterError(f"Ray cluster {address!r}: {' '.join(str(exc).split())[:300]}") from None
    if target is None:
        raise ClusterError(f"Ray cluster {address!r}: no running cluster found (start one with `ray start --head`)")
    try:
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:  # Ray without its default extra: whether the GCS answers at all, not who it lets in
        host, _, port = target.rpartition(":")
        _connect(f"Ray cluster {target}", host, int(port), timeout_s)
        return Probe(target, auth="cluster (authentication not checked: grpcio is missing; "
                                  "pip install 'monkeybarrel[ray]')")
    token, source = auth_token(address)
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    with grpc.insecure_channel(target) as channel:
        try:
            reply = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetAllNodeInfo(
                gcs_service_pb2.GetAllNodeInfoRequest(), timeout=timeout_s, metadata=metadata)
        except grpc.RpcError as exc:
            raise ClusterError(_refusal(address, target, exc, token is not None, source)) from None
    alive = [n for n in reply.node_info_list if n.state == 0]  # GcsNodeInfo.ALIVE
    return Probe(target, len(alive), sum(n.resources_total.get("CPU", 0.0) for n in alive),
                 sum(n.resources_total.get("GPU", 0.0) for n in alive), f"token from {source}" if token else "no token")


def _refusal(address: str, target: str, exc, sent: bool, source: str) -> str:
    import grpc

    code, details = exc.code(), " ".join(str(exc.details() or "").split())[:200]
    where = f"Ray cluster {target}" + (f" ({address})" if address != target else "")
    if code == grpc.StatusCode.UNAUTHENTICATED:
        if sent:
            return (f"{where} refused this driver's token (from {source}): use the cluster's own token "
                    "(`ray get-auth-token` on its head node) in $RAY_AUTH_TOKEN or ~/.ray/auth_token")
        return (f"{where} uses token authentication and this driver sends no token ({source}): set "
                "RAY_AUTH_MODE=token and the cluster's token ($RAY_AUTH_TOKEN, or ~/.ray/auth_token; "
                "`ray get-auth-token` on the head node prints it)")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return (f"{where}: no Ray cluster answers ({code.name}: {details}); is it started (`ray start --head`) "
                "and is the address right?")
    return f"{where} does not answer as a Ray cluster's GCS ({code.name}: {details})"


def _check_client(address: str, timeout_s: float) -> Probe:
    """A Ray Client address (``ray://host:port``): its server must accept a connection."""
    host, _, port = address[len("ray://"):].partition(":")
    try:
        _connect(f"Ray client server {address}", host, int(port or 10001), timeout_s)
    except ValueError:
        raise ClusterError(f"Ray client server {address}: expected ray://host:port") from None
    return Probe(address)


def _connect(what: str, host: str, port: int, timeout_s: float) -> None:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ClusterError(f"{what}: no answer ({exc}); is it started and is the address right?") from None


def wait_for_nodes(address: str, nodes: int, timeout_s: float) -> str:
    """Wait until the cluster at ``address`` has ``nodes`` live nodes (a launcher's "are my nodes in?").

    Raises:
        ClusterError: not within ``timeout_s``, with the last thing the cluster said.
    """
    deadline, last = time.monotonic() + timeout_s, ""
    while True:
        try:
            answer = probe(address, timeout_s=min(TIMEOUT_S, max(1.0, deadline - time.monotonic())))
            last = answer.describe()
            if answer.nodes is None or answer.nodes >= nodes:
                return last
        except ClusterError as exc:
            if "token" in str(exc):  # waiting does not mend authentication
                raise
            last = str(exc)
        if time.monotonic() >= deadline:
            raise ClusterError(f"Ray cluster {address}: not {nodes} live nodes within {timeout_s:g} s; last: {last}")
        time.sleep(2.0)


def main(argv: list[str] | None = None) -> int:
    """``python -m monkeybarrel.orchestrator.sweep.cluster ADDRESS [--nodes N] [--timeout S]``: wait for the
    cluster's nodes (Slurm and other launchers, instead of ``sleep``); exit 0 with its line, 2 with the error."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m monkeybarrel.orchestrator.sweep.cluster", description=main.__doc__)
    parser.add_argument("address", help="the cluster's GCS address (host:6379) or auto")
    parser.add_argument("--nodes", type=int, default=1, help="live nodes to wait for")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait at most")
    args = parser.parse_args(argv)
    try:
        print(wait_for_nodes(args.address, args.nodes, args.timeout), flush=True)
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
