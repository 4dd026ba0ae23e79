"""A store's snapshots in a ``pyarrow.fs`` filesystem: manifests, files, upload, download, prune.

One store of one task has a directory of its own in the snapshot location::

    <location>/<task>/<store>/
        manifests/<offset>-<created ms>-<token>.json   one per snapshot, written last
        files/<file stem>-<token><suffix>                RocksDB files, each uploaded once

A manifest names the files of one RocksDB checkpoint (name, object, size, SHA-256) and the
changelog offset the checkpoint holds: the store equals its changelog replayed from offset 0
up to (not including) that offset. SST files are immutable, so a file a newer checkpoint still
holds is not uploaded again: the uploader remembers which object holds which local file
(:class:`UploadedFiles`). An object is written before any manifest names it, and a manifest is
the last write of a snapshot, so a reader never sees a manifest whose upload is unfinished;
files that vanished or changed since are caught by their size and checksum when downloaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from processor_api.errors import ConfigError, StoreError

MANIFEST_FORMAT = 1
_CHUNK_BYTES = 1024 * 1024  # what one copy step holds in memory
#: Unreferenced objects younger than this are left alone when pruning: another host (an old
#: owner of the task still uploading) may be about to name them in a manifest.
DEFAULT_PRUNE_GRACE_S = 600.0
#: How often a long download reports how far it got.
PROGRESS_EVERY_S = 10.0
#: The URI schemes of Hadoop's S3 connectors: the same bucket and key as ``s3://``.
_HADOOP_S3_SCHEMES = ("s3a", "s3n")


@dataclass(frozen=True)
class SnapshotFile:
    """One file of a snapshot: its name in the RocksDB directory and where it was uploaded."""

    name: str
    object: str  # path relative to the store's snapshot directory
    size: int
    sha256: str


@dataclass(frozen=True)
class SnapshotManifest:
    """What one snapshot holds: the store's files at ``offset`` of its changelog."""

    task: str
    store: str
    changelog_topic: str
    partition: int
    offset: int
    created_ms: int
    identity: dict[str, Any]
    files: tuple[SnapshotFile, ...]
    format: int = MANIFEST_FORMAT

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> str:
        body = asdict(self)
        body["files"] = [asdict(f) for f in self.files]
        return json.dumps(body, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SnapshotManifest:
        body = json.loads(text)
        if not isinstance(body, dict) or body.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"not a format-{MANIFEST_FORMAT} snapshot manifest")
        files = tuple(SnapshotFile(**f) for f in body.pop("files"))
        return cls(**body, files=files)


def open_location(
    uri: str, options: Mapping[str, Any] | None = None, *, setting: str = "state.snapshot.location"
) -> tuple[Any, str]:
    """``(filesystem, root path)`` for a snapshot location (or another directory of a run).

    ``uri``: a local path, or any URI ``pyarrow.fs`` knows (``file://``, ``s3://``, ``gs://``,
    ``hdfs://``); Hadoop's names for S3 (``s3a://``, ``s3n://``) are read as ``s3://``.
    ``options`` are the filesystem's own constructor arguments (for S3: ``endpoint_override``,
    ``region``, ``access_key``, ``secret_key``, ...); without them the filesystem is made from
    the URI as ``pyarrow.fs.FileSystem.from_uri`` does. ``setting`` names where ``uri`` came
    from, in the errors.
    """
    # imported when a task first uses its snapshot location (its first snapshot, one interval
    # after it started, or a restore from one), not with the module: pyarrow and numpy take
    # ~40 MiB of resident memory in every worker host that imports them
    import pyarrow.fs as pafs

    given = uri  # as the user wrote it, for the errors
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in _HADOOP_S3_SCHEMES:  # Spark users write S3 paths in Hadoop's connector's terms
        uri = "s3" + uri[len(scheme) :]
        parsed = urlparse(uri)
        scheme = "s3"
    if scheme in ("", "file") or len(scheme) == 1:  # a path (or a Windows drive letter)
        path = parsed.path if scheme == "file" else uri
        return pafs.LocalFileSystem(), os.path.abspath(path)
    if options:
        kinds: dict[str, Callable[..., Any]] = {
            "s3": pafs.S3FileSystem,
            "gs": pafs.GcsFileSystem,
            "gcs": pafs.GcsFileSystem,
            "hdfs": pafs.HadoopFileSystem,
        }
        make = kinds.get(scheme)
        if make is None:
            raise ConfigError(
                f"{setting} {given!r}: filesystem options are supported for "
                f"{', '.join(sorted(kinds))} URIs, not {scheme!r}"
            )
        try:
            if scheme == "hdfs":
                filesystem = make(parsed.hostname or "default", parsed.port or 0, **options)
                return filesystem, parsed.path
            filesystem = make(**options)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"state.snapshot.filesystem.options for {given!r} are not accepted by "
                f"{make.__name__}: {exc}"
            ) from exc
        return filesystem, f"{parsed.netloc}{parsed.path}".rstrip("/")
    try:
        filesystem, path = pafs.FileSystem.from_uri(uri)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds
        raise ConfigError(f"{setting} {given!r} cannot be opened: {_first_line(exc)}") from exc
    return filesystem, path.rstrip("/")


