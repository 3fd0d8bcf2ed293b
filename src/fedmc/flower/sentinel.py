"""A watch on the ServerApp's process: ``status.json`` says ``failed`` as soon as the process
that wrote ``running`` is gone without recording how its run ended (SIGKILL, the system out
of memory, a ``flwr stop`` that kills it outright).

The ServerApp starts the watch (:func:`watch`), a small process in a session of its own, with
a pipe whose write end only the ServerApp holds. The system closes that end when the
ServerApp's process ends, however it ends (a process left as a zombie included: its
descriptors are closed before anyone reaps it), and the watch, which was reading the pipe,
wakes. If ``status.json`` still says ``running`` under the run's key, it writes ``failed``
with the reason; a run that recorded its end (finished, stopped, failed) is left as it is.
Run as ``python -m fedmc.flower.sentinel STATUS KEY`` (the standard library and
:mod:`fedmc.run.folder` only: it starts in a few tens of milliseconds).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fedmc.run.folder import write_status


def watch(status: Path, key: str) -> subprocess.Popen[bytes]:
    """Start the watch of this process's run, whose ``status.json`` is ``status`` (module
    docstring). Close the returned process's ``stdin`` once the run's end is recorded."""
    return subprocess.Popen([sys.executable, "-m", "fedmc.flower.sentinel", str(status), key],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def settle(status: Path, key: str) -> bool:
    """After the ServerApp's process has ended: ``failed`` in ``status`` if it still says
    ``running`` under ``key``; whether it did."""
    try:
        left = json.loads(status.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(left, dict) or left.get("status") != "running" or left.get("key") != key:
        return False
    write_status(status, "failed", key=key, reason=(
        f"the ServerApp's process (pid {left.get('pid')}) ended without recording how the run "
        f"ended (killed, e.g. by SIGKILL or the system out of memory); fedmc federate resume "
        f"continues it from its last checkpoint"))
    return True


def main(argv: list[str]) -> None:
    status, key = Path(argv[0]), argv[1]
    sys.stdin.buffer.read()  # until the ServerApp's end of the pipe is closed
    settle(status, key)


if __name__ == "__main__":
    main(sys.argv[1:])
