"""walras.testing.deviceplugin against a stand-in kubelet (its Registration service on a Unix
socket), over real gRPC. The byte strings are the protobuf encoding written out from the wire
format's rules (key = field number << 3 | wire type; length-delimited = key, length, bytes), an
oracle independent of the module's encoder."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from walras.testing import deviceplugin as dp


def test_register_request_bytes_follow_the_wire_format() -> None:
    # version=1 "v1beta1", endpoint=2 "a.sock", resource_name=3 "x/y", options=4 empty message.
    expected = b"\x0a\x07v1beta1" + b"\x12\x06a.sock" + b"\x1a\x03x/y" + b"\x22\x00"
    assert dp.encode_register_request("a.sock", "x/y") == expected


def test_list_and_watch_bytes_follow_the_wire_format() -> None:
    # One Device{ID=1 "g0", health=2 "Healthy"} (13 bytes) as field 1 of the response.
    device = b"\x0a\x02g0" + b"\x12\x07Healthy"
    assert dp.encode_list_and_watch_response(["g0"]) == b"\x0a" + bytes([len(device)]) + device


def test_allocate_request_decodes_per_container() -> None:
    # Two ContainerAllocateRequests: {devices_ids: ["a", "b"]} and {devices_ids: ["c"]}.
    first = b"\x0a\x01a\x0a\x01b"
    second = b"\x0a\x01c"
    data = b"\x0a" + bytes([len(first)]) + first + b"\x0a" + bytes([len(second)]) + second
    assert dp.decode_allocate_request(data) == [["a", "b"], ["c"]]


def test_allocate_response_sets_visible_devices() -> None:
    # envs map entry {key=1 "NVIDIA_VISIBLE_DEVICES", value=2 "a,b"} inside field 1 of field 1.
    entry = b"\x0a\x16NVIDIA_VISIBLE_DEVICES" + b"\x12\x03a,b"
    container = b"\x0a" + bytes([len(entry)]) + entry
    expected = b"\x0a" + bytes([len(container)]) + container
    assert dp.encode_allocate_response([["a", "b"]]) == expected


def test_truncated_message_is_an_error() -> None:
    with pytest.raises(ValueError, match="truncated"):
        dp.decode_allocate_request(b"\x0a\x05ab")


class _FakeKubelet:
    """The kubelet's Registration service: records each RegisterRequest's raw bytes."""

    def __init__(self, directory: Path) -> None:
        self.requests: list[bytes] = []
        self.registered = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.unary_unary_rpc_method_handler(
            self._register, request_deserializer=lambda b: b, response_serializer=lambda b: b
        )
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1beta1.Registration", {"Register": handler}),)
        )
        self.server.add_insecure_port(f"unix://{directory / 'kubelet.sock'}")
        self.server.start()

    def _register(self, request: bytes, context: Any) -> bytes:
        self.requests.append(request)
        self.registered.set()
        return b""


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    # A short path: Unix socket paths are limited to 107 bytes.
    with tempfile.TemporaryDirectory(prefix="dp-", dir="/tmp") as name:
        yield Path(name)


def test_plugin_registers_lists_and_allocates(plugin_dir: Path) -> None:
    kubelet = _FakeKubelet(plugin_dir)
    config = dp.PluginConfig(plugin_dir, count=4, prefix="n1-gpu")
    plugin = dp.DevicePlugin(config)
    thread = threading.Thread(target=plugin.run, kwargs={"poll": 0.05}, daemon=True)
    thread.start()
    try:
        assert kubelet.registered.wait(10), "the plugin never called Register"
        assert kubelet.requests[0] == dp.encode_register_request(
            config.socket_name, "nvidia.com/gpu"
        )
        with grpc.insecure_channel(f"unix://{plugin_dir / config.socket_name}") as channel:
            stream = channel.unary_stream(
                "/v1beta1.DevicePlugin/ListAndWatch",
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )(b"")
            first = next(stream)
            stream.cancel()
            ids = [
                dict(dp._fields(v))[1].decode()  # type: ignore[union-attr]
                for n, v in dp._fields(first)
                if n == 1 and isinstance(v, bytes)
            ]
            assert ids == ["n1-gpu-0", "n1-gpu-1", "n1-gpu-2", "n1-gpu-3"]
            allocate = channel.unary_unary(
                "/v1beta1.DevicePlugin/Allocate",
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )
            ask = b"\x0a\x14" + b"\x0a\x08n1-gpu-2" + b"\x0a\x08n1-gpu-0"
            envs = dp.decode_allocate_response(allocate(ask, timeout=5))
            assert envs == [{"NVIDIA_VISIBLE_DEVICES": "n1-gpu-2,n1-gpu-0"}]
            bad = b"\x0a\x07" + b"\x0a\x05other"
            with pytest.raises(grpc.RpcError) as error:
                allocate(bad, timeout=5)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        plugin.stop()
        thread.join(10)
        kubelet.server.stop(0).wait()
    assert not thread.is_alive()


def test_plugin_registers_again_when_the_kubelet_restarts(plugin_dir: Path) -> None:
    first = _FakeKubelet(plugin_dir)
    plugin = dp.DevicePlugin(dp.PluginConfig(plugin_dir, count=1, prefix="g"))
    thread = threading.Thread(target=plugin.run, kwargs={"poll": 0.05}, daemon=True)
    thread.start()
    try:
        assert first.registered.wait(10)
        first.server.stop(0).wait()
        # A restarted kubelet: a new kubelet.sock (new inode), the plugin sockets removed.
        (plugin_dir / "kubelet.sock").unlink(missing_ok=True)
        (plugin_dir / plugin.config.socket_name).unlink(missing_ok=True)
        second = _FakeKubelet(plugin_dir)
        assert second.registered.wait(10), "no registration with the restarted kubelet"
        assert (plugin_dir / plugin.config.socket_name).exists()
        second.server.stop(0).wait()
    finally:
        plugin.stop()
        thread.join(10)


def test_cli_rejects_bad_count(capsys: pytest.CaptureFixture[str], plugin_dir: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        dp.main(["--dir", str(plugin_dir), "--count", "four"])
    assert exit_info.value.code == 2
    assert "--count must be a whole number" in capsys.readouterr().err
