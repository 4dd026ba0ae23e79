"""The driver's cut of a running epoch (an executor was lost: Spark needs the slots for the
lost workers, ``spark/executor_watch.py``): the epoch running ends at once with a commit, and
only that one: the next epoch of the run processes as usual, and a cut asked between two
epochs ends none. A real worker host, a real broker, no Spark."""

from __future__ import annotations

import pytest

from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime.host_client import close_hosts
from processor_api.spark.epochs import cut_epochs, end_epochs
from tests.harness.topics import produce, uid
from tests.runtime.test_epoch_after_stop import WAIT_S, _Epoch, _spec, _wait_until_processed

pytestmark = pytest.mark.integration


def test_a_cut_ends_the_running_epoch_with_a_commit_and_not_the_next(kafka, tmp_path):
    app, source, sink = uid("cut"), uid("in"), uid("out")
    for topic in (source, sink, commit_marker_topic(app)):
        kafka.create_topic(topic, 1)
    produce(kafka.bootstrap_servers, source, [(b"k", b"before the cut")])
    spec = _spec(kafka, tmp_path, app, source, sink)
    state_dir, run_id = spec.state_dir, spec.run_id
    try:
        running = _Epoch(spec, None, epoch=1)  # 120 s long: it ends by the cut
        _wait_until_processed(spec, outputs=1)
        assert cut_epochs(state_dir, app, ["0_0"], run_id) == 1
        first = running.reply(within_s=WAIT_S)
        assert first.processed == 1 and first.commits >= 1

        # between epochs: the host answers, and the next epoch runs all the same
        assert cut_epochs(state_dir, app, ["0_0"], run_id) == 1
        produce(kafka.bootstrap_servers, source, [(b"k", b"after the cut")])
        second = _Epoch(spec, first.metadata_json, epoch=2)
        _wait_until_processed(spec, outputs=2)
        assert end_epochs(state_dir, app, ["0_0"], run_id) == 1
        later = second.reply(within_s=WAIT_S)
        assert later.processed >= 1 and later.commits >= 1
        assert later.rebuilt is False
    finally:
        close_hosts(state_dir, app, ["0_0"])
