"""A blocking script killed while its turn waits for an approval, then run again.

Usage::

    python bench/rerun.py [N] [--dir DIR]

Each of N rounds runs a script (``agentlib_sync``, ``AGENTLIB_STORE=sqlite:///...``) whose
turn blocks on an approval, kills it with SIGKILL once it has printed the ``Blocked``
record, then runs a second script on the same file that reads the turn, answers the
approval and waits for the turn's end. The dead script's lease (``lease_seconds=30``) is
still unexpired: the rerun takes it at once, as its process is gone.

Prints one JSON line per figure, the median of the rounds, in seconds from the start of the
rerun's process (its interpreter's start-up and imports included):

- ``rerun_blocked``: the rerun reads the turn, still ``Blocked`` on its approval.
- ``rerun_completed``: the approval is answered and the turn has completed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

_AGENT = """
import agentlib_sync as agents

@agents.tool(requires_approval=True)
def refund(order: str) -> str:
    '''Refund an order.'''
    return f"refunded {order}"

agent = agents.Agent(
    name="support",
    model=agents.ScriptedModel([
        agents.ModelReply(
            tool_calls=[agents.ToolCallRequest(name="refund", arguments={"order": "A-17"})]
        ),
        "Done.",
    ]),
    tools=[refund],
)
"""

_FIRST = (
    _AGENT
    + """
import threading
session = agent.start_session()
record = session.run("Refund order A-17.")
print(session.id, record.turn_id, type(record).__name__, flush=True)
threading.Event().wait()  # until killed
"""
)

_RERUN = (
    _AGENT
    + """
import sys, time
turn = agent.session(sys.argv[1]).turn(sys.argv[2])
blocked = turn.get()
assert type(blocked).__name__ == "Blocked", blocked
seen = time.time()
turn.answer(blocked.callbacks[0].id, agents.AllowApproval())
record = turn.result(after=blocked)
assert record.output == "Done.", record
print(seen, time.time(), flush=True)
"""
)


def one_round(directory: str, number: int) -> tuple[float, float]:
    env = {**os.environ, "AGENTLIB_STORE": f"sqlite:///{directory}/rerun-{number}.db"}
    first = subprocess.Popen(
        [sys.executable, "-c", _FIRST], env=env, stdout=subprocess.PIPE, text=True
    )
    assert first.stdout is not None
    session_id, turn_id, kind = first.stdout.readline().split()
    assert kind == "Blocked", kind
    first.send_signal(signal.SIGKILL)
    first.wait()
    started = time.time()
    rerun = subprocess.run(
        [sys.executable, "-c", _RERUN, session_id, turn_id],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    blocked, completed = map(float, rerun.stdout.split())
    return blocked - started, completed - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=5)
    parser.add_argument("--dir", default=None)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=options.dir) as directory:
        rounds = [one_round(directory, number) for number in range(options.n)]
    base = {"framework": "agentlib", "python": platform.python_version(), "n": options.n}
    for index, mode in enumerate(("rerun_blocked", "rerun_completed")):
        figure = statistics.median(round_[index] for round_ in rounds)
        print(json.dumps({**base, "mode": mode, "seconds_median": round(figure, 3)}))


if __name__ == "__main__":
    main()
