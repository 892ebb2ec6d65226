"""A static file server on 127.0.0.1 for the browser tests, with the headers that make a page
cross-origin isolated (COOP/COEP), which onnxruntime-web's threaded WASM build needs for
SharedArrayBuffer. Serves this folder (index.html, node_modules/onnxruntime-web/dist) at / and
one models folder at /models/."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent


class _Handler(http.server.SimpleHTTPRequestHandler):
    models: Path = HERE

    def translate_path(self, path: str) -> str:
        if path.startswith("/models/"):
            return str(self.models / path[len("/models/"):].split("?")[0])
        return super().translate_path(path)

    def end_headers(self) -> None:
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, *args) -> None:  # quiet
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def serve(models: Path) -> tuple[_Server, str]:
    """Start serving in a thread; returns the server (call .shutdown()) and its base URL."""
    handler = type("Handler", (_Handler,), {"models": Path(models)})
    server = _Server(("127.0.0.1", 0), functools.partial(handler, directory=str(HERE)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
