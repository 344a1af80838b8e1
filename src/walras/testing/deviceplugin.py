"""Fake GPUs for real local nodes: a kubelet device plugin for ``nvidia.com/gpu``.

Test infrastructure (``hack/real-node.sh`` starts one per real node): it advertises N healthy
devices with IDs ``<prefix>-0`` … ``<prefix>-(N-1)`` and answers each ``Allocate`` with the IDs the
kubelet chose in the environment variable ``NVIDIA_VISIBLE_DEVICES`` (comma-separated), as
NVIDIA's device plugin does. The kubelet's device manager therefore decides which container holds
which device, counts them in the node's allocatable, and refuses a pod that asks for more than
are free, exactly as on a GPU node; no status patch is involved.

Protocol (the kubelet's device-plugin API, ``v1beta1``): the plugin serves the ``DevicePlugin``
service on a Unix socket in the kubelet's device-plugin directory, then calls
``Registration/Register`` on ``kubelet.sock`` in the same directory with its socket's file name and
the resource name. The kubelet calls ``ListAndWatch`` (a stream that stays open; a new message
would change the device list) and ``Allocate`` per container. When the kubelet restarts it
recreates ``kubelet.sock`` and forgets its plugins, so the plugin watches that file and registers
again.

The few protobuf messages are encoded and decoded by hand (:func:`_encode`, :func:`_fields`)
instead of generated stubs: the whole API needs six messages of strings, booleans and nested
messages, and hand-coding them avoids a protobuf runtime and a code generator (grpcio-tools) as
test dependencies. Field numbers follow the API's ``api.proto``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
DEFAULT_RESOURCE = "nvidia.com/gpu"
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
HEALTHY = "Healthy"

_log = logging.getLogger("walras.testing.deviceplugin")

# ------------------------------------------------------------------------------------------------
# Protobuf wire format (only what the device-plugin messages use)
# ------------------------------------------------------------------------------------------------

_VARINT = 0
_FIXED64 = 1
_BYTES = 2
_FIXED32 = 5


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field_bytes(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | _BYTES) + _varint(len(payload)) + payload


def _field_string(number: int, text: str) -> bytes:
    return _field_bytes(number, text.encode())


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of every field in a message; length-delimited values as bytes,
    varints as int; fixed-width fields (unused by these messages) are skipped."""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, kind = key >> 3, key & 7
        if kind == _VARINT:
            value, pos = _read_varint(data, pos)
            yield number, value
        elif kind == _BYTES:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated length-delimited field")
            yield number, data[pos : pos + length]
            pos += length
        elif kind == _FIXED64:
            pos += 8
        elif kind == _FIXED32:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {kind}")


def encode_register_request(endpoint: str, resource_name: str) -> bytes:
    """RegisterRequest{version=1, endpoint=2, resource_name=3, options=4 (all false: empty)}."""
    return (
        _field_string(1, API_VERSION)
        + _field_string(2, endpoint)
        + _field_string(3, resource_name)
        + _field_bytes(4, b"")
    )


def encode_list_and_watch_response(device_ids: Sequence[str]) -> bytes:
    """ListAndWatchResponse{devices=1: repeated Device{ID=1, health=2}}."""
    return b"".join(
        _field_bytes(1, _field_string(1, device) + _field_string(2, HEALTHY))
        for device in device_ids
    )


def decode_allocate_request(data: bytes) -> list[list[str]]:
    """AllocateRequest{container_requests=1: repeated ContainerAllocateRequest{devices_ids=1}}:
    the device IDs asked for, per container."""
    containers: list[list[str]] = []
    for number, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            containers.append(
                [v.decode() for n, v in _fields(value) if n == 1 and isinstance(v, bytes)]
            )
    return containers


def encode_allocate_response(containers: Sequence[Sequence[str]]) -> bytes:
    """AllocateResponse{container_responses=1: repeated ContainerAllocateResponse{envs=1:
    map<string, string>}}; a map entry is a message {key=1, value=2}."""
    out = b""
    for device_ids in containers:
        entry = _field_string(1, VISIBLE_DEVICES_ENV) + _field_string(2, ",".join(device_ids))
        out += _field_bytes(1, _field_bytes(1, entry))
    return out


def decode_allocate_response(data: bytes) -> list[dict[str, str]]:
    """The environment per container of an AllocateResponse (the tests' oracle reads it)."""
    result: list[dict[str, str]] = []
    for number, value in _fields(data):
        if number != 1 or not isinstance(value, bytes):
            continue
        envs: dict[str, str] = {}
        for n, entry in _fields(value):
            if n == 1 and isinstance(entry, bytes):
                kv = {k: v for k, v in _fields(entry) if isinstance(v, bytes)}
                envs[kv.get(1, b"").decode()] = kv.get(2, b"").decode()
        result.append(envs)
    return result


def _identity(data: bytes) -> bytes:
    return data


# ------------------------------------------------------------------------------------------------
# The plugin
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PluginConfig:
    """Where the kubelet's device-plugin directory is and what to advertise."""

    directory: Path
    count: int
    prefix: str
    resource_name: str = DEFAULT_RESOURCE

    @property
    def socket_name(self) -> str:
        return "walras-" + self.resource_name.replace("/", "-").replace(".", "-") + ".sock"

    @property
    def device_ids(self) -> list[str]:
        return [f"{self.prefix}-{i}" for i in range(self.count)]


