"""A state directory per executor: the executor's id as Spark gives it, the driver's view."""

from __future__ import annotations

from processor_api.runtime.executor_dirs import executor_id, executor_state_dir, state_dirs_here


def test_the_kubernetes_executor_id_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("SPARK_EXECUTOR_ID", "7")
    assert executor_id() == "7"
    assert executor_state_dir("/data/state", per_executor=True) == "/data/state/executor-7"
    assert executor_state_dir("/data/state", per_executor=False) == "/data/state"


def test_a_standalone_executor_is_known_by_its_work_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("SPARK_EXECUTOR_ID", raising=False)
    work = tmp_path / "work" / "app-20261126145500-0001" / "3"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    assert executor_id() == "3"


def test_elsewhere_the_host_name_stands_for_the_executor(monkeypatch, tmp_path):
    monkeypatch.delenv("SPARK_EXECUTOR_ID", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("socket.gethostname", lambda: "node 4.example")
    assert executor_id() == "host-node_4.example"


def test_the_driver_sees_every_executor_directory_on_its_machine(tmp_path):
    for name in ("executor-1", "executor-0", "app"):
        (tmp_path / name).mkdir()
    assert state_dirs_here(tmp_path, per_executor=True) == [
        tmp_path / "executor-0",
        tmp_path / "executor-1",
    ]
    assert state_dirs_here(tmp_path, per_executor=False) == [tmp_path]
