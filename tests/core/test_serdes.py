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
    [
        (Serdes.long(), "12"),
        (Serdes.long(), 2**63),
        (Serdes.integer(), 2**31),
        (Serdes.string(), 5),
        (Serdes.bytes(), "x"),
        (Serdes.long(), True),
    ],
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


class _Text(str):
    pass


class _Number(int):
    pass


_GENERIC = {
    serde.name: Serde(serde._serializer, serde._deserializer, serde.name)
    for serde in (
        Serdes.string(),
        Serdes.bytes(),
        Serdes.integer(),
        Serdes.long(),
        Serdes.double(),
        Serdes.json(),
    )
}
_OBJECTS = [
    None,
    "",
    "héllo",
    "\ud800",
    _Text("sub"),
    0,
    -1,
    2**31 - 1,
    2**31,
    -(2**31) - 1,
    2**63,
    -(2**63),
    2**63 - 1,
    _Number(3),
    True,
    1.5,
    float("nan"),
    -0.0,
    b"",
    b"\x00\xff",
    bytearray(b"ab"),
    memoryview(b"cd"),
    [1, 2],
    {"a": 1},
]
_DATA = [
    None,
    b"",
    b"abc",
    "héllo".encode(),
    b"\xff\xfe",
    b"\xed\xa0\x80",
    b"\x00" * 4,
    b"\x01" * 8,
    b"\x7f\xf0\x00\x00\x00\x00\x00\x01",
    bytearray(b"\x00\x00\x00\x07"),
    memoryview(b"\x00" * 8),
    b'{"a":1}',
    b"{oops",
]


def _outcome(fn, arg):
    try:
        result = fn(arg)
    except Exception as exc:  # noqa: BLE001 - the error is what is compared
        return ("raised", type(exc), str(exc))
    return ("returned", type(result), repr(result))


@pytest.mark.parametrize("name", sorted(_GENERIC))
def test_built_in_fast_paths_behave_like_the_generic_serde(name):
    built_in, generic = getattr(Serdes, name)(), _GENERIC[name]
    for obj in _OBJECTS:
        assert _outcome(built_in.serialize, obj) == _outcome(generic.serialize, obj), obj
    for data in _DATA:
        assert _outcome(built_in.deserialize, data) == _outcome(generic.deserialize, data), data


@pytest.mark.parametrize("name", sorted(_GENERIC))
def test_passthrough_check_means_an_exact_round_trip(name):
    serde = getattr(Serdes, name)()
    if not serde.passthrough:
        assert name == "json"  # compact re-serialization may change the bytes
        return
    check = serde.passthrough_check or (lambda data: True)
    for data in _DATA:
        if isinstance(data, bytes) and check(data):
            assert serde.serialize(serde.deserialize(data)) == data
        elif isinstance(data, bytes):
            with pytest.raises(SerializationError):
                serde.deserialize(data)


@pytest.mark.parametrize("name", sorted(_GENERIC))
def test_passthrough_check_all_accepts_a_list_only_when_the_check_accepts_each(name):
    serde = getattr(Serdes, name)()
    check, check_all = serde.passthrough_check, serde.passthrough_check_all
    assert (check is None) == (check_all is None)
    if check is None:
        return
    data = [d for d in _DATA if isinstance(d, bytes)]
    for i, first in enumerate(data):
        for second in data[i:]:
            items = [first, second, first]
            assert check_all(items) == (check(first) and check(second)), items


def test_custom_serdes_are_never_passed_through():
    assert not Serde(bytes, bytes).passthrough
