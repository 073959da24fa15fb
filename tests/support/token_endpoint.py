"""A small OAuth 2 token endpoint (http.server in a thread) for the client credentials grant.

It checks the HTTP Basic client credentials and answers as an OAuth server does: a JSON
``access_token`` (an unsigned JWT naming ``subject``, which Kafka's unsecured validator
accepts) with ``expires_in``, or RFC 6749's ``invalid_client`` error with status 401.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["TokenEndpoint", "unsecured_jwt"]


def unsecured_jwt(claims: dict[str, Any]) -> str:
    """A JWT with ``alg: none`` and no signature."""

    def part(document: dict[str, Any]) -> str:
        raw = json.dumps(document, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part(claims)}."


class TokenEndpoint:
    """Serves ``url``; records each request in ``requests``.

    ``status`` forces an answer (a 503, say); ``lifetime`` is each token's lifetime in
    seconds; ``clock`` gives the tokens' ``iat`` (seconds since the epoch). Tokens are
    numbered: the n-th names ``subject`` (or ``subject-n`` with ``number_subjects``).
    """

    def __init__(
        self,
        client_id: str,
        client_secret: str,
        *,
        subject: str = "svc",
        number_subjects: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.subject = subject
        self.number_subjects = number_subjects
        self.clock = clock
        self.requests: list[dict[str, Any]] = []
        self.status: int | None = None
        self.lifetime = 3600
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode()
                request = {
                    "path": self.path,
                    "authorization": self.headers["Authorization"],
                    "content_type": self.headers["Content-Type"],
                    "form": dict(urllib.parse.parse_qsl(body)),
                }
                endpoint.requests.append(request)
                expected = "Basic " + base64.b64encode(
                    f"{endpoint.client_id}:{endpoint.client_secret}".encode()
                ).decode()
                if endpoint.status is not None:
                    self._answer(endpoint.status, {"error": "temporarily_unavailable"})
                elif request["authorization"] != expected:
                    self._answer(
                        401,
                        {"error": "invalid_client", "error_description": "bad credentials"},
                    )
                else:
                    now = endpoint.clock()
                    subject = endpoint.subject
                    if endpoint.number_subjects:
                        subject += f"-{len(endpoint.requests)}"
                    token = unsecured_jwt(
                        {"sub": subject, "iat": now, "exp": now + endpoint.lifetime}
                    )
                    self._answer(
                        200,
                        {
                            "access_token": token,
                            "token_type": "Bearer",
                            "expires_in": endpoint.lifetime,
                        },
                    )

            def _answer(self, status: int, document: dict[str, Any]) -> None:
                data = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/oauth2/token"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving; later requests are refused."""
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> TokenEndpoint:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
