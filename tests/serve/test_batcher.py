"""The dynamic batcher in process, with a fake model call: a lone client's request never waits, however long
`max_wait_s`; under concurrent load a group waits for the requests the load had open and runs them in one call;
`max_batch` caps a group; a bad input fails its own request only."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable
from typing import Any

from bertzoo.serve.batcher import Batcher


class Model:
    """A fake model call: records each call's inputs, takes `seconds`, refuses the input "bad"."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.calls: list[list[Any]] = []
        self.seconds = seconds

    def __call__(self, kind: str, key: Hashable, items: list[Any]) -> list[Any]:
        self.calls.append(list(items))
        if "bad" in items:
            raise ValueError("bad input")
        time.sleep(self.seconds)
        return [f"{kind}:{x}" for x in items]


def run(coroutine_fn, *args, **kwargs):
    return asyncio.run(coroutine_fn(*args, **kwargs))


async def clients(batcher: Batcher, n: int, rounds: int, gap_s: float = 0.0) -> list[list[Any]]:
    """`n` clients, each sending `rounds` one-input requests back to back; client k sends its next request
    `k * gap_s` after an answer (turnarounds that differ, as real clients' do)."""

    async def client(k: int) -> list[Any]:
        got = []
        for r in range(rounds):
            got += await batcher.submit("embed", None, [f"{k}.{r}"])
            await asyncio.sleep(k * gap_s)
        return got

    return await asyncio.gather(*(client(k) for k in range(n)))


async def serving(model: Model, n: int, rounds: int, gap_s: float, **kwargs) -> tuple[list, float]:
    batcher = Batcher(model, **kwargs)
    batcher.start()
    try:
        began = time.perf_counter()
        answers = await clients(batcher, n, rounds, gap_s)
        return answers, time.perf_counter() - began
    finally:
        await batcher.stop()


def test_a_lone_clients_requests_never_wait():
    model = Model()
    answers, took = run(serving, model, 1, 5, 0.0, max_wait_s=2.0)
    assert answers == [[f"embed:0.{r}" for r in range(5)]]
    assert took < 1.0  # 5 requests; waiting for company would have taken 10 s
    assert [len(c) for c in model.calls] == [1] * 5


def test_under_load_groups_wait_for_the_requests_the_load_had_open():
    # 6 clients whose next requests come 0-10 ms after their answers: without a wait the groups split up; with
    # one, after the first call (which had no history) every group holds all 6.
    model = Model(seconds=0.01)
    answers, _ = run(serving, model, 6, 8, 0.002, max_wait_s=0.2)
    assert sorted(a for got in answers for a in got) == sorted(f"embed:{k}.{r}" for k in range(6) for r in range(8))
    assert [len(c) for c in model.calls[1:]].count(6) >= len(model.calls) - 3
    assert sum(len(c) for c in model.calls) == 48 and len(model.calls) <= 11

    no_wait = Model(seconds=0.01)
    run(serving, no_wait, 6, 8, 0.002, max_wait_s=0.0)
    assert len(no_wait.calls) >= 2 * len(model.calls)


def test_max_batch_caps_a_group():
    model = Model(seconds=0.01)
    run(serving, model, 10, 3, 0.0, max_batch=4, max_wait_s=0.2)
    assert max(len(c) for c in model.calls) == 4
    assert sum(len(c) for c in model.calls) == 30


def test_a_bad_input_fails_its_own_request_only():
    model = Model(seconds=0.05)

    async def go():
        batcher = Batcher(model, max_wait_s=0.5)
        batcher.start()
        try:
            await clients(batcher, 4, 1)  # the load: 4 open at once
            return await asyncio.gather(
                *(batcher.submit("predict", None, [x]) for x in ("a", "bad", "c", "d")), return_exceptions=True
            )
        finally:
            await batcher.stop()

    a, bad, c, d = run(go)
    assert (a, c, d) == (["predict:a"], ["predict:c"], ["predict:d"])
    assert isinstance(bad, ValueError)
    assert sorted(model.calls[-5]) == ["a", "bad", "c", "d"]  # grouped, then run again one by one
    assert sorted(map(tuple, model.calls[-4:])) == [("a",), ("bad",), ("c",), ("d",)]
