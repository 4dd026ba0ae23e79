"""The Spark grouping key of each task: spreads the tasks over Spark's shuffle partitions.

``applyInPandasWithState`` groups rows by a key and Spark hash-partitions the groups:
partition = ``pmod(murmur3(key, seed=42), spark.sql.shuffle.partitions)``. Grouping by the
bare task id ("0_0", "0_1", "0_2") can put several tasks into one partition (with 3
partitions all three of those land in partition 1), and a partition's groups run one after
the other on one core. So each task is grouped by a *group key*: its id, plus a ``#salt``
chosen at planning time so that task ``i`` lands in partition ``i mod partitions``.

The group key is also the key of the task's ``GroupState``, so a checkpoint must keep the
keys it was started with: they are recorded in the checkpoint directory
(:data:`TASK_KEYS_FILE`) and reused on resume. A checkpoint written before group keys existed
keeps the bare task ids.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from processor_api.errors import ConfigError
from processor_api.spark.checkpoint_files import CheckpointFiles, as_checkpoint

TASK_KEYS_FILE = "processor_api_task_keys.json"
SALT_SEPARATOR = "#"
_SPARK_HASH_SEED = 42
_MAX_SALT = 100_000
_MASK = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _MASK
    return (_rotl(k1, 15) * 0x1B873593) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 = _rotl(h1 ^ k1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK


def spark_string_hash(text: str, seed: int = _SPARK_HASH_SEED) -> int:
    """Spark's ``hash()`` of a string column (``Murmur3_x86_32.hashUnsafeBytes``), signed.

    Not the standard Murmur3: Spark mixes each trailing (non word-aligned) byte, sign-extended,
    as a whole block.
    """
    data = text.encode("utf-8")
    aligned = len(data) - len(data) % 4
    h1 = seed & _MASK
    for start in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[start : start + 4], "little")))
    for byte in data[aligned:]:
        signed = byte - 256 if byte > 127 else byte
        h1 = _mix_h1(h1, _mix_k1(signed & _MASK))
    h1 ^= len(data)
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def spark_partition_of(key: str, partitions: int) -> int:
    """The shuffle partition Spark's hash partitioning gives the string ``key``."""
    return spark_string_hash(key) % partitions  # Python's % is Spark's pmod for n > 0


def plan_group_keys(task_ids: Sequence[str], partitions: int) -> dict[str, str]:
    """A group key per task so that task ``i`` lands in shuffle partition ``i % partitions``."""
    if partitions < 1:
        raise ConfigError(f"spark.sql.shuffle.partitions must be >= 1, got {partitions}")
    keys: dict[str, str] = {}
    for index, task_id in enumerate(task_ids):
        target = index % partitions
        for salt in range(_MAX_SALT):
            candidate = task_id if salt == 0 else f"{task_id}{SALT_SEPARATOR}{salt}"
            if spark_partition_of(candidate, partitions) == target:
                keys[task_id] = candidate
                break
        else:  # pragma: no cover - a uniform hash finds one within a few * partitions tries
            raise ConfigError(f"no group key for task {task_id} in partition {target}")
    return keys


def task_id_of(group_key: str) -> str:
    """The task id a group key stands for (the key without its salt)."""
    return group_key.split(SALT_SEPARATOR, 1)[0]


def recorded_partitions(checkpoint: str | Path | CheckpointFiles) -> int | None:
    """The shuffle partitions the checkpoint's group keys were planned for (Spark keeps a
    checkpoint's partition count); None for a new checkpoint."""
    text = as_checkpoint(checkpoint).read_text(TASK_KEYS_FILE)
    if text is None:
        return None
    partitions = json.loads(text).get("partitions")
    return None if partitions is None else int(partitions)


def load_or_plan_group_keys(
    checkpoint: str | Path | CheckpointFiles, task_ids: Sequence[str], partitions: int
) -> dict[str, str]:
    """The group keys recorded in the checkpoint, or new ones recorded there now.

    A checkpoint that already holds Spark offsets but no key file was written before group
    keys existed: its ``GroupState`` is keyed by the bare task ids, which are kept.
    """
    files = as_checkpoint(checkpoint)
    text = files.read_text(TASK_KEYS_FILE)
    if text is not None:
        recorded = json.loads(text)
        keys = dict(recorded.get("keys", {}))
        missing = [task_id for task_id in task_ids if task_id not in keys]
        if missing:  # new input partitions: Spark keeps the checkpoint's partition count
            planned = plan_group_keys(task_ids, int(recorded.get("partitions", partitions)))
            keys.update({task_id: planned[task_id] for task_id in missing})
            recorded["keys"] = keys
            files.write_text(TASK_KEYS_FILE, json.dumps(recorded, indent=1) + "\n")
        return {task_id: keys[task_id] for task_id in task_ids}
    if files.exists("offsets"):
        return {task_id: task_id for task_id in task_ids}
    keys = plan_group_keys(task_ids, partitions)
    files.write_text(
        TASK_KEYS_FILE, json.dumps({"partitions": partitions, "keys": keys}, indent=1) + "\n"
    )
    return keys
