"""User settings for the Kafka clients a run makes (security, timeouts, client ids, ...).

Settings come from ``--kafka-config KEY=VALUE`` and ``--kafka-config-file client.properties``
(Java properties format), or ``RunSettings.kafka_config`` in the Python API. As in Kafka
Streams, a key applies to every client, and a key prefixed ``consumer.``, ``producer.`` or
``admin.`` applies only to the clients of that role and wins over the unprefixed key there::

    security.protocol=SASL_SSL          # every client
    producer.linger.ms=20               # producers only
    consumer.fetch.max.bytes=104857600  # consumers only (task input, restore, offset look-ups)

An unprefixed key that librdkafka knows only for one kind of client (``linger.ms`` is a
producer property) is given only to the roles that know it, as Kafka Streams filters by each
client's known config names. Admin clients are producer-type handles in librdkafka.

Keys the runtime sets itself (``bootstrap.servers``, ``group.id``, ``transactional.id``,
``isolation.level``, ``enable.auto.commit``, ...) are refused with the reason. A Java
``sasl.jaas.config`` for the PLAIN or SCRAM login modules becomes librdkafka's
``sasl.username``/``sasl.password``. Everything else is checked by creating (never connecting)
a client of each role, so a misspelt key or a bad value fails before the run starts.

:class:`KafkaClientConfig` is immutable and picklable: the driver builds and checks it once
and hands it to every place that makes a client (explicit parameters, no global).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from processor_api.errors import ConfigError

Role = Literal["consumer", "producer", "admin"]
ROLES: tuple[Role, ...] = ("consumer", "producer", "admin")

#: Keys the runtime owns, with what to do instead.
RUNTIME_KEYS: dict[str, str] = {
    "bootstrap.servers": "give the address with --bootstrap-servers",
    "metadata.broker.list": "give the address with --bootstrap-servers",
    "group.id": "the runtime's clients never join a consumer group",
    "group.instance.id": "the runtime's clients never join a consumer group",
    "transactional.id": "set per task under exactly_once_v2 (<application.id>-<task>)",
    "isolation.level": "follows --processing-guarantee",
    "enable.auto.commit": "progress is committed by the runtime",
    "enable.auto.offset.store": "progress is committed by the runtime",
    "enable.idempotence": "producers are always idempotent",
    "logger": "librdkafka's log lines go to the run's log",
}

#: Settings whose values are secrets: never logged or shown in error messages.
SECRET_MARKERS = ("password", "secret", "jaas", "token", ".key.pem", "ssl.key")

_JAAS = re.compile(
    r"(?P<module>[\w.$]+LoginModule)\s+(?:required|requisite|sufficient|optional)(?P<options>.*?);?\s*$",
    re.DOTALL,
)
_JAAS_OPTION = re.compile(r"(\w+)\s*=\s*(?:\"((?:[^\"\\]|\\.)*)\"|(\S+))")


def is_secret(key: str) -> bool:
    """True for keys whose values must not be printed (passwords, private keys, JAAS)."""
    lowered = key.lower()
    return any(marker in lowered for marker in SECRET_MARKERS)


def _normalize_key(raw: object) -> str:
    key = str(raw).strip()
    if not key:
        raise ConfigError("a Kafka client setting has an empty key")
    return key.lower()


def _jaas_to_librdkafka(value: str) -> dict[str, str]:
    """``sasl.jaas.config`` of the PLAIN/SCRAM login modules -> sasl.username/sasl.password."""
    match = _JAAS.match(str(value).strip())
    if match is None or not match.group("module").endswith(
        ("PlainLoginModule", "ScramLoginModule")
    ):
        raise ConfigError(
            "sasl.jaas.config: only the PLAIN and SCRAM login modules can be translated for "
            "librdkafka (the Kafka client used here); give sasl.username and sasl.password "
            "(or sasl.oauthbearer.* settings) instead"
        )
    options = {
        m.group(1): m.group(2) if m.group(2) is not None else m.group(3)
        for m in _JAAS_OPTION.finditer(match.group("options"))
    }
    if "username" not in options or "password" not in options:
        raise ConfigError("sasl.jaas.config: the login module needs username=... password=...")
    return {"sasl.username": options["username"], "sasl.password": options["password"]}


@dataclass(frozen=True)
class KafkaClientConfig:
    """Checked user settings for the run's Kafka clients, resolved per role.

    Build it with :meth:`from_dict` (which checks it); ``KafkaClientConfig()`` is "no
    settings". :meth:`for_role` gives the librdkafka dict a client of that role gets on top of
    the runtime's defaults (and under the runtime's own keys).
    """

    settings: Mapping[str, Any] = field(default_factory=dict)
    roles: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_dict(
        cls, config: Mapping[str, Any] | None, *, check: bool = True
    ) -> KafkaClientConfig:
        """Parse ``{key: value}`` (keys optionally prefixed by a role) and check it.

        Raises :class:`ConfigError` naming the key for a runtime-owned key, a key librdkafka
        does not know or a value it refuses.
        """
        settings: dict[str, Any] = {}
        for raw_key, value in (config or {}).items():
            settings[_normalize_key(raw_key)] = value
        common: dict[str, Any] = {}
        prefixed: dict[str, dict[str, Any]] = {role: {} for role in ROLES}
        for key, value in settings.items():
            role, dot, rest = key.partition(".")
            if dot and role in ROLES:
                target, name = prefixed[role], rest
            else:
                target, name = common, key
            if name in RUNTIME_KEYS:
                raise ConfigError(
                    f"Kafka client setting {key!r} is not allowed: {RUNTIME_KEYS[name]}"
                )
            if name == "sasl.jaas.config":
                target.update(_jaas_to_librdkafka(value))
                if "PlainLoginModule" in str(value):
                    target.setdefault("sasl.mechanism", "PLAIN")
            else:
                target[name] = value
        roles: dict[str, dict[str, Any]] = {}
        for role in ROLES:
            applicable = _applicable(common, role) if check else dict(common)
            roles[role] = {**applicable, **prefixed[role]}
        result = cls(settings=settings, roles=roles)
        if check:
            for role in ROLES:
                _check_role(role, roles[role], prefixed[role])
        return result

    @classmethod
    def from_sources(
        cls, files: list[str | Path] | None = None, pairs: Mapping[str, Any] | None = None
    ) -> KafkaClientConfig:
        """Properties files in order, then ``pairs`` (``--kafka-config``) over them."""
        merged: dict[str, Any] = {}
        for path in files or []:
            merged.update(read_properties(path))
        merged.update({_normalize_key(k): v for k, v in (pairs or {}).items()})
        return cls.from_dict(merged)

    def for_role(self, role: Role) -> dict[str, Any]:
        """The user's settings for a client of ``role`` (a fresh dict)."""
        if role not in ROLES:
            raise ValueError(f"unknown Kafka client role {role!r}: expected one of {ROLES}")
        return dict(self.roles.get(role, {}))

    def describe(self) -> str:
        """``key=value`` list for messages, secrets masked (``sasl.password=***``)."""
        return ", ".join(
            f"{k}={'***' if is_secret(k) else v}" for k, v in sorted(self.settings.items())
        )

    def __bool__(self) -> bool:
        return bool(self.settings)