class UploadedFiles:
    """Which object already holds a local file, by the file's identity on disk.

    RocksDB checkpoints hard-link SST files, so one SST keeps its inode from one checkpoint
    to the next; an inode, size and modification time that match mean the same bytes.
    """

    def __init__(self) -> None:
        self._objects: dict[tuple[int, int, int, str], SnapshotFile] = {}

    @staticmethod
    def _key(path: Path) -> tuple[int, int, int, str]:
        info = path.stat()
        return (info.st_ino, info.st_size, info.st_mtime_ns, path.name)

    def find(self, path: Path) -> SnapshotFile | None:
        return self._objects.get(self._key(path))

    def remember(self, path: Path, uploaded: SnapshotFile) -> None:
        self._objects[self._key(path)] = uploaded

    def forget_missing(self, kept: set[str]) -> None:
        """Drop entries whose object was deleted."""
        self._objects = {k: v for k, v in self._objects.items() if v.object in kept}


class Throttle:
    """At most ``bytes_per_s`` bytes per second over the uploads it sees (0: unlimited)."""

    def __init__(self, bytes_per_s: int) -> None:
        self.bytes_per_s = bytes_per_s
        self._started = time.monotonic()
        self._sent = 0

    def sent(self, size: int) -> None:
        if self.bytes_per_s <= 0:
            return
        self._sent += size
        ahead = self._sent / self.bytes_per_s - (time.monotonic() - self._started)
        if ahead > 0:
            time.sleep(ahead)


