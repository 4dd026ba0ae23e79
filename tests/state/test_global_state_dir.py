"""The local copy of the global stores: checkpoint, resume position, wipe of uncovered files."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from processor_api import Serdes, Stores
from processor_api.state.checkpoint import read_checkpoint, write_checkpoint
from processor_api.state.global_state import GlobalStateDirectory

S = Serdes.string()


def builders():
    return {
        "disk": Stores.key_value_store_builder(
            Stores.persistent_key_value_store("disk"), S, S
        ).with_logging_disabled(),
        "memory": Stores.key_value_store_builder(
            Stores.in_memory_key_value_store("memory"), S, S
        ).with_logging_disabled(),
    }


TOPICS = {"disk": "disk-topic", "memory": "memory-topic"}


def open_dir(path):
    state = GlobalStateDirectory(path, builders(), TOPICS)
    stacks = {name: state.build(b, lambda: 0) for name, b in builders().items()}
    return state, stacks


def test_checkpointed_positions_and_data_survive_a_reopen(tmp_path):
    state, stacks = open_dir(tmp_path)
    assert state.positions() == {}
    state.begin_update()
    stacks["disk"].store.put("k", "v")
    stacks["memory"].store.put("k", "v")
    for stack in stacks.values():
        stack.flush()
    state.checkpoint({("disk-topic", 0): 5, ("disk-topic", 1): 0, ("memory-topic", 0): 7})
    for stack in stacks.values():
        stack.close()
    # in-memory stores are not checkpointed: they start again from offset 0
    assert read_checkpoint(tmp_path / ".checkpoint") == {("disk-topic", 0): 5, ("disk-topic", 1): 0}

    state, stacks = open_dir(tmp_path)
    assert state.positions() == {("disk-topic", 0): 5, ("disk-topic", 1): 0}
    assert stacks["disk"].store.get("k") == "v"
    assert stacks["memory"].store.get("k") is None
    for stack in stacks.values():
        stack.close()


def test_an_update_that_never_checkpointed_wipes_the_store_on_reopen(tmp_path):
    state, stacks = open_dir(tmp_path)
    state.checkpoint({("disk-topic", 0): 1})
    state.begin_update()  # the checkpoint is gone from here until the next checkpoint()
    assert not (tmp_path / ".checkpoint").exists()
    stacks["disk"].store.put("half", "written")
    stacks["disk"].flush()
    stacks["disk"].close()  # the process dies before checkpoint()
    stacks["memory"].close()
    with capture_logs() as logs:
        state, stacks = open_dir(tmp_path)
    assert state.positions() == {}
    assert stacks["disk"].store.get("half") is None
    (wipe,) = [e for e in logs if e["event"] == "global_store_wipe"]
    assert (wipe["store"], wipe["topic"]) == ("disk", "disk-topic")
    assert wipe["log_level"] == "info"  # routine: it is restored from its topic
    for stack in stacks.values():
        stack.close()


def test_checkpoint_entries_of_topics_no_store_reads_are_dropped_and_said_so(tmp_path):
    write_checkpoint(tmp_path / ".checkpoint", {("gone", 0): 3, ("disk-topic", 0): 2})
    with capture_logs() as logs:
        state = GlobalStateDirectory(tmp_path, builders(), TOPICS)
    assert state.positions() == {("disk-topic", 0): 2}
    (dropped,) = [e for e in logs if e["event"] == "global_checkpoint_unknown_topics"]
    assert dropped["topics"] == ["gone"]
    assert dropped["log_level"] == "info"  # a topology change, nothing to act on


class _Killed(BaseException):
    """The process killed in the middle of deleting the store's files."""


def test_a_kill_in_the_middle_of_the_wipe_is_wiped_again_at_the_next_open(tmp_path, monkeypatch):
    """The wipe of uncovered files can be cut short (kill -9): the half-deleted copy is still
    not covered by the checkpoint, so the next open wipes it again and starts empty."""
    import shutil

    import processor_api.state.global_state as global_state

    state, stacks = open_dir(tmp_path)
    state.begin_update()
    stacks["disk"].store.put("half", "written")
    for stack in stacks.values():
        stack.flush()
        stack.close()  # the process dies before checkpoint()
    real_rmtree = shutil.rmtree

    def killed_halfway(path, *args, **kwargs):
        for manifest in tmp_path.rglob("MANIFEST-*"):  # deleted first, then the kill
            manifest.unlink()
        raise _Killed

    monkeypatch.setattr(global_state.shutil, "rmtree", killed_halfway)
    with pytest.raises(_Killed):
        open_dir(tmp_path)
    monkeypatch.setattr(global_state.shutil, "rmtree", real_rmtree)
    state, stacks = open_dir(tmp_path)
    assert state.positions() == {}
    assert stacks["disk"].store.get("half") is None
    for stack in stacks.values():
        stack.close()
