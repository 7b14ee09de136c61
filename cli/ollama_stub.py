"""A stand-in for a local Ollama server (``POST /api/generate``), for tests and the demo.

No model can run here, so this small HTTP server on 127.0.0.1 answers the way Ollama does,
well or badly on purpose (``MODES``), and records every request it got so a test can see
what was really sent (the ``format`` schema, the image) or that nothing was.

    python -m cli.ollama_stub --port 11434 --mode good
    OLLAMA_URL=http://127.0.0.1:11434 python run.py

Also ``GET /_stub/requests`` (what it received) and ``POST /_stub/mode {"mode": ...}``.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
import time
import unicodedata
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

MODES = {
    "good": "two contextual checks, with evidence",
    "empty": "no contextual check (nothing unusual)",
    "slow": "the good answer after --delay seconds",
    "trickle": "the good answer, one byte every --interval seconds",
    "hang": "reads the request, never answers",
    "http_500": "HTTP 500 with an Ollama error body",
    "non_json": "the model's answer is prose, not JSON",
    "bad_body": "HTTP 200 whose body is HTML, not Ollama's JSON",
    "schema": "JSON that breaks the schema (label is a number, evidence missing)",
    "many": "five contextual checks (more than the default maximum of 3)",
    "repeat_declared": "repeats the checks already asked (read from the prompt), plus one",
}

GOOD_CHECKS = [
    {"label": "Vérifier que le nom du patient correspond au dossier ouvert",
     "evidence": "Le bandeau affiche « DUPONT Jean » mais l'onglet « DUPONT Jeanne »."},
    {"label": "Contrôler la date d'admission",
     "evidence": "La date d'admission affichée (01/01/1900) semble être une valeur par défaut."},
]
_DECLARED = re.compile(r"Vérifications déjà demandées[^\n]*\n((?:- [^\n]*\n?)*)")


@dataclass
class StubConfig:
    mode: str = "good"
    delay_s: float = 10.0
    interval_s: float = 0.3
    checks: list[dict[str, Any]] = field(default_factory=lambda: list(GOOD_CHECKS))


class OllamaStub:
    """The server; ``start()`` serves on a thread, ``url`` is where, ``requests`` what came."""

    def __init__(self, mode: str = "good", *, port: int = 0, delay_s: float = 10.0,
                 interval_s: float = 0.3) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} (one of {', '.join(MODES)})")
        self.config = StubConfig(mode, delay_s, interval_s)
        self.requests: list[dict[str, Any]] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def set(self, mode: str | None = None, **changes: Any) -> None:
        """Change how it answers from now on (mode, delay_s, interval_s, checks)."""
        with self._lock:
            if mode is not None:
                if mode not in MODES:
                    raise ValueError(f"unknown mode {mode!r}")
                self.config.mode = mode
            for name, value in changes.items():
                if name not in ("delay_s", "interval_s", "checks"):
                    raise ValueError(f"unknown setting {name!r}")
                setattr(self.config, name, value)

    def received(self) -> list[dict[str, Any]]:
        """The ``/api/generate`` request bodies received so far, oldest first."""
        with self._lock:
            return [r["body"] for r in self.requests if r["path"] == "/api/generate"]

    def record(self, path: str, body: Any) -> StubConfig:
        """Keep a request; the settings to answer it with (a copy: ``set`` may change them)."""
        with self._lock:
            self.requests.append({"path": path, "body": body, "at": time.time()})
            return StubConfig(self.config.mode, self.config.delay_s, self.config.interval_s,
                              list(self.config.checks))

    def start(self) -> OllamaStub:
        # A short poll interval: stop() returns within it (tests start one per case).
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                        name="ollama-stub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> OllamaStub:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def model_text(config: StubConfig, prompt: str) -> str:
    """What the 'model' answers in ``response`` for this mode."""
    mode = config.mode
    if mode == "non_json":
        return "Je pense que tout est correct, vous pouvez continuer."
    if mode == "schema":
        return json.dumps({"additional_checks": [{"label": 42}]})
    if mode == "empty":
        return json.dumps({"additional_checks": []})
    if mode == "many":
        checks = [{"label": f"Vérification contextuelle {i}", "evidence": f"indice {i} à l'écran"}
                  for i in range(1, 6)]
        return json.dumps({"additional_checks": checks}, ensure_ascii=False)
    if mode == "repeat_declared":
        found = _DECLARED.search(prompt)
        labels = [line[2:] for line in (found.group(1) if found else "").splitlines()
                  if line.startswith("- ")]
        # Repeated the way a model would: other case, no accents, trailing punctuation.
        repeats = [{"label": _plain(label).upper() + " !", "evidence": "déjà vu"}
                   for label in labels if label != "(aucune)"]
        return json.dumps({"additional_checks": [*repeats, GOOD_CHECKS[0]]},
                          ensure_ascii=False)
    return json.dumps({"additional_checks": config.checks}, ensure_ascii=False)


def _plain(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _handler_for(stub: OllamaStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "ollama-stub/1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: tests and the demo print what matters themselves

        def _send(self, status: int, body: bytes, content_type: str = "application/json",
                  interval_s: float = 0.0) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                if interval_s <= 0:
                    self.wfile.write(body)
                    return
                for i in range(len(body)):
                    if stub.stopping.wait(interval_s):
                        return
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up: that is what a timeout test wants

        def do_GET(self) -> None:
            if self.path == "/_stub/requests":
                with stub._lock:
                    data = json.dumps(stub.requests, ensure_ascii=False).encode()
                self._send(200, data)
            elif self.path == "/api/tags":
                self._send(200, json.dumps({"models": [{"name": "medgemma:4b"}]}).encode())
            else:
                self._send(404, b'{"error": "not found"}')

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length > 0 else b""
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
            if self.path == "/_stub/mode":
                try:
                    stub.set(**body)
                except (TypeError, ValueError) as exc:
                    self._send(400, json.dumps({"error": str(exc)}).encode())
                    return
                self._send(200, b'{"status": "ok"}')
                return
            config = stub.record(self.path, body)
            if self.path != "/api/generate":
                self._send(404, b'{"error": "not found"}')
                return
            self._generate(config, body if isinstance(body, dict) else {})

        def _generate(self, config: StubConfig, body: dict[str, Any]) -> None:
            if config.mode == "hang":
                stub.stopping.wait(600)
                return
            if config.mode == "slow" and stub.stopping.wait(config.delay_s):
                return
            if config.mode == "http_500":
                self._send(500, b'{"error": "model runner has unexpectedly stopped"}')
                return
            if config.mode == "bad_body":
                self._send(200, b"<html><body>502 Bad Gateway</body></html>", "text/html")
                return
            reply = {"model": body.get("model", ""), "created_at": "2026-05-05T10:00:00Z",
                     "response": model_text(config, str(body.get("prompt", ""))),
                     "done": True, "done_reason": "stop", "total_duration": 1_000_000,
                     "eval_count": 42}
            data = json.dumps(reply, ensure_ascii=False).encode()
            self._send(200, data, interval_s=config.interval_s
                       if config.mode == "trickle" else 0.0)

    return Handler


def build_parser() -> argparse.ArgumentParser:
    """``python -m cli.ollama_stub``'s options."""
    parser = argparse.ArgumentParser(prog="python -m cli.ollama_stub", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=11434, help="0: any free port")
    parser.add_argument("--mode", choices=sorted(MODES), default="good",
                        help="how it answers: good (default) well, the others badly on "
                             "purpose")
    parser.add_argument("--delay", type=float, default=10.0, help="seconds, mode slow")
    parser.add_argument("--interval", type=float, default=0.3, help="seconds, mode trickle")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stub = OllamaStub(args.mode, port=args.port, delay_s=args.delay, interval_s=args.interval)
    done = threading.Event()

    def _stop(_signum: int, _frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    stub.start()
    print(f"ollama stub on {stub.url} (mode {args.mode}: {MODES[args.mode]})", flush=True)
    done.wait()
    stub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
