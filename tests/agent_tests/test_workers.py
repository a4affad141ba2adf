"""``run_forked``, the worker processes of ``al test -n N``: every job done once, the results
in the jobs' order, and a worker that dies mid-job costs that job alone."""

from __future__ import annotations

import os
import signal

from llamaherd.agent_tests.workers import run_forked


def _lost(job: int, why: str) -> str:
    return f"job {job}: {why}"


def test_results_come_in_the_jobs_order_each_from_a_worker_process():
    seen: list[tuple[int, int]] = []
    results = run_forked(
        list(range(12)), lambda n: (n, os.getpid()), 3, _lost, lambda r: seen.append(r)
    )
    assert [n for n, _ in results] == list(range(12))
    workers = {pid for _, pid in results}
    assert os.getpid() not in workers and 1 < len(workers) <= 3
    assert sorted(seen) == sorted(results), "each result handed on as it came"


def test_a_worker_killed_mid_job_loses_that_job_and_another_takes_the_rest():
    def work(n: int) -> int:
        if n == 2:
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer does
        if n == 5:
            os._exit(3)
        return n * n

    results = run_forked(list(range(8)), work, 2, _lost, lambda r: None)
    assert results == [
        0,
        1,
        "job 2: its worker process was killed by SIGKILL",
        9,
        16,
        "job 5: its worker process exited 3 without a result",
        36,
        49,
    ]


def test_a_result_that_cannot_be_sent_is_lost_not_hung():
    results = run_forked([1, 2], lambda n: (lambda: n) if n == 2 else n, 2, _lost, lambda r: None)
    assert results[0] == 1 and results[1].startswith("job 2: its worker process exited")


def test_a_worker_killed_between_two_jobs_is_replaced_before_its_next():
    from llamaherd.processes import pid_alive
    from llamaherd.testing import wait_until

    killed: list[int] = []

    def kill_the_first(result: tuple[int, int]) -> None:
        if not killed:  # the worker that sent this result waits for its next job
            killed.append(result[1])
            os.kill(result[1], signal.SIGKILL)
            wait_until(lambda: not pid_alive(killed[0]), what="the worker's death")

    results = run_forked(list(range(6)), lambda n: (n, os.getpid()), 2, _lost, kill_the_first)
    assert [n for n, _ in results] == list(range(6)), "every job done, none lost"
    assert [pid for _, pid in results].count(killed[0]) == 1, "no job after its death"
