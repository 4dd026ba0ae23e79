"""Built-in serdes use Kafka's Java wire formats."""

from __future__ import annotations

import pytest

from processor_api import Serde, Serdes, SerializationError


@pytest.mark.parametrize(
    "serde,value,wire",
    [
        (Serdes.string(), "héllo", "héllo".encode()),
        (Serdes.integer(), 1, b"\x00\x00\x00\x01"),
        (Serdes.integer(), -1, b"\xff\xff\xff\xff"),
        (Serdes.long(), 2000, b"\x00\x00\x00\x00\x00\x00\x07\xd0"),
        (Serdes.long(), -2, b"\xff" * 7 + b"\xfe"),
        (Serdes.double(), 1.5, b"\x3f\xf8" + b"\x00" * 6),
        (Serdes.json(), {"product": "p", "value": 3}, b'{"product":"p","value":3}'),
        (Serdes.bytes(), b"\x00\x01", b"\x00\x01"),
    ],
)
def test_round_trip_and_wire_format(serde, value, wire):
    assert serde.serialize(value) == wire
    assert serde.deserialize(wire) == value


def test_none_is_null_both_ways():
    for serde in (Serdes.string(), Serdes.long(), Serdes.json(), Serdes.bytes()):
        assert serde.serialize(None) is None
        assert serde.deserialize(None) is None


@pytest.mark.parametrize(
    "serde,bad",
    [(Serdes.long(), "12"), (Serdes.long(), 2**63), (Serdes.integer(), 2**31),
     (Serdes.string(), 5), (Serdes.bytes(), "x"), (Serdes.long(), True)],
)
def test_wrong_types_raise_clear_errors(serde, bad):
    with pytest.raises(SerializationError, match=serde.name):
        serde.serialize(bad)


def test_bad_bytes_raise_clear_errors():
    with pytest.raises(SerializationError, match="long serde expects 8 bytes, got 3"):
        Serdes.long().deserialize(b"abc")
    with pytest.raises(SerializationError, match="json serde cannot deserialize"):
        Serdes.json().deserialize(b"{oops")


def test_custom_serde():
    upper = Serde(lambda s: s.upper().encode(), lambda b: b.decode().lower(), "upper")
    assert upper.serialize("abc") == b"ABC"
    assert upper.deserialize(b"ABC") == "abc"