class DevicePlugin:
    """Serves the DevicePlugin service and keeps it registered with the kubelet."""

    def __init__(self, config: PluginConfig) -> None:
        self.config = config
        self._stopping = threading.Event()
        self._server: Any = None
        self.allocations: list[list[str]] = []

    # gRPC handlers ------------------------------------------------------------------------------

    def _options(self, request: bytes, context: Any) -> bytes:
        return b""  # DevicePluginOptions with both flags false

    def _list_and_watch(self, request: bytes, context: Any) -> Iterator[bytes]:
        yield encode_list_and_watch_response(self.config.device_ids)
        # The stream stays open: the kubelet treats its end as the plugin going away.
        while not self._stopping.is_set() and context.is_active():
            self._stopping.wait(1.0)

    def _allocate(self, request: bytes, context: Any) -> bytes:
        containers = decode_allocate_request(request)
        known = set(self.config.device_ids)
        for ids in containers:
            unknown = sorted(set(ids) - known)
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown device IDs {unknown}")
        self.allocations.extend(containers)
        _log.info("allocate %s", containers)
        return encode_allocate_response(containers)

    def _pre_start(self, request: bytes, context: Any) -> bytes:
        return b""

    def _preferred(self, request: bytes, context: Any) -> bytes:
        return b""

    # lifecycle ----------------------------------------------------------------------------------

    def serve(self) -> None:
        """Start serving on the plugin's socket (replacing a stale one)."""
        path = self.config.directory / self.config.socket_name
        path.unlink(missing_ok=True)

        def unary(fn: Callable[[bytes, Any], bytes]) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=_identity, response_serializer=_identity
            )

        handlers = {
            "GetDevicePluginOptions": unary(self._options),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                self._list_and_watch, request_deserializer=_identity, response_serializer=_identity
            ),
            "Allocate": unary(self._allocate),
            "PreStartContainer": unary(self._pre_start),
            "GetPreferredAllocation": unary(self._preferred),
        }
        # One thread per open ListAndWatch stream plus a few for unary calls.
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(f"{API_VERSION}.DevicePlugin", handlers),)
        )
        server.add_insecure_port(f"unix://{path}")
        server.start()
        self._server = server

    def register(self, timeout: float = 5.0) -> None:
        """Register with the kubelet (``Registration/Register`` on kubelet.sock)."""
        kubelet = self.config.directory / KUBELET_SOCKET
        with grpc.insecure_channel(f"unix://{kubelet}") as channel:
            call = channel.unary_unary(
                f"/{API_VERSION}.Registration/Register",
                request_serializer=_identity,
                response_deserializer=_identity,
            )
            call(
                encode_register_request(self.config.socket_name, self.config.resource_name),
                timeout=timeout,
            )
        _log.info(
            "registered %d x %s with %s", self.config.count, self.config.resource_name, kubelet
        )

    def request_stop(self) -> None:
        """Make :meth:`run` return (safe from a signal handler)."""
        self._stopping.set()

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.stop(grace=1.0).wait()
            self._server = None

    def run(self, poll: float = 0.5) -> None:
        """Serve and stay registered until :meth:`stop`: (re)register whenever kubelet.sock is
        (re)created, i.e. at the kubelet's every start."""
        kubelet = self.config.directory / KUBELET_SOCKET
        own = self.config.directory / self.config.socket_name
        registered: tuple[int, int] | None = None
        while not self._stopping.is_set():
            try:
                stat = kubelet.stat()
                identity = (stat.st_ino, int(stat.st_ctime_ns))
            except FileNotFoundError:
                identity = None
            if identity is not None and (identity != registered or not own.exists()):
                # A restarted kubelet removed our socket with its other plugins' sockets.
                self.stop_server_only()
                self.serve()
                try:
                    self.register()
                    registered = identity
                except grpc.RpcError as exc:
                    _log.warning("registration failed (%s); retrying", exc.code())
            self._stopping.wait(poll)

    def stop_server_only(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0).wait()
            self._server = None


def _positive_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--count must be a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"--count must be 0 or more, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m walras.testing.deviceplugin",
        description="Advertise fake GPUs to a kubelet through its device-plugin API.",
    )
    parser.add_argument("--dir", required=True, type=Path, help="the kubelet's device-plugin dir")
    parser.add_argument("--count", required=True, type=_positive_count, help="devices to offer")
    parser.add_argument("--prefix", default="gpu", help="device IDs are PREFIX-0 .. PREFIX-(N-1)")
    parser.add_argument("--resource", default=DEFAULT_RESOURCE, help="extended resource name")
    args = parser.parse_args(argv)
    if not args.dir.is_dir():
        parser.error(f"--dir {args.dir} is not a directory")
    if "/" not in args.resource:
        parser.error(f"--resource {args.resource!r} must be vendor-domain/name")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    plugin = DevicePlugin(PluginConfig(args.dir, args.count, args.prefix, args.resource))

    def on_signal(signum: int, frame: object) -> None:
        plugin.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        plugin.run()
    finally:
        plugin.stop()
        (args.dir / plugin.config.socket_name).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
