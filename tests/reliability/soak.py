"""Crash soak: seed 000's sales aggregation under ``run-topology``, killed
with ``kill -9`` (the whole process tree) again and again, then compared with a reference fold.

    python -m tests.reliability.soak --events 30000 --kills 8 --guarantee both \\
        --out bench/results/soak-$(date +%F).json

For each guarantee: a fresh input topic (3 partitions) gets ``--events`` sales over
``--products`` products; ``run-topology --available-now`` (one epoch per run, every task
committing every ``commit.interval.ms``) is started and killed ``--kills`` times, cycling
through the kill kinds of ``tests/harness/crash.py``: ``mid_commit`` (after 1-3 commits of a
task, as soon as output records of the open commit interval are in the log: inside a
transaction under exactly-once), ``after_commit`` (right after a commit), ``state_dir_deleted``
(a mid-commit kill, then the state dir is deleted) and ``restore`` (at the next
``restore_start``); then one run goes to the end. A ``read_committed`` reader's view of the
output is compared with the reference fold (see ``tests/harness/folds.py``: ``compare``),
both as read and with the records of aborted transactions removed (Tansu shows them to
``read_committed`` readers; a Kafka broker does not).

The runs use the paced twin of the topology (``--pause-ms``, 1 ms per record by default) so
that each task's work spans many commits for the kills to fall between, and commit every
100 ms under exactly_once_v2 (Kafka Streams' default) and every 300 ms under at_least_once
(its default, 30 s, would put no commit inside a run); ``--commit-interval-ms`` sets both.

``--repeat N`` runs the whole plan N times per guarantee and prints how many passed (a run
that fails by itself counts as a failure, its error kept in the JSON).

Prints a summary table, writes every detail as JSON to ``--out``, exits 1 if a guarantee was
broken. Uses an embedded Tansu broker unless ``--bootstrap-servers`` is given.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from tests.harness.crash import KILL_KINDS, CrashScenario
from tests.harness.folds import is_ok, make_sales

GUARANTEES = ("at_least_once", "exactly_once_v2")
CYCLE = ("mid_commit", "after_commit", "state_dir_deleted", "restore")
#: commit.interval.ms per guarantee unless --commit-interval-ms says otherwise
COMMIT_INTERVAL_MS = {"at_least_once": 300, "exactly_once_v2": 100}


def kill_plan(kills: int) -> list[str]:
    return [CYCLE[i % len(CYCLE)] for i in range(kills)]


def verdict(report) -> bool:
    if report.failure or report.committed_only is None:
        return False
    committed, visible = report.committed_only, report.read_committed
    ok = is_ok(committed, report.guarantee) and report.store_totals_equal
    if report.guarantee == "exactly_once_v2":
        ok = ok and visible.extra == report.aborted_visible and visible.missing == 0
    return ok


@contextmanager
def machine_lock(path: str | None) -> Iterator[None]:
    """Hold ``path``'s flock for the duration (no-op without a path)."""
    if path is None:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def passes(reports) -> str:
    """One line per guarantee: how many of its scenarios passed."""
    lines = []
    for guarantee in dict.fromkeys(r.guarantee for r in reports):
        mine = [r for r in reports if r.guarantee == guarantee]
        failed = [r for r in mine if not verdict(r)]
        line = f"{guarantee}: {len(mine) - len(failed)}/{len(mine)} passed"
        if failed:
            reasons = Counter("run failed" if r.failure else "guarantee broken" for r in failed)
            line += " (" + ", ".join(f"{n} {why}" for why, n in sorted(reasons.items())) + ")"
        lines.append(line)
    return "\n".join(lines)


