"""An OTLP/HTTP receiver that drops what it gets: the far end of a traced benchmark server.

python bench/otlp_sink.py     # prints its port, then answers every POST with 200
"""

from __future__ import annotations

import http.server


class _Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
