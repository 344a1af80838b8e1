"""The API server as pods on real local nodes see it: a TCP forwarder from the ``kubernetes``
Service's address to the loopback-only API server.

Test infrastructure (``hack/real-node.sh`` starts one per control plane with real nodes). The
local API server listens on 127.0.0.1 only, which a pod's network namespace cannot reach, and
there is no kube-proxy to carry the Service's virtual IP. So the node script puts the Service's
ClusterIP (10.96.0.1, the first address of the control plane's service range) on an empty bridge
of this machine and this process forwards ``10.96.0.1:443`` to the API server byte for byte. TLS
is end to end: a pod's in-cluster configuration (``KUBERNETES_SERVICE_HOST``/``_PORT``, which the
kubelet sets, the ServiceAccount token and the ``kube-root-ca.crt`` CA) works unchanged, since the
API server's certificate names 10.96.0.1. The address is private and on no interface that leaves
the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence


def _endpoint(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.write_eof()


async def _forward(
    target: tuple[str, int],
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
) -> None:
    try:
        server_reader, server_writer = await asyncio.open_connection(*target)
    except OSError:
        client_writer.close()
        return
    try:
        await asyncio.gather(
            _pump(client_reader, server_writer), _pump(server_reader, client_writer)
        )
    finally:
        for writer in (client_writer, server_writer):
            writer.close()


async def serve(listen: tuple[str, int], target: tuple[str, int]) -> None:
    """Forward every connection to ``listen`` to ``target`` until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = await asyncio.start_server(
        lambda r, w: _forward(target, r, w), host=listen[0], port=listen[1], reuse_address=True
    )
    async with server:
        print(f"forwarding {listen[0]}:{listen[1]} -> {target[0]}:{target[1]}", file=sys.stderr)
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m walras.testing.apiproxy",
        description="Forward TCP from the kubernetes Service address to the local API server.",
    )
    parser.add_argument("--listen", required=True, type=_endpoint, help="HOST:PORT to listen on")
    parser.add_argument("--target", required=True, type=_endpoint, help="HOST:PORT to forward to")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.listen, args.target))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
