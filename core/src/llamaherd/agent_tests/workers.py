"""Worker processes for ``al test -n N``.

A case's own Python work (its session, the fenced store's writes, the report of what it did)
holds the interpreter lock: threads would share one core between the cases and overlap only
their sandboxes' waits. Forked workers use every core.

The workers are forked once the project is loaded and the modules a run needs are imported,
while this process has no other thread. Each takes one job at a time over its pipe (the job's
index: the jobs are the parent's, inherited) and answers with its result, pickled. A worker
that dies mid-job (a segfault, the OOM killer) leaves that job ``lost`` and another is forked
for the jobs left; one that died between two jobs is replaced before its next.

Ctrl-C in a terminal reaches the whole process group: the workers ignore it and the parent
sends each SIGTERM, which raises ``KeyboardInterrupt`` in the job going on (a case ends its
run and sandbox on it), then waits for them.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Generic, TypeVar

Job = TypeVar("Job")
Result = TypeVar("Result")

STOP_TIMEOUT = 30.0  # seconds a worker has to end its run after SIGTERM


def run_forked(
    jobs: Sequence[Job],
    work: Callable[[Job], Result],
    workers: int,
    lost: Callable[[Job, str], Result],
    on_result: Callable[[Result], None],
) -> list[Result]:
    """``work(job)`` for every job, in up to ``workers`` forked processes; the results in the
    jobs' order, each handed to ``on_result`` as it comes."""
    pool = _Pool(jobs, work)
    try:
        pool.start(min(workers, len(jobs)))
        return pool.run(lost, on_result)
    except BaseException:
        pool.stop()
        raise
    finally:
        pool.close()


class _Worker:
    def __init__(self, process: BaseProcess, pipe: Connection):
        self.process, self.pipe = process, pipe
        self.job: int | None = None  # the index of the job it is doing


class _Pool(Generic[Job, Result]):
    def __init__(self, jobs: Sequence[Job], work: Callable[[Job], Result]):
        self.jobs, self.work = jobs, work
        self.context = multiprocessing.get_context("fork")
        self.next: Iterator[int] = iter(range(len(jobs)))
        self.workers: list[_Worker] = []

    def start(self, size: int) -> None:
        # What is here now stays out of the collector's sight: its passes in the workers
        # would write to every object and copy each page they share with this process.
        gc.freeze()
        for _ in range(size):
            self.workers.append(self._fork())

    def run(
        self, lost: Callable[[Job, str], Result], on_result: Callable[[Result], None]
    ) -> list[Result]:
        results: dict[int, Result] = {}
        for worker in list(self.workers):
            self._hand_out(worker)
        while busy := {w.pipe: w for w in self.workers if w.job is not None}:
            for pipe in wait(list(busy)):
                worker = busy[pipe]
                index, worker.job = worker.job, None
                assert index is not None
                try:
                    results[index] = pipe.recv()
                except EOFError:
                    results[index] = lost(self.jobs[index], _death(worker.process))
                    worker = self._replace(worker)
                on_result(results[index])
                self._hand_out(worker)
        return [results[index] for index in range(len(self.jobs))]

    def _fork(self) -> _Worker:
        mine, theirs = self.context.Pipe()
        process = self.context.Process(target=_serve, args=(theirs, self.jobs, self.work))
        process.daemon = True
        process.start()
        theirs.close()
        return _Worker(process, mine)

    def _replace(self, dead: _Worker) -> _Worker:
        dead.process.join()
        dead.pipe.close()
        self.workers.remove(dead)
        worker = self._fork()
        self.workers.append(worker)
        return worker

    def _hand_out(self, worker: _Worker) -> None:
        job = next(self.next, None)  # None: no job left, the worker exits
        try:
            worker.pipe.send(job)
        except (BrokenPipeError, ConnectionResetError):  # it died between two jobs
            if job is None:
                return
            worker = self._replace(worker)
            worker.pipe.send(job)
        worker.job = job

    def stop(self) -> None:
        """Interrupted: each worker ends the run it is doing, then exits."""
        for worker in self.workers:
            if worker.process.is_alive():
                os.kill(worker.process.pid or 0, signal.SIGTERM)
        for worker in self.workers:
            worker.process.join(STOP_TIMEOUT)
            if worker.process.is_alive():
                worker.process.kill()

    def close(self) -> None:
        for worker in self.workers:
            worker.process.join()
            worker.pipe.close()


def _serve(pipe: Connection, jobs: Sequence[Job], work: Callable[[Job], Result]) -> None:
    """A worker: jobs until there are none left, or SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        while (index := pipe.recv()) is not None:
            pipe.send(work(jobs[index]))
    except (KeyboardInterrupt, EOFError, BrokenPipeError):
        pass  # interrupted, or the parent is gone: the job cleaned up after itself


def _death(process: BaseProcess) -> str:
    process.join()
    code = process.exitcode or 0
    if code < 0:
        return f"its worker process was killed by {signal.Signals(-code).name}"
    return f"its worker process exited {code} without a result"
