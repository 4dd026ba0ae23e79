"""Offset look-ups from several threads of one process at once (the ListOffsets crash).

confluent-kafka 2.16.1 could crash the process (SIGSEGV in ``AdminClient.list_offsets``) when a
client that did not know the partitions' leaders yet looked up offsets while other threads kept
the cores busy; ``processor_api.kafka.offsets`` fills the client's metadata cache first (see
its module docs). Before that, this test failed 5 of 6 runs; after, it passed 6 of 6. The
look-ups run in a child process, so that a crash fails this test instead of the test session.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.harness.topics import uid

pytestmark = pytest.mark.integration

LOOK_UPS = """
import sys, threading, time
from processor_api.kafka.offsets import beginning_offsets, end_offsets

bootstrap, seconds, topics = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
keys = [(topic, partition) for topic in topics for partition in range(3)]
done = []
stop = time.monotonic() + seconds

def look_up(index):
    while time.monotonic() < stop:
        if index % 2:
            end_offsets(bootstrap, keys, isolation_level="read_committed")
        else:
            beginning_offsets(bootstrap, keys)
        done.append(index)

threads = [threading.Thread(target=look_up, args=(i,)) for i in range(6)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(len(done))
"""


def test_offset_look_ups_in_six_threads_at_once_do_not_crash_the_process(kafka):
    topics = [uid("off-threads") for _ in range(4)]
    for topic in topics:
        kafka.create_topic(topic, 3)
    done = subprocess.run(
        [sys.executable, "-c", LOOK_UPS, kafka.bootstrap_servers, "8", *topics],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert int(done.stdout.strip()) > 20, done.stdout
