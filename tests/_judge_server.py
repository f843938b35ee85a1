"""A judge server for tests: OpenAI-compatible ``POST /v1/chat/completions`` answering the embedded SmolLM2's
first-token top logprobs, in a process of its own on 127.0.0.1, so a test can start it late or see it crash.

    python tests/_judge_server.py --port PORT [--die-after N] [--fail-marker TEXT] [--abstain]

``--die-after N``: the process exits abruptly (``os._exit``) on its request N + 1, as a crashed server does.
``--fail-marker TEXT``: requests whose last message contains TEXT are answered HTTP 500.
``--abstain``: the top logprobs hold no Yes and no No (the judge abstains).
``POST /control`` with ``{"fail_marker": …, "abstain": …}`` changes the last two while it runs.
``GET /v1/models`` answers once the model is loaded; ``GET /stats`` counts the chat requests received.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from monkeybarrel.verifiers.llm_judge import LLMJudge


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--die-after", type=int, default=None)
    parser.add_argument("--fail-marker", default=None)
    parser.add_argument("--abstain", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    judge = LLMJudge("judge", num_threads=1)
    judge.load()
    lock, received = threading.Lock(), []
    mode = {"fail_marker": args.fail_marker, "abstain": args.abstain}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.reply(200, {"requests": len(received)} if self.path == "/stats" else {"data": [{"id": "smollm2"}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/control":
                mode.update(body)
                return self.reply(200, mode)
            with lock:
                received.append(body)
                if args.die_after is not None and len(received) > args.die_after:
                    os._exit(1)
            if mode["fail_marker"] and mode["fail_marker"] in body["messages"][-1]["content"]:
                return self.reply(500, {"error": {"message": "judge backend error (injected)"}})
            self.reply(200, {"object": "chat.completion", "model": body["model"], "choices": [{
                "index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": ""},
                "logprobs": {"content": [{"token": "", "logprob": 0.0, "top_logprobs": self.top(body)}]}}]})

        def top(self, body: dict) -> list[dict]:
            """The judge model's most likely first tokens (without Yes/No ones when abstaining)."""
            tokenizer = judge.tokenizer
            chat = tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=False)
            with lock, torch.inference_mode():
                logprobs = judge.next_token_logprobs([tokenizer(chat, add_special_tokens=False)["input_ids"]])[0]
                if mode["abstain"]:
                    logprobs[judge.yes_ids_ + judge.no_ids_] = -float("inf")
                values, ids = torch.topk(logprobs, body.get("top_logprobs") or 1)
            return [{"token": tokenizer.decode([int(i)]), "logprob": float(v)} for v, i in zip(values, ids)]

        def reply(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            for header, value in (("Content-Type", "application/json"), ("Content-Length", str(len(data)))):
                self.send_header(header, value)
            self.end_headers()
            self.wfile.write(data)

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