def _client_class(role: str) -> Any:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    return {"consumer": Consumer, "producer": Producer, "admin": AdminClient}[role]


class _Capture:
    """A librdkafka logger that keeps the lines (no output)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, level: int, fmt: str, *args: object) -> None:
        self.lines.append(fmt % args if args else fmt)


def _probe(role: str, config: Mapping[str, Any]) -> list[str]:
    """Create a client of ``role`` with ``config`` (no bootstrap address: it never connects).

    Returns librdkafka's log lines (configuration warnings); raises ``ConfigError`` with
    librdkafka's reason when it refuses the config.
    """
    from confluent_kafka import KafkaException

    capture = _Capture()
    settings = {**config, "logger": capture}
    if role == "consumer":
        settings["group.id"] = "processor-api-config-check"
    try:
        client = _client_class(role)(settings)
    except (KafkaException, ValueError, TypeError) as exc:
        error = exc.args[0] if exc.args else exc
        raise ConfigError(error.str() if hasattr(error, "str") else str(error)) from None
    client.poll(0)  # serves the log queue, where configuration warnings wait
    if role == "consumer":
        client.close()
    return capture.lines


def _applies(role: str, key: str, value: Any) -> bool:
    """Whether librdkafka uses ``key`` for a client of ``role`` (it warns when it does not).

    A key refused on its own (a bad name or value, or one that needs others, as
    ``security.protocol=SASL_SSL`` needs ``sasl.mechanism``) counts as used: the check of all
    the role's settings together reports what is wrong.
    """
    try:
        lines = _probe(role, {key: value})
    except ConfigError:
        return True
    return not any("will be ignored" in line for line in lines)


def _shown(key: str, value: Any) -> str:
    return "***" if is_secret(key) else str(value)


def _applicable(common: Mapping[str, Any], role: str) -> dict[str, Any]:
    """The unprefixed keys librdkafka knows for ``role`` (Kafka Streams filters the same way)."""
    return {key: value for key, value in common.items() if _applies(role, key, value)}


def _check_role(role: str, config: Mapping[str, Any], prefixed: Mapping[str, Any]) -> None:
    """Prefixed keys must apply to their role; all of the role's settings must go together."""
    for key, value in prefixed.items():
        if not _applies(role, key, value):
            raise ConfigError(
                f"Kafka client setting '{role}.{key}': librdkafka does not use {key!r} "
                f"for {role} clients"
            )
    try:
        _probe(role, config)
    except ConfigError as exc:
        shown = ", ".join(f"{k}={_shown(k, v)}" for k, v in sorted(config.items()))
        raise ConfigError(f"Kafka client settings {shown} ({role} clients): {exc}") from None