class StoreSnapshotDir:
    """The snapshots of one store of one task, in ``filesystem`` under ``root``."""

    def __init__(self, filesystem: Any, root: str) -> None:
        self.fs = filesystem
        self.root = root.rstrip("/")

    def _path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    # ------------------------------------------------------------------ read
    def manifests(self) -> list[tuple[str, SnapshotManifest | None]]:
        """Every manifest, newest offset first: ``(object, manifest)``; ``None`` for one that
        does not parse (reported by the caller)."""
        import pyarrow.fs as pafs  # see open_location

        selector = pafs.FileSelector(self._path("manifests"), allow_not_found=True)
        found: list[tuple[int, int, str, SnapshotManifest | None]] = []
        for info in self.fs.get_file_info(selector):
            if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
                continue
            relative = f"manifests/{info.base_name}"
            try:
                manifest: SnapshotManifest | None = SnapshotManifest.from_json(
                    self._read_text(relative)
                )
            except (OSError, ValueError, TypeError, KeyError):
                manifest = None
            offset, created = _manifest_order(info.base_name)
            found.append((offset, created, relative, manifest))
        found.sort(key=lambda item: (item[0], item[1]), reverse=True)
        return [(relative, manifest) for _, _, relative, manifest in found]

    def _read_text(self, relative: str) -> str:
        with self.fs.open_input_stream(self._path(relative)) as stream:
            return stream.read().decode("utf-8")

    def download(
        self,
        manifest: SnapshotManifest,
        target: Path,
        on_progress: Callable[[int, int], None] | None = None,
        progress_every_s: float = PROGRESS_EVERY_S,
    ) -> None:
        """Write the snapshot's files into the new directory ``target``; a file that is missing,
        of another size or another checksum is a :class:`StoreError` naming it.

        ``on_progress(bytes done, bytes in all)`` is called every ``progress_every_s`` while
        the download lasts. A stalled connection ends the download with an error: the object
        stores' clients abort a request that moves nothing for a few seconds.
        """
        target.mkdir(parents=True)
        total = manifest.total_bytes
        done = 0
        next_report = time.monotonic() + progress_every_s
        for entry in manifest.files:
            digest = hashlib.sha256()
            size = 0
            try:
                with (
                    self.fs.open_input_stream(self._path(entry.object)) as source,
                    open(target / entry.name, "wb") as sink,
                ):
                    while chunk := source.read(_CHUNK_BYTES):
                        digest.update(chunk)
                        size += len(chunk)
                        sink.write(chunk)
                        done += len(chunk)
                        if on_progress is not None and time.monotonic() >= next_report:
                            on_progress(done, total)
                            next_report = time.monotonic() + progress_every_s
            except (OSError, FileNotFoundError) as exc:
                raise StoreError(f"snapshot file {entry.object} cannot be read: {exc}") from exc
            if size != entry.size or digest.hexdigest() != entry.sha256:
                raise StoreError(
                    f"snapshot file {entry.object} is corrupt: {size} bytes with SHA-256 "
                    f"{digest.hexdigest()[:12]}..., the manifest says {entry.size} bytes with "
                    f"{entry.sha256[:12]}..."
                )

    # ----------------------------------------------------------------- write
    def upload(
        self,
        checkpoint: Path,
        *,
        template: SnapshotManifest,
        uploaded: UploadedFiles,
        throttle: Throttle,
    ) -> tuple[SnapshotManifest, int]:
        """Upload a RocksDB checkpoint directory and then its manifest.

        Files ``uploaded`` already knows are named, not sent again; so are SST files the
        newest snapshot holds with the same name, size and checksum (a store that outlived its
        process: checked by reading the local file once, instead of uploading it). Returns the
        manifest and the number of bytes sent.
        """
        self.fs.create_dir(self._path("files"), recursive=True)
        self.fs.create_dir(self._path("manifests"), recursive=True)
        files: list[SnapshotFile] = []
        sent = 0
        previous: dict[tuple[str, int], SnapshotFile] | None = None
        for path in sorted(checkpoint.iterdir()):
            if not path.is_file():
                continue
            known = uploaded.find(path)
            if known is None and path.suffix == ".sst":
                if previous is None:
                    previous = self._newest_files()
                candidate = previous.get((path.name, path.stat().st_size))
                if candidate is not None and _sha256(path) == candidate.sha256:
                    known = candidate
                    uploaded.remember(path, known)
            if known is None:
                known = self._upload_file(path, throttle)
                sent += known.size
                if path.suffix == ".sst":  # immutable: worth remembering
                    uploaded.remember(path, known)
            files.append(SnapshotFile(path.name, known.object, known.size, known.sha256))
        manifest = SnapshotManifest(
            **{**asdict(template), "files": tuple(files), "created_ms": int(time.time() * 1000)}
        )
        name = f"manifests/{manifest.offset:020d}-{manifest.created_ms:015d}-{_token()}.json"
        with self.fs.open_output_stream(self._path(name)) as stream:
            stream.write(manifest.to_json().encode("utf-8"))
        return manifest, sent

    def _newest_files(self) -> dict[tuple[str, int], SnapshotFile]:
        """The newest readable snapshot's files by (name, size)."""
        for _, manifest in self.manifests():
            if manifest is not None:
                return {(f.name, f.size): f for f in manifest.files}
        return {}

    def _upload_file(self, path: Path, throttle: Throttle) -> SnapshotFile:
        relative = f"files/{path.stem}-{_token()}{path.suffix}"
        digest = hashlib.sha256()
        size = 0
        with open(path, "rb") as source, self.fs.open_output_stream(self._path(relative)) as sink:
            while chunk := source.read(_CHUNK_BYTES):
                digest.update(chunk)
                sink.write(chunk)
                size += len(chunk)
                throttle.sent(len(chunk))
        return SnapshotFile(path.name, relative, size, digest.hexdigest())

    def prune(self, retained: int, *, grace_s: float = DEFAULT_PRUNE_GRACE_S) -> tuple[int, int]:
        """Keep the newest ``retained`` readable manifests and the files they name; delete the
        other manifests and every file no kept manifest names (if older than ``grace_s``).
        Returns ``(manifests deleted, files deleted)``."""
        manifests = self.manifests()
        kept = [m for _, m in manifests if m is not None][:retained]
        kept_names = {relative for relative, m in manifests if m is not None and m in kept}
        referenced = {f.object for m in kept for f in m.files}
        deleted_manifests = 0
        for relative, _ in manifests:
            if relative not in kept_names:
                self._delete(relative)
                deleted_manifests += 1
        deleted_files = 0
        now = time.time()
        import pyarrow.fs as pafs  # see open_location

        selector = pafs.FileSelector(self._path("files"), allow_not_found=True)
        for info in self.fs.get_file_info(selector):
            relative = f"files/{info.base_name}"
            if info.type != pafs.FileType.File or relative in referenced:
                continue
            modified = info.mtime.timestamp() if info.mtime is not None else 0.0
            if now - modified >= grace_s:
                self._delete(relative)
                deleted_files += 1
        return deleted_manifests, deleted_files

    def referenced_objects(self) -> set[str]:
        return {f.object for _, m in self.manifests() if m is not None for f in m.files}

    def _delete(self, relative: str) -> None:
        try:
            self.fs.delete_file(self._path(relative))
        except FileNotFoundError:
            pass  # another host pruned it first


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _first_line(exc: BaseException) -> str:
    """An error's first line: pyarrow's HDFS errors list every path it tried to load a JVM from."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _token() -> str:
    return uuid.uuid4().hex[:12]


def _manifest_order(base_name: str) -> tuple[int, int]:
    parts = base_name.split("-")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return -1, -1
