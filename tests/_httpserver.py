"""A throw-away HTTP server on 127.0.0.1 for download tests.

``serve({"/a.zip": Route(body)})`` yields the base URL of a server thread that answers each
path with its route: the body in full, a truncated body under the full ``Content-Length``
(the connection closes early), or an error status.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Route:
    """What the server sends for one path."""

    body: bytes = b""
    status: int = 200
    truncate: bool = False


@contextlib.contextmanager
def serve(routes: dict[str, Route]) -> Iterator[str]:
    """Run a server for ``routes`` and yield its base URL (``http://127.0.0.1:<port>``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - name fixed by http.server
            route = routes.get(self.path, Route(status=404))
            if route.status != 200:
                self.send_error(route.status)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/zip")
            self.send_header("Content-Length", str(len(route.body)))
            self.end_headers()
            sent = route.body[: len(route.body) // 2] if route.truncate else route.body
            self.wfile.write(sent)
            self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            """Keep test output quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
