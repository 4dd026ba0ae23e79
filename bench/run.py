"""Entry point: ``python -m bench.run --quick|--full`` (``make bench-quick`` / ``make bench``).

Starts one embedded broker, runs throughput, punctuation and restore with the sizes of the mode,
writes ``bench/results/<benchmark>-<mode>-<date>.json`` (each with the machine and the command) and
regenerates ``bench/RESULTS.md`` and the plots from every result file present.

``--only throughput,punctuation,restore,latency`` runs a subset (latency: ``bench/latency.py``); ``--profile`` (default with --full)
also records py-spy profiles (not timed) into ``bench/results/profiles-<mode>-<date>.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from bench import common
from bench.common import Broker, command_line, log, machine_info, write_result

MODES: dict[str, dict[str, Any]] = {
    "quick": {
        "throughput_sizes": [200_000],
        "throughput_reps": 3,
        "punct_sizes": [10_000, 100_000],
        "punct_reps": 3,
        "check_records": 100_000,
        "check_reps": 5,
        "intervals_records": 100_000,
        "intervals_reps": 3,
        "lag_seconds": 20,
        "lag_reps": 2,
        "lag_rate": 2000,
        "timer_keys": [],
        "restore_entries": 100_000,
        "restore_reps": 3,
        "latency_rates": [2000, 20000],
        "latency_reps": 1,
        "latency_settle_s": 3,
        "latency_measure_s": 15,
        "profile": False,
        # the four contenders; the diagnostic ones only run with --full. The run-topology
        # contender is still named for the runtime ("processor_api epochs"), as recorded since
        # the micro-batch runtime ("processor_api" in the results before) was removed.
        "throughput_contenders": [
            "processor_api epochs",
            "hand_loop",
            "quixstreams",
            "transformWithStateInPandas",
        ],
    },
    "full": {
        "throughput_sizes": [200_000, 2_000_000],
        "throughput_reps": 3,
        "punct_sizes": [10_000, 100_000, 1_000_000],
        "punct_reps": 5,
        "check_records": 500_000,
        "check_reps": 5,
        "intervals_records": 200_000,
        "intervals_reps": 3,
        "lag_seconds": 45,
        "lag_reps": 3,
        "lag_rate": 2000,
        "timer_keys": [10_000, 100_000],
        "timer_seconds": 40,
        "timer_reps": 2,
        "restore_entries": 1_000_000,
        "restore_reps": 3,
        "latency_rates": [2000, 20000],
        "latency_reps": 3,
        "latency_settle_s": 5,
        "latency_measure_s": 30,
        "profile": True,
    },
}


_MACHINE: dict[str, Any] = {}


def _envelope(mode: str, config: dict[str, Any], started: float, body: dict) -> dict:
    import os

    machine = dict(_MACHINE or machine_info())  # as recorded when the run started
    machine["loadavg_at_end"] = list(os.getloadavg())
    return {
        "mode": mode,
        "command": command_line(),
        "make_target": "make bench-quick" if mode == "quick" else "make bench",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(time.time() - started, 1),
        "machine": machine,
        "config": config,
        **body,
    }


def save_profile(
    tag: str, mode: str, config: dict, started: float, name: str, summary: dict
) -> None:
    """Add one profile summary to today's ``profiles-<tag>-<date>.json`` (kept across partial runs)."""
    import json

    path = common.result_path(f"profiles-{tag}")
    profiles = {}
    if path.exists():
        profiles = json.loads(path.read_text()).get("profiles", {})
    profiles[name] = summary
    write_result(f"profiles-{tag}", _envelope(mode, config, started, {"profiles": profiles}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--quick", action="store_true", help="small sizes, minutes")
    group.add_argument(
        "--full", action="store_true", help="the full sizes (2M records, 1M keys and entries)"
    )
    parser.add_argument(
        "--only",
        default="throughput,punctuation,restore",
        help="comma-separated subset of throughput,punctuation,restore,latency "
        "(latency is not in the default set: add it)",
    )
    parser.add_argument(
        "--latency-contenders",
        default=None,
        help="latency contenders subset, e.g. 'processor_api epochs,hand_loop' "
        "(processor_api alone: both guarantees)",
    )
    parser.add_argument("--latency-reps", type=int, default=None)
    parser.add_argument("--latency-rates", default=None, help="e.g. 2000,20000")
    parser.add_argument("--latency-measure", type=float, default=None, help="seconds")
    parser.add_argument(
        "--profile",
        action="store_true",
        default=None,
        help="also record py-spy profiles (default: on with --full)",
    )
    parser.add_argument("--no-profile", dest="profile", action="store_false")
    parser.add_argument(
        "--throughput-sizes", default=None, help="override, e.g. 200000,2000000,20000000"
    )
    parser.add_argument(
        "--contenders",
        default=None,
        help="throughput contenders subset, e.g. 'processor_api epochs,hand_loop'",
    )
    parser.add_argument(
        "--reps",
        type=int,
        default=None,
        help="override the repetitions of the throughput comparison",
    )
    parser.add_argument(
        "--suffix",
        default="",
        help="result file suffix, e.g. -20M: throughput-full-20M-<date>.json",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="only regenerate RESULTS.md and plots from the JSON files (python -m bench.report)",
    )
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    config = dict(MODES[mode])
    if args.profile is not None:
        config["profile"] = args.profile
    if args.throughput_sizes:
        config["throughput_sizes"] = [int(x) for x in args.throughput_sizes.split(",")]
    if args.reps:
        config["throughput_reps"] = args.reps
    if args.latency_reps:
        config["latency_reps"] = args.latency_reps
    if args.latency_rates:
        config["latency_rates"] = [int(x) for x in args.latency_rates.split(",")]
    if args.latency_measure:
        config["latency_measure_s"] = args.latency_measure
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    tag = f"{mode}{args.suffix}"
    include = set(args.contenders.split(",")) if args.contenders else None
    if include is None and config.get("throughput_contenders"):
        include = set(config["throughput_contenders"])
    from bench.throughput import BASELINE_DIR, EPOCHS_BEFORE

    if include is not None and BASELINE_DIR:
        include.add(EPOCHS_BEFORE)  # asked for with bench/snapshot.sh --baseline REV

    from processor_api.logging import configure_logging

    configure_logging("console", level="WARNING")
    if args.report_only:
        from bench.report import write_report

        write_report()
        return 0

    run_started = time.time()
    _MACHINE.update(machine_info())
    log(f"bench {mode}: {', '.join(sorted(only))}")
    broker = Broker.start()
    try:
        if "throughput" in only:
            from bench import throughput

            problems = common.ensure_environments()
            for name, why in problems.items():
                log(f"  {name} cannot run: {why}")
            started = time.time()
            sizes = {}
            for records in config["throughput_sizes"]:
                sizes[str(records)] = throughput.run_size(
                    broker, records, config["throughput_reps"], include
                )
                if config["profile"] and records == max(config["throughput_sizes"]):
                    save_profile(
                        tag,
                        mode,
                        config,
                        run_started,
                        f"throughput processor_api epochs {records}",
                        throughput.profile_processor_api(
                            broker, sizes[str(records)]["topic"], records, f"{records}"
                        ),
                    )
            write_result(
                f"throughput-{tag}",
                _envelope(
                    mode, config, started, {"sizes": sizes, "environment_problems": problems}
                ),
            )

        if "punctuation" in only:
            from bench import punctuation, throughput

            started = time.time()
            body: dict[str, Any] = {}
            body["cost_vs_store_size"] = punctuation.punctuation_cost(
                config["punct_sizes"], config["punct_reps"], broker.bootstrap
            )
            body["check_overhead"] = punctuation.check_overhead(
                config["check_records"], config["check_reps"]
            )
            topic = f"bench-punct-input-{config['intervals_records']}"
            broker.create_topic(topic, throughput.PARTITIONS, throughput.TOPIC_CONFIG)
            common.produce_input(
                broker.bootstrap, topic, config["intervals_records"], throughput.KEYS
            )
            log("punctuation on Spark: records/s by stream-time interval")
            body["spark_intervals"] = punctuation.spark_intervals(
                broker, topic, config["intervals_records"], config["intervals_reps"]
            )
            log("punctuation on Spark: wall-clock lag")
            body["spark_wall_clock_lag"] = punctuation.spark_lag(
                broker, config["lag_seconds"], config["lag_reps"], config["lag_rate"]
            )
            for keys in config["timer_keys"]:
                log(f"timers on Spark: every second, every key's count ({keys} keys)")
                body.setdefault("spark_timers", {})[str(keys)] = punctuation.spark_timers(
                    broker, keys, config["timer_seconds"], config["timer_reps"]
                )
            if config["profile"]:
                from bench import profiles

                size = max(config["punct_sizes"])
                save_profile(
                    tag,
                    mode,
                    config,
                    run_started,
                    f"punctuation {size} keys (in-process)",
                    profiles.run_profiled(
                        [sys.executable, "-m", "bench.profile_targets", "punctuation", str(size)],
                        f"profile-punctuation-{size}",
                        timeout_s=1800,
                    ),
                )
            write_result(f"punctuation-{tag}", _envelope(mode, config, started, body))

        if "latency" in only:
            from bench import latency

            started = time.time()
            latency_include = (
                {x.strip() for x in args.latency_contenders.split(",")}
                if args.latency_contenders
                else None
            )
            # a broker of its own: on the broker the earlier sections had used, run-topology's
            # p99 was seconds, against hundreds of ms on a fresh one (bench/NOTES-epochs.md)
            latency_broker = Broker.start()
            try:
                body = latency.run(
                    latency_broker,
                    config["latency_rates"],
                    config["latency_reps"],
                    config["latency_settle_s"],
                    config["latency_measure_s"],
                    include=latency_include,
                )
            finally:
                latency_broker.stop()
            write_result(f"latency-{tag}", _envelope(mode, config, started, body))

        if "restore" in only:
            from bench import restore

            started = time.time()
            body = restore.run(broker, config["restore_entries"], config["restore_reps"])
            if config["profile"]:
                from bench import profiles

                save_profile(
                    tag,
                    mode,
                    config,
                    run_started,
                    f"restore {config['restore_entries']} (in-process)",
                    profiles.run_profiled(
                        [
                            sys.executable,
                            "-m",
                            "bench.profile_targets",
                            "restore",
                            broker.bootstrap,
                            str(config["restore_entries"]),
                        ],
                        f"profile-restore-{config['restore_entries']}",
                        timeout_s=1800,
                    ),
                )
            write_result(f"restore-{tag}", _envelope(mode, config, started, body))
    finally:
        broker.stop()

    from bench.report import write_report

    write_report()
    log(f"bench {mode} done in {time.time() - run_started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