def table(reports) -> str:
    header = (
        "guarantee",
        "view",
        "runs",
        "kills mid/after/st_del/restore",
        "in output",
        "restores hit",
        "events",
        "expected",
        "seen",
        "missing",
        "extra",
        "wrong",
        "order",
        "aborted shown",
        "totals equal",
        "ok",
    )
    rows = []
    for report in reports:
        if report.read_committed is None:
            continue
        kinds = report.kills_by_kind()
        in_restore = sum(
            1 for k in report.kills if k.kind == "restore" and k.done and k.detail.get("in_flight")
        )
        mid = [k for k in report.kills if k.done and k.kind in ("mid_commit", "state_dir_deleted")]
        in_output = sum(1 for k in mid if k.detail.get("output_in_flight"))
        for view, comparison in (
            ("read_committed", report.read_committed),
            ("committed txns", report.committed_only),
        ):
            if view == "committed txns" and report.guarantee != "exactly_once_v2":
                continue
            rows.append(
                (
                    report.guarantee,
                    view,
                    report.runs,
                    "/".join(
                        str(kinds[k])
                        for k in ("mid_commit", "after_commit", "state_dir_deleted", "restore")
                    ),
                    f"{in_output}/{len(mid)}",
                    f"{in_restore}/{kinds['restore']}",
                    report.events,
                    comparison.expected,
                    comparison.seen,
                    comparison.missing,
                    comparison.extra,
                    comparison.wrong,
                    comparison.order_violations,
                    report.aborted_visible,
                    comparison.totals_equal and report.store_totals_equal,
                    is_ok(comparison, report.guarantee) and report.store_totals_equal,
                )
            )
    widths = [max(len(str(v)) for v in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(str(v).rjust(w) for v, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(v).rjust(w) for v, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.reliability.soak", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--products", type=int, default=150)
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--guarantee", choices=[*GUARANTEES, "both"], default="both")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--pause-ms",
        type=float,
        default=1.0,
        help="> 0: run the paced twin of seed 000's topology (sleeps this long per record, "
        "same output) so that a task's work spans many commits and mid-commit kills land "
        "inside open transactions; 0: seed 000's topology as it is",
    )
    parser.add_argument(
        "--bootstrap-servers",
        default=None,
        help="an existing broker (default: an embedded Tansu broker)",
    )
    parser.add_argument(
        "--workdir",
        default=None,
        help="state, checkpoints and logs (default: a temp dir, deleted unless --keep)",
    )
    parser.add_argument(
        "--commit-interval-ms",
        type=int,
        default=None,
        help="commit.interval.ms of the runs (default: 100 under exactly_once_v2, 300 under "
        "at_least_once)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the whole kill plan this many times per guarantee (fresh topics each time) "
        "and count the passes; a run that fails counts as a failed pass, with its error kept",
    )
    parser.add_argument(
        "--lock",
        default=None,
        help="hold this file's lock (flock) around each scenario, so a shared machine runs "
        "no other Spark job beside it",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)

    guarantees = list(GUARANTEES) if args.guarantee == "both" else [args.guarantee]
    plan = kill_plan(args.kills)
    sales = make_sales(args.events, args.products, seed=args.seed)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="processor-api-soak-"))
    started = time.time()
    reports = []

    def log(message: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)

    with ExitStack() as stack:
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            from processor_api.testing.embedded import EmbeddedKafka

            bootstrap = stack.enter_context(EmbeddedKafka()).bootstrap_servers
        for repeat in range(args.repeat):
            for number, guarantee in enumerate(guarantees):
                label = f"{guarantee} #{repeat + 1}/{args.repeat}"
                log(f"{label}: {args.events} events, {args.products} products, kills {plan}")
                scenario = CrashScenario(
                    bootstrap,
                    workdir / f"{guarantee}-{repeat}",
                    guarantee,
                    sales,
                    partitions=args.partitions,
                    seed=args.seed * 100 + number + 1000 * repeat,
                    pause_ms=args.pause_ms,
                    commit_interval_ms=args.commit_interval_ms or COMMIT_INTERVAL_MS[guarantee],
                    log=log,
                )
                with machine_lock(args.lock):
                    try:
                        report = scenario.run(plan)
                    except Exception as error:  # noqa: BLE001 - a failed run is a result here
                        report = scenario.report
                        report.failure = f"{type(error).__name__}: {error}"[-4000:]
                reports.append(report)
                log(f"{label}: done in {report.duration_s}s, ok={verdict(report)}")
                if report.failure:
                    log(f"{label}: failed: {report.failure[-600:]}")

    print()
    print(table(reports))
    print()
    print(passes(reports))
    ok = all(verdict(r) for r in reports)
    broken = any(not r.failure and not verdict(r) for r in reports)
    failed_runs = sum(1 for r in reports if r.failure)
    outcome = "OK" if ok else ("GUARANTEE BROKEN" if broken else f"{failed_runs} RUN(S) FAILED")
    print(
        f"\nresult: {outcome}\n"
        "  exactly-once is judged on committed transactions; 'aborted shown': records of "
        "aborted transactions\n  that Tansu returns to read_committed readers; 'in output': "
        "mid-commit kills made once output\n  of an open commit interval was in the log; "
        "'restores hit': restore kills that landed before restore_done"
    )
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            json.dumps(
                {
                    "command": " ".join(
                        [
                            Path(sys.executable).name,
                            "-m",
                            "tests.reliability.soak",
                            *(argv if argv is not None else sys.argv[1:]),
                        ]
                    ),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
                    "duration_s": round(time.time() - started, 1),
                    "machine": {
                        "platform": platform.platform(),
                        "cpus": os.cpu_count(),
                        "python": platform.python_version(),
                    },
                    "parameters": vars(args),
                    "kill_plan": plan,
                    "kill_kinds": list(KILL_KINDS),
                    "ok": ok,
                    "passes": passes(reports).splitlines(),
                    "reports": [dict(r.as_dict(), ok=verdict(r)) for r in reports],
                },
                indent=1,
                default=str,
            )
        )
        print(f"wrote {out}")
    if not args.keep and not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
