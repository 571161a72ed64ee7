"""`MainThreadExecutor`: work submitted from other threads runs on the main thread, errors reach the caller."""

from __future__ import annotations

import threading

import pytest

from bertzoo.serve.main_thread import MainThreadExecutor


def test_work_from_another_thread_runs_on_the_main_thread_and_errors_reach_the_caller():
    executor = MainThreadExecutor()
    seen: dict[str, object] = {}

    def client() -> None:
        seen["thread"] = executor.submit(lambda: threading.current_thread().name).result(timeout=10)
        seen["sum"] = executor.submit(sum, [1, 2, 3]).result(timeout=10)
        with pytest.raises(ZeroDivisionError):
            executor.submit(lambda: 1 / 0).result(timeout=10)
        seen["done"] = True

    worker = threading.Thread(target=client)
    worker.start()
    executor.run_until(lambda: not worker.is_alive())
    worker.join()
    assert seen == {"thread": threading.main_thread().name, "sum": 6, "done": True}
    executor.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        executor.submit(sum, [1])


def test_run_until_refuses_other_threads():
    errors = []

    def other() -> None:
        try:
            MainThreadExecutor().run_until(lambda: True)
        except RuntimeError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors and "main thread" in errors[0]
