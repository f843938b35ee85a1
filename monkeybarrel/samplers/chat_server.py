"""A small OpenAI-compatible chat server around any monkeybarrel sampler (default: the embedded model).

It serves real model outputs for the ``openai`` backend's fast tests and for local development
without vLLM; in production, point the ``openai`` backend at ``vllm serve`` (or any compatible server).

    python -m monkeybarrel.samplers.chat_server --model smollm2-135m-instruct --port 8000

Endpoints: ``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions`` with ``model``,
``messages``, ``n``, ``temperature``, ``top_p``, ``max_tokens`` (or ``max_completion_tokens``) and
``seed``. Requests that arrive together with the same sampling settings are decoded in one batch
(the embedded sampler batches across requests). ``max_n`` makes it refuse ``n`` above a limit with
HTTP 400, like servers without ``n`` support; ``inject`` queues faults (HTTP statuses such as 429 or
500, or ``"stall:SECONDS"``, which drops the connection after waiting) to exercise client retries.
"""

from __future__ import annotations

import argparse
import json
import queue
import secrets
import threading
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..core.config import GeneratorSpec
from ..core.plugins import build_plugin
from ..core.records import Candidate, Problem
from .base import SAMPLERS, SampleRequest, Sampler


class RequestError(ValueError):
    """A bad request: answered with HTTP ``status`` and an OpenAI-style error naming ``param``."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param, self.status = param, status


@dataclass
class _Job:
    request: SampleRequest
    settings: tuple[float, float, int]  # temperature, top_p, max_tokens
    done: threading.Event = field(default_factory=threading.Event)
    result: list[Candidate] | None = None


def parse_chat_request(body: Any, max_n: int | None) -> tuple[list[dict[str, str]], int, tuple[float, float, int], int]:
    """Validate a chat-completions body: ``(messages, n, (temperature, top_p, max_tokens), seed)``."""
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        raise RequestError("messages must be a non-empty list of {role, content} strings", "messages")

    def number(name: str, default: float, low: float, high: float) -> float:
        value = body.get(name)
        value = default if value is None else value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise RequestError(f"{name} must be a number in [{low}, {high}], got {value!r}", name)
        return float(value)

    n = int(number("n", 1, 1, 1 << 16))
    if max_n is not None and n > max_n:
        raise RequestError(f"n must be at most {max_n}, got {n}", "n")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = int(number("max_tokens", 256 if max_tokens is None else max_tokens, 1, 1 << 20))
    seed = body.get("seed")
    if seed is None:
        seed = secrets.randbits(63)
    elif isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise RequestError(f"seed must be a non-negative integer, got {seed!r}", "seed")
    settings = (number("temperature", 1.0, 0.0, 2.0), number("top_p", 1.0, 1e-9, 1.0), max_tokens)
    return [{"role": m["role"], "content": m["content"]} for m in messages], n, settings, seed


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):  # a client that gave up
            super().handle_error(request, client_address)


class ChatServer:
    """OpenAI-compatible ``/v1/chat/completions`` over a sampler, on a local port.

    Args:
        model: the model the sampler loads; also the served model name unless ``served_model_name``.
        backend: the sampler backend serving it (``embedded`` by default).
        host, port: where to listen (port 0 picks a free one; see ``url``).
        max_n: refuse requests with ``n`` above this (HTTP 400, ``param: "n"``); None = no limit.
        batch_window_s: how long the batcher waits for more requests before decoding (seconds).
        served_model_name: the name clients must send as ``model`` (HTTP 404 otherwise).
        sampler_options: options of the sampler backend (e.g. ``{"num_threads": 1}``).

    Use as a context manager, or call ``start()`` / ``stop()``.
    """

    def __init__(self, model: str = "smollm2-135m-instruct", backend: str = "embedded", host: str = "127.0.0.1",
                 port: int = 0, max_n: int | None = None, batch_window_s: float = 0.02,
                 served_model_name: str | None = None, sampler_options: dict[str, Any] | None = None) -> None:
        self.model_name = served_model_name or model
        self.max_n, self.batch_window_s = max_n, batch_window_s
        self.sampler: Sampler = build_plugin(SAMPLERS, backend, "server", spec=GeneratorSpec(id="server", model=model),
                                             **(sampler_options or {}))
        self.status_counts: Counter[int] = Counter()
        """HTTP statuses answered so far (injected faults included)."""
        self.batches: list[int] = []
        """Requests decoded together, per batch."""
        self._faults: deque[int | str] = deque()
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._httpd = _QuietServer((host, port), self._handler_class())
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        """The OpenAI base URL, e.g. ``http://127.0.0.1:40123/v1``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def inject(self, *faults: int | str) -> None:
        """Answer the next requests with these faults, in order: an HTTP status, or ``"stall:SECONDS"``."""
        with self._lock:
            self._faults.extend(faults)

    def start(self) -> "ChatServer":
        load = getattr(self.sampler, "load", None)
        if load is not None:
            load()  # before listening, so the first request does not time out on model loading
        for target in (self._httpd.serve_forever, self._batch_loop):
            thread = threading.Thread(target=target, daemon=True, name=f"chat-server-{target.__name__}")
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout=30)
        self.sampler.close()

    def __enter__(self) -> "ChatServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- batching --------------------------------------------------------------------------
    def _batch_loop(self) -> None:
        """Take the queued jobs, group them by sampling settings and decode each group together."""
        while True:
            first = self._jobs.get()
            if first is None:
                return
            time.sleep(self.batch_window_s)
            jobs, stopping = [first], False
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stopping = True
                    break
                jobs.append(job)
            self.batches.append(len(jobs))
            groups: dict[tuple[float, float, int], list[_Job]] = {}
            for job in jobs:
                groups.setdefault(job.settings, []).append(job)
            for (temperature, top_p, max_tokens), group in groups.items():
                self._decode(group, temperature, top_p, max_tokens)
            if stopping:
                return

    def _decode(self, jobs: list[_Job], temperature: float, top_p: float, max_tokens: int) -> None:
        by_id = {job.request.problem.problem_id: job for job in jobs}
        self.sampler.spec = self.sampler.spec.model_copy(
            update={"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens})
        try:
            for candidates in self.sampler.sample([job.request for job in jobs]):
                job = by_id[candidates[0].problem_id]
                job.result = candidates
                job.done.set()
        except Exception as exc:  # the sampler broke down: answer every waiting request with the error
            for job in jobs:
                if not job.done.is_set():
                    job.result = self.sampler.failed(job.request, exc, 0.0)
                    job.done.set()

    def complete(self, body: Any) -> dict[str, Any]:
        """Answer one chat-completions body (blocks until its samples are decoded)."""
        messages, n, settings, seed = parse_chat_request(body, self.max_n)
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise RequestError(f"The model `{model}` does not exist.", "model", status=404)
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        problem = Problem(request_id, "chat", messages=tuple(messages))
        job = _Job(SampleRequest(problem, tuple(range(n)), seed), settings)
        self._jobs.put(job)
        job.done.wait()
        candidates = job.result or []
        errors = [c.error for c in candidates if c.finish_reason == "error"]
        if errors:
            raise RequestError(f"generation failed: {errors[0]}", status=500)
        completion_tokens = sum(c.completion_tokens for c in candidates)
        prompt_tokens = candidates[0].prompt_tokens if candidates else 0
        return {
            "id": request_id, "object": "chat.completion", "created": int(time.time()), "model": self.model_name,
            "choices": [{"index": c.sample_index, "message": {"role": "assistant", "content": c.text},
                         "finish_reason": c.finish_reason} for c in candidates],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

    def _next_fault(self) -> int | str | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    # ---- HTTP ------------------------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet: tests and benchmarks
                pass

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                with server._lock:
                    server.status_counts[status] += 1
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str, param: str | None = None,
                       headers: dict[str, str] | None = None) -> None:
                kind = "invalid_request_error" if status < 500 else "server_error"
                self._send(status, {"error": {"message": message, "type": kind, "param": param, "code": status}},
                           headers)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/health":
                    self._send(200, {"status": "ok"})
                elif self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [
                        {"id": server.model_name, "object": "model", "owned_by": "monkeybarrel"}]})
                else:
                    self._error(404, f"no route {self.path}")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._error(404, f"no route {self.path}")
                    return
                fault = server._next_fault()
                if isinstance(fault, str) and fault.startswith("stall:"):
                    time.sleep(float(fault.split(":", 1)[1]))
                    self.close_connection = True
                    with server._lock:
                        server.status_counts[0] += 1  # 0 = dropped without an answer
                    return
                if isinstance(fault, int):
                    self._error(fault, f"injected fault {fault}", headers={"Retry-After": "0"} if fault == 429 else None)
                    return
                try:
                    self._send(200, server.complete(json.loads(raw or b"null")))
                except json.JSONDecodeError as exc:
                    self._error(400, f"the body is not valid JSON: {exc}")
                except RequestError as exc:
                    self._error(exc.status, str(exc), exc.param)

        return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--backend", default="embedded")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-n", type=int, default=None)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--num-threads", type=int, default=None, help="torch CPU threads (embedded backend)")
    args = parser.parse_args(argv)
    options = {"num_threads": args.num_threads} if args.num_threads else {}
    server = ChatServer(args.model, args.backend, args.host, args.port, args.max_n,
                        served_model_name=args.served_model_name, sampler_options=options).start()
    print(f"serving {server.model_name} at {server.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
