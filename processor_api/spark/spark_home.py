"""A ``SPARK_HOME`` whose ``pyspark.zip`` carries bytecode, so Python workers start faster.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's path.
``zipimport`` never writes bytecode, so each worker process (the data source planner and
readers, the ``applyInPandasWithState`` workers) compiles the pyspark modules it imports from
source (0.78 s for pyspark's worker modules, 0.31 s with bytecode, here). This module builds, once
per pyspark version and interpreter, a directory that links to everything in the installed
``SPARK_HOME`` except ``python/lib/pyspark.zip``, which is a copy with unchecked hash-based
``.pyc`` files next to the sources (PEP 552: used as they are, never rewritten).

Set ``PROCESSOR_API_COMPILED_PYSPARK=0`` to use the installed ``SPARK_HOME`` unchanged.
"""

from __future__ import annotations

import compileall
import hashlib
import os
import re
import shutil
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path
from py_compile import PycInvalidationMode

from processor_api.logging import get_logger

_log = get_logger(__name__)

ENV_SWITCH = "PROCESSOR_API_COMPILED_PYSPARK"
CACHE_ENV = "PROCESSOR_API_CACHE_DIR"
_ZIP = Path("python") / "lib" / "pyspark.zip"
_NOT_COMPILED = re.compile(r"[/\\]tests?[/\\]")  # never imported by workers


def _cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "processor_api"


def _installed_spark_home() -> Path | None:
    from pyspark.find_spark_home import _find_spark_home

    try:
        return Path(_find_spark_home())
    except (SystemExit, Exception):  # find_spark_home exits when it finds nothing
        return None


def _fingerprint(source_zip: Path) -> str:
    stat = source_zip.stat()
    key = f"{source_zip.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{sys.version}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _compiled_zip(source_zip: Path, target: Path) -> None:
    """Copy ``source_zip`` to ``target`` with a ``.pyc`` beside every ``.py``."""
    with tempfile.TemporaryDirectory(prefix="pyspark-zip-") as tmp:
        with zipfile.ZipFile(source_zip) as archive:
            archive.extractall(tmp)
        with warnings.catch_warnings():  # pyspark's own tests have SyntaxWarnings
            warnings.simplefilter("ignore")
            ok = compileall.compile_dir(
                tmp,
                quiet=2,
                legacy=True,
                workers=1,
                rx=_NOT_COMPILED,
                invalidation_mode=PycInvalidationMode.UNCHECKED_HASH,
            )
        if not ok:
            _log.debug("pyspark_zip_partly_compiled", zip=str(source_zip))
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as out:
            for path in sorted(Path(tmp).rglob("*")):
                if path.is_file():
                    out.write(path, path.relative_to(tmp).as_posix())


def _build(installed: Path, destination: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=destination.name + ".", dir=destination.parent))
    try:
        for entry in installed.iterdir():
            if entry.name != "python":
                (staging / entry.name).symlink_to(entry)
        (staging / "python").mkdir()
        for entry in (installed / "python").iterdir():
            if entry.name != "lib":
                (staging / "python" / entry.name).symlink_to(entry)
        (staging / "python" / "lib").mkdir()
        for entry in (installed / "python" / "lib").iterdir():
            if entry.name != "pyspark.zip":
                (staging / "python" / "lib" / entry.name).symlink_to(entry)
        _compiled_zip(installed / _ZIP, staging / _ZIP)
        try:
            staging.rename(destination)
        except OSError:  # another run built it first
            if not destination.exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def compiled_spark_home() -> str | None:
    """The path of the compiled ``SPARK_HOME`` (built on first use), or None to keep Spark's.

    None when switched off, when ``SPARK_HOME`` is set by the user, when the installation has
    no ``python/lib/pyspark.zip``, or when the cache cannot be written (logged).
    """
    if os.environ.get(ENV_SWITCH, "1") == "0" or os.environ.get("SPARK_HOME"):
        return None
    installed = _installed_spark_home()
    if installed is None or not (installed / _ZIP).is_file():
        return None
    destination = _cache_root() / f"spark-home-{_fingerprint(installed / _ZIP)}"
    if not destination.exists():
        try:
            destination.parent.mkdir(parents=True, exist_ok=True)
            _build(installed, destination)
            _log.info("compiled_spark_home_built", path=str(destination))
        except OSError as exc:
            _log.info(
                "compiled_spark_home_unavailable",
                error=str(exc),
                detail="Python workers compile pyspark from its zip instead",
            )
            return None
    return str(destination)
