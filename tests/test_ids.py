"""The ids agentlib makes (sessions, turns, entries): random version 4 UUIDs as 32 hex digits,
distinct across threads that make them at once and across a fork."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import uuid

import agentlib_sync as agents
from agentlib._data._history import new_id


def test_ids_are_version_4_uuids_in_hex() -> None:
    ids = [new_id() for _ in range(1000)]  # over several reads of the random source

    for made in ids:
        parsed = uuid.UUID(hex=made)
        assert parsed.hex == made
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
    assert len(set(ids)) == len(ids)


def test_sessions_started_from_many_threads_at_once_get_distinct_ids() -> None:
    agent = agents.Agent(name="echo", model=agents.ScriptedModel(["hi"] * 800))
    ids: list[str] = []
    start = threading.Barrier(8)

    def starter() -> None:
        start.wait()
        made = [agent.start_session() for _ in range(100)]
        ids.extend(session.id for session in made)

    threads = [threading.Thread(target=starter) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert len(ids) == 800
    assert len(set(ids)) == 800


def test_a_forked_child_makes_none_of_the_ids_its_parent_makes() -> None:
    # The parent has ids made ahead when it forks: the child must make its own.
    script = """
        import os
        from agentlib._data._history import new_id

        new_id()  # the parent now holds ids made ahead
        read, write = os.pipe()
        child = os.fork()
        if child == 0:
            os.write(write, " ".join(new_id() for _ in range(300)).encode())
            os._exit(0)
        os.close(write)
        os.waitpid(child, 0)
        with os.fdopen(read) as pipe:
            theirs = set(pipe.read().split())
        ours = {new_id() for _ in range(300)}
        print(len(theirs), len(ours), len(theirs & ours))
        """
    env = {key: value for key, value in os.environ.items() if key != "AGENTLIB_STORE"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["300", "300", "0"]
