"""Issue 21: a full disk under the state directory, on a small tmpfs made for the test.

The commit fails with an error naming the state directory, no checkpoint claims the writes the
store did not get, closing does not fail over it, and once there is space again the task opens
and restores from its changelog to exactly the committed contents.

Mounting needs root (or CAP_SYS_ADMIN); elsewhere the test is skipped, saying so.
"""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from processor_api.errors import StoreError
from tests.harness.corrupt_state import STORE, task_stores

SMALL = "1m"
ROOMY = "64m"


@pytest.fixture
def small_filesystem(tmp_path):
    """A 1 MB tmpfs at a fresh mount point; ``remount(size)`` gives it more room."""
    mount_point = tmp_path / "state"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SMALL}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    # the project's machines (developers' and CI's) run as root, where this works
    assert done.returncode == 0, f"cannot mount a small tmpfs (needs root): {done.stderr.strip()}"

    def remount(size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(mount_point)], check=True)

    try:
        yield mount_point, remount
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _batch(first: int, count: int) -> list[tuple[str, int]]:
    # incompressible keys: the store's SST files need their full size on disk
    return [(f"key-{i}-{os.urandom(48).hex()}", i) for i in range(first, first + count)]


def test_a_full_state_directory_fails_the_commit_naming_it_and_resumes_once_space_is_back(
    small_filesystem,
):
    mount_point, remount = small_filesystem
    app = f"full-{uuid.uuid4().hex[:8]}"
    task_dir = mount_point / app / "0_0"
    changelog: list[tuple[bytes, bytes | None]] = []

    def commit_batch(stores, entries) -> None:
        stack = stores.stacks[STORE]
        stack.store.put_all(entries)
        stack.flush()
        changelog.extend((c.key, c.value) for c in stack.changelog.drain_changes())
        stores.commit({STORE: len(changelog)})

    stores = task_stores(task_dir, app)
    commit_batch(stores, _batch(0, 100))
    assert stores.local_positions() == {STORE: 100}
    with pytest.raises(StoreError) as caught:
        commit_batch(stores, _batch(100, 20_000))  # ~2 MB of SST: more than the disk holds
    message = str(caught.value)
    assert f"state directory {task_dir}" in message and "no space left" in message
    assert "task 0_0" in message
    # the changelog holds the batch (it was made durable before the local commit); the
    # local copy does not, and no checkpoint says it does
    assert stores.local_positions() == {STORE: None}
    stores.close()  # does not raise over the unflushed memtable

    remount(ROOMY)
    calls = []

    def read(topic, partition, start, end, apply, **options):
        calls.append((start, end))
        apply(changelog[start:end])
        return end - start

    stores = task_stores(task_dir, app)
    try:
        assert stores.restore({STORE: len(changelog)}, read) == {STORE: len(changelog)}
        assert calls == [(0, len(changelog))]  # wiped: the local copy was not vouched for
        assert sum(1 for _ in stores.stacks[STORE].store.all()) == 20_100
        commit_batch(stores, _batch(20_100, 10))
        assert stores.local_positions() == {STORE: 20_110}
    finally:
        stores.close()
