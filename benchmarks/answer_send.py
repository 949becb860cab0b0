"""What the lingering close's wrapper of an answer's `send` costs a request that has it, in process.

    PYTHONPATH=. .venv/bin/python benchmarks/answer_send.py --rounds 10

A Send's answer (its start and one body of 140 bytes) through uvicorn's httptools
RequestResponseCycle.send, the cycle made as uvicorn makes one for a request whose body came
with its head, once given to the app as uvicorn's own `send` and once behind
app.api.http_timeouts' `say_close_when_answered_early`, as every request's was before the
wrapper was kept to requests whose body is still to come. Alternated in rounds under uvloop;
the process's CPU an answer, the cycle's making and a garbage collection at each round's end
(the wrapper's closure makes each cycle a reference cycle, which only the collector frees)
counted in. A transport that drops its writes: the socket's cost is not the question.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import statistics
import time

import uvloop
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from app.api.http_timeouts import say_close_when_answered_early

BODY = b'{"base_offset":1,"record_count":10,"partition":0}' * 3
START = {"type": "http.response.start", "status": 200,
         "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(BODY))]}
END = {"type": "http.response.body", "body": BODY}


class DroppingTransport(asyncio.Transport):
    def write(self, data: object) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def answers(n: int, wrapped: bool) -> float:
    """CPU µs an answer over `n` answers, each on a cycle of its own."""
    transport = DroppingTransport()
    flow = FlowControl(transport)
    log = logging.getLogger("answer_send")
    gc.collect()
    started = time.process_time()
    for _ in range(n):
        cycle = RequestResponseCycle(
            scope={"type": "http", "method": "POST", "http_version": "1.1"}, transport=transport,  # type: ignore[typeddict-item]
            flow=flow, logger=log, access_logger=log, access_log=False, default_headers=[],
            message_event=asyncio.Event(), expect_100_continue=False, keep_alive=True, on_response=lambda: None)
        cycle.more_body = False  # the body came with its head
        if wrapped:
            say_close_when_answered_early(cycle)
        send = cycle.send
        await send(START)  # type: ignore[arg-type]
        await send(END)  # type: ignore[arg-type]
    del cycle, send
    gc.collect()
    return (time.process_time() - started) / n * 1e6


async def main_async(rounds: int, answers_a_round: int) -> None:
    took: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for wrapped in (False, True):
            took[wrapped].append(await answers(answers_a_round, wrapped))
    print("| send the app is given | CPU µs an answer, median | range over the rounds |\n| --- | ---: | ---: |")
    for wrapped, name in ((False, "uvicorn's own"), (True, "behind the lingering close's wrapper")):
        print(f"| {name} | {statistics.median(took[wrapped]):.2f} | {min(took[wrapped]):.2f}-{max(took[wrapped]):.2f} |")
    differences = [w - o for o, w in zip(took[False], took[True])]
    print(f"\nwrapped - own, a round's pair: median {statistics.median(differences):.2f} µs an answer, "
          f"range {min(differences):.2f}-{max(differences):.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--answers", type=int, default=20_000, help="a round's answers of each kind")
    args = parser.parse_args(argv)
    uvloop.run(main_async(args.rounds, args.answers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
