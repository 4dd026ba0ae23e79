"""The fault-injection proxy itself (tests/harness/proxy.py): forwarding, cut, refuse, outage,
latency, throttling on a local echo server; then a real Kafka client through it."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.harness.proxy import FaultProxy, broker_behind_proxy
from tests.harness.topics import create_topics_now, produce, read_topic, uid


class _Echo:
    """A TCP echo server on a loopback port."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(connection,), daemon=True).start()

    @staticmethod
    def _echo(connection: socket.socket) -> None:
        with connection:
            try:
                while data := connection.recv(65536):
                    connection.sendall(data)
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def echo_proxy():
    echo = _Echo()
    with FaultProxy(("127.0.0.1", echo.port)) as proxy:
        yield proxy
    echo.close()


def _connect(proxy: FaultProxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    return sock


def _round_trip(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(payload)
    received = b""
    while len(received) < len(payload):
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


def test_forwards_both_ways(echo_proxy):
    with _connect(echo_proxy) as sock:
        assert _round_trip(sock, b"hello" * 1000) == b"hello" * 1000
    assert echo_proxy.connections_accepted == 1


def test_cut_resets_open_connections(echo_proxy):
    with _connect(echo_proxy) as sock:
        assert _round_trip(sock, b"x") == b"x"
        assert echo_proxy.cut() == 2  # the client's and the upstream's socket
        try:  # a cut connection reads EOF or a reset
            data = sock.recv(10)
        except ConnectionResetError:
            data = b""
        assert data == b""
    # new connections are accepted after a cut
    with _connect(echo_proxy) as sock:
        assert _round_trip(sock, b"y") == b"y"


def test_refuse_then_accept_again(echo_proxy):
    echo_proxy.refuse()
    with pytest.raises(ConnectionRefusedError):
        _connect(echo_proxy)
    echo_proxy.accept_again()
    with _connect(echo_proxy) as sock:
        assert _round_trip(sock, b"back") == b"back"


def test_outage_refuses_for_its_length_then_ends_by_itself(echo_proxy):
    echo_proxy.outage(0.5)
    with pytest.raises(ConnectionRefusedError):
        _connect(echo_proxy)
    echo_proxy.wait_outage_over(10)
    with _connect(echo_proxy) as sock:
        assert _round_trip(sock, b"after") == b"after"


def test_latency_delays_every_chunk_sent_upstream(echo_proxy):
    echo_proxy.latency_s = 0.2
    with _connect(echo_proxy) as sock:
        started = time.monotonic()
        for _ in range(3):
            assert _round_trip(sock, b"ping") == b"ping"
        # a lower bound: three requests, each held 0.2 s on its way (no upper bound asserted)
        assert time.monotonic() - started >= 0.6


def test_throttle_bounds_the_rate(echo_proxy):
    echo_proxy.bytes_per_s = 100_000
    payload = b"z" * 50_000
    with _connect(echo_proxy) as sock:
        started = time.monotonic()
        assert _round_trip(sock, payload) == payload
        # 50 kB at 100 kB/s per direction (the directions overlap): at least 0.5 s, a lower
        # bound only
        assert time.monotonic() - started >= 0.5


@pytest.mark.integration
def test_a_kafka_client_goes_through_the_proxy_and_rides_out_an_outage():
    with broker_behind_proxy() as (broker, proxy):
        topic = uid("proxy")
        create_topics_now(proxy.address, {topic: 1})
        produce(proxy.address, topic, [(b"k", b"before")])
        accepted = proxy.connections_accepted
        assert accepted > 0
        proxy.outage(2)
        proxy.wait_outage_over(30)
        produce(broker.bootstrap_servers, topic, [(b"k", b"after")])
        # the client bootstrapped at the broker went on through the advertised proxy
        assert proxy.connections_accepted > accepted
        values = [r.value for r in read_topic(proxy.address, topic)]
        assert values == [b"before", b"after"]
