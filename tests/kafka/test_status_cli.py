"""``processor-api status`` against the embedded broker, without Spark: an application that
never ran is an error naming its markers topic; the table of one that did (its tasks' commit
markers and group offsets written here as a task writes them)."""

from __future__ import annotations

import json

import pytest

from processor_api.cli.app_status import application_status, format_table
from processor_api.cli.tools import main
from processor_api.engine.metadata import TaskMetadata
from processor_api.errors import StreamsError
from processor_api.kafka.group import GroupCommitter
from processor_api.kafka.markers import marker_value, read_latest_marker
from processor_api.kafka.names import changelog_topic, commit_marker_topic
from tests.harness.topics import produce, uid

pytestmark = pytest.mark.integration


def test_an_application_that_never_ran_is_an_error_naming_its_markers_topic(kafka, capsys):
    app_id = f"never-{uid()}"
    code = main(
        ["status", "--bootstrap-servers", kafka.bootstrap_servers, "--application-id", app_id]
    )
    assert code == 2
    assert commit_marker_topic(app_id) in capsys.readouterr().err


def test_status_shows_positions_lag_stream_time_and_changelog_sizes(kafka, capsys):
    app_id = f"st-{uid()}"
    source = f"st-in-{app_id}"
    changelog = changelog_topic(app_id, "counts")
    kafka.create_topic(source, 2)
    kafka.create_topic(changelog, 2)
    kafka.create_topic(commit_marker_topic(app_id), 2)
    produce(kafka.bootstrap_servers, source, [(b"k", b"v", i % 2) for i in range(10)])
    produce(kafka.bootstrap_servers, changelog, [(b"k", b"1", 1)] * 3)
    # task 0_1 committed 4 of its 5 records, and 3 changelog records; 0_0 never committed
    metadata = TaskMetadata(stream_time=1_700_000_000_000, input_positions={source: 4},
                            changelog_offsets={"counts": 3})  # fmt: skip
    produce(
        kafka.bootstrap_servers,
        commit_marker_topic(app_id),
        [(b"0_1", marker_value(1, metadata.to_json()), 1)],
    )
    committer = GroupCommitter(kafka.bootstrap_servers, app_id, "status-test")
    try:
        committer.commit({(source, 1): 4})
    finally:
        committer.close()

    status = application_status(kafka.bootstrap_servers, app_id)
    (task,) = status.tasks
    assert task.task_id == "0_1" and task.alive and task.stream_time == 1_700_000_000_000
    assert [(i.topic, i.partition, i.committed, i.end, i.lag) for i in task.inputs] == [
        (source, 1, 4, 5, 1)
    ]
    assert [(c.store, c.committed_offset, c.records) for c in task.changelogs] == [("counts", 3, 3)]
    table = format_table(status)
    assert "total lag 1" in table and "2023-11-14T22:13:20Z" in table

    assert main(["status", "--bootstrap-servers", kafka.bootstrap_servers,
                 "--application-id", app_id, "--json"]) == 0  # fmt: skip
    shown = json.loads(capsys.readouterr().out)
    assert shown["lag"] == 1 and shown["tasks"][0]["inputs"][0]["committed"] == 4


def test_a_record_that_is_no_marker_is_an_error_naming_where_it_is(kafka):
    """Every reader decodes markers in ``kafka/markers.py``: a malformed one names its topic,
    partition and offset, and what a marker should be."""
    app_id = f"bad-{uid()}"
    topic = commit_marker_topic(app_id)
    kafka.create_topic(topic, 2)
    good = TaskMetadata(stream_time=5).to_json()
    produce(
        kafka.bootstrap_servers,
        topic,
        [(b"0_1", marker_value(1, good), 1), (b"0_1", b'{"sequence": 2}', 1)],
    )
    with pytest.raises(StreamsError) as raised:
        application_status(kafka.bootstrap_servers, app_id)
    assert f"commit marker at {topic}[1]@1 is not readable: KeyError: 'metadata'" in str(
        raised.value
    )
    with pytest.raises(StreamsError) as raised:
        read_latest_marker(kafka.bootstrap_servers, topic, 1, 0, "0_1")
    assert f"{topic}[1]@1" in str(raised.value) and '"sequence": <int>' in str(raised.value)
    # the marker before it is what a reader that stops before the bad one finds
    found = read_latest_marker(kafka.bootstrap_servers, topic, 1, 0, "0_1", before=1)
    assert found is not None and (found.sequence, found.stream_time, found.end) == (1, 5, 1)