# ------------------------------------------------------------------------ properties files
def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Java ``.properties`` text -> ``{key: value}``.

    ``key=value``, ``key: value`` or ``key value``; ``#`` and ``!`` start comment lines; a line
    ending in an odd number of backslashes continues on the next one (its leading blanks
    dropped); ``\\t``, ``\\n``, ``\\uXXXX`` and ``\\<char>`` escapes as in Java.
    """
    result: dict[str, str] = {}
    logical: list[str] = []
    start_line = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip(" \t\f")
        if not logical:
            if not line or line[0] in "#!":
                continue
            start_line = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical.append(line[:-1])
            continue
        logical.append(line)
        _add_property(result, "".join(logical), source, start_line)
        logical = []
    if logical:
        _add_property(result, "".join(logical), source, start_line)
    return result


def _add_property(result: dict[str, str], line: str, source: str, number: int) -> None:
    key_chars: list[str] = []
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\" and index + 1 < len(line):
            key_chars.append(line[index : index + 2])
            index += 2
            continue
        if char in "=: \t\f":
            break
        key_chars.append(char)
        index += 1
    rest = line[index:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    key = _unescape("".join(key_chars))
    if not key:
        raise ConfigError(f"{source}:{number}: a property line without a key: {line!r}")
    result[key] = _unescape(rest)


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 >= len(text):
            out.append(char)
            index += 1
            continue
        nxt = text[index + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[index + 2 : index + 6]):
            out.append(chr(int(text[index + 2 : index + 6], 16)))
            index += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        index += 2
    return "".join(out)


def read_properties(path: str | Path) -> dict[str, str]:
    """Read a Java properties file (see :func:`parse_properties`)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read Kafka client config file {str(file)!r}: {exc.strerror}"
        ) from None
    return parse_properties(text, str(file))
