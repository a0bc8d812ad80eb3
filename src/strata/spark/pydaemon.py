"""PySpark's Python daemon, with workers that exit quietly once their JVM has hung up.

The embedded session runs its Python workers through this module
(``spark.python.daemon.module``, :func:`strata.spark.session.build_session`).
It is PySpark's own daemon (``pyspark.daemon.manager``), changed in one way.

Python workers talk to their JVM over a Unix domain socket (see
``build_session``). When the JVM shuts down, it closes the sockets of idle
reused workers. Such a worker reads end-of-file where its next task should
be, writes an error report, and fails to flush it: a write to a closed Unix
socket fails at once with ``EPIPE``. Over TCP the write succeeds and the
worker exits silently. PySpark's daemon prints that ``BrokenPipeError``'s
traceback, and in an embedded session it reaches the user's terminal
through the JVM's stderr, at the end of runs that did nothing wrong. Here a
worker whose socket is gone exits as PySpark does when reuse is off, with
nothing printed: its JVM has stopped listening, so nothing is lost.
"""

from __future__ import annotations

import os
import socket

from pyspark import daemon

_serve = daemon.worker


def quiet_worker(sock: socket.socket, authenticated: bool) -> int:
    """``pyspark.daemon.worker``, with a hung-up JVM (``EPIPE``, ``ECONNRESET``) as a plain non-zero exit."""
    try:
        return _serve(sock, authenticated)
    except (BrokenPipeError, ConnectionResetError):
        return 1  # non-zero: the daemon's loop closes this worker instead of reusing it


def main() -> None:
    # a failed flush raises (rather than printing a report and carrying on), so quiet_worker sees it
    os.environ["PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE"] = "1"
    daemon.worker = quiet_worker  # manager() calls the module's global worker for every forked worker
    daemon.manager()


if __name__ == "__main__":
    main()
