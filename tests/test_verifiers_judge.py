"""LLM-as-judge on the real embedded SmolLM2, and the same judge through a real OpenAI-compatible HTTP server.

The server is the standard library's ``ThreadingHTTPServer`` on 127.0.0.1, answering
``/v1/chat/completions`` with ``max_tokens=1`` and ``top_logprobs`` computed by the embedded model
(chat template, one forward pass, log-softmax, top-k), in the OpenAI response schema.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch

from monkeybarrel.verifiers.checks import PROBLEM, candidates, check_verifier, odd_candidates
from monkeybarrel.verifiers.llm_judge import LLMJudge
from monkeybarrel.verifiers.openai_judge import EndpointError, OpenAIJudge

TEXTS = ["He has 3 + 4 = 7 apples. The answer is 7.", "3 times 4 is 12. The answer is 12.",
         "Tom had 3 apples, bought 4, so 3 + 4 = 7 apples in total. The answer is 7.", "The answer is 1."]


@pytest.fixture(scope="module")
def judge() -> LLMJudge:
    torch.set_num_threads(1)
    judge = LLMJudge("judge", batch_size=3, num_threads=1)
    judge.load()
    return judge


@pytest.fixture(scope="module")
def server(judge: LLMJudge):
    """A real HTTP server on 127.0.0.1 serving the embedded model's first-token logprobs."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep pytest output clean
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/v1/chat/completions":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            if "FAIL-ME" in body["messages"][-1]["content"]:
                return self._send(500, {"error": {"message": "injected failure"}})
            with lock, torch.inference_mode():
                ids = judge.tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=False)
                ids = judge.tokenizer(ids, add_special_tokens=False, return_tensors="pt")["input_ids"]
                logprobs = torch.log_softmax(judge.model(input_ids=ids).logits[0, -1].float(), dim=-1)
            top = torch.topk(logprobs, body.get("top_logprobs", 0) or 1)
            entries = [{"token": judge.tokenizer.decode([int(i)]), "logprob": float(v)} for v, i in zip(top.values, top.indices)]
            self._send(200, {"id": "cmpl-test", "object": "chat.completion", "model": body["model"], "choices": [{
                "index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": entries[0]["token"]},
                "logprobs": {"content": [{**entries[0], "top_logprobs": entries}]}}]})

        def _send(self, status: int, payload: dict):
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def test_judge_scores_are_probabilities_and_batching_with_a_shared_prefix_changes_nothing(judge: LLMJudge):
    batch = candidates(TEXTS)
    shared = judge.score(PROBLEM, batch)
    assert np.all((shared > 0) & (shared < 1))
    plain = LLMJudge("plain", batch_size=1, share_prefix=False)
    plain._model, plain._tokenizer, plain.yes_ids_, plain.no_ids_, plain._pad = (
        judge.model, judge.tokenizer, judge.yes_ids_, judge.no_ids_, judge._pad)
    assert np.allclose(plain.score(PROBLEM, batch), shared, atol=1e-4)
    raw = LLMJudge("raw", normalize=False)
    raw._model, raw._tokenizer, raw.yes_ids_, raw.no_ids_, raw._pad = (
        judge.model, judge.tokenizer, judge.yes_ids_, judge.no_ids_, judge._pad)
    assert np.all(raw.score(PROBLEM, batch) <= shared + 1e-9)  # P(yes) over the vocabulary <= P(yes | yes or no)


def test_judge_sequences_share_the_problem_prefix_and_truncate_long_solutions(judge: LLMJudge):
    a, b = (judge.encode(PROBLEM, t) for t in TEXTS[:2])
    shared = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert shared > 40  # chat template + problem text are computed once per problem
    long = judge.encode(PROBLEM, "step " * 2000 + "The answer is 7.")
    assert len(long) < judge.max_solution_tokens + 200
    assert judge.tokenizer.decode(long).rstrip().endswith("Answer Yes or No.<|im_end|>\n<|im_start|>assistant")


def test_judge_passes_check_verifier_and_abstains_on_empty_candidates(judge: LLMJudge):
    check_verifier(judge)
    scores, errors = judge.score_safely(PROBLEM, odd_candidates())
    assert np.isnan(scores[:2]).all() and np.isfinite(scores[2:]).all()
    assert errors[:2] == ["no score", "no score"] and errors[2:] == [None, None]


def test_endpoint_judge_matches_the_local_judge_through_a_real_server(judge: LLMJudge, server: str):
    remote = OpenAIJudge("remote", model="smollm2", base_url=server, max_concurrency=2, max_retries=0)
    batch = candidates(TEXTS)
    scores, errors = remote.score_safely(PROBLEM, batch)
    assert errors == [None] * len(batch)
    assert np.allclose(scores, judge.score(PROBLEM, batch), atol=2e-3)
    check_verifier(remote, skip=("reference", "deterministic", "permutation"))  # those: the slow test below


@pytest.mark.slow
def test_endpoint_judge_passes_every_check(server: str):
    check_verifier(OpenAIJudge("remote", model="smollm2", base_url=server, max_concurrency=2))


def test_endpoint_failures_are_recorded_per_candidate_and_a_dead_server_loses_nothing(server: str):
    remote = OpenAIJudge("remote", model="smollm2", base_url=server, max_retries=1)
    batch = candidates(TEXTS[:2] + ["FAIL-ME please"])
    scores, errors = remote.score_safely(PROBLEM, batch)
    assert np.isfinite(scores[:2]).all() and np.isnan(scores[2])
    assert errors[:2] == [None, None] and "500" in errors[2]
    dead = OpenAIJudge("dead", model="smollm2", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout_s=2)
    scores, errors = dead.score_safely(PROBLEM, batch)
    assert np.isnan(scores).all() and all("EndpointError" in e and "127.0.0.1:9" in e for e in errors)
    with pytest.raises(EndpointError, match="top_logprobs"):
        remote.yes_probability({"choices": [{"message": {"content": "Yes"}}]})
    with pytest.raises(ValueError, match="base_url"):
        OpenAIJudge("x", model="m", base_url="127.0.0.1:8000")


def test_endpoint_judge_sends_the_openai_request_and_reads_top_logprobs():
    remote = OpenAIJudge("r", model="judge-70b", top_logprobs=5)
    body = remote.request_body([{"role": "user", "content": "q"}])
    assert body == {"model": "judge-70b", "messages": [{"role": "user", "content": "q"}], "max_tokens": 1,
                    "temperature": 0.0, "logprobs": True, "top_logprobs": 5}
    reply = {"choices": [{"logprobs": {"content": [{"token": "Yes", "logprob": -0.5, "top_logprobs": [
        {"token": "Yes", "logprob": np.log(0.5)}, {"token": " yes", "logprob": np.log(0.1)},
        {"token": "No", "logprob": np.log(0.2)}, {"token": "Maybe", "logprob": np.log(0.2)}]}]}}]}
    assert remote.yes_probability(reply) == pytest.approx(0.6 / 0.8)
    no_answer = {"choices": [{"logprobs": {"content": [{"token": "Hmm", "logprob": 0.0, "top_logprobs": [
        {"token": "Hmm", "logprob": 0.0}]}]}}]}
    assert np.isnan(remote.yes_probability(no_answer))


def test_judge_reads_a_custom_template_and_system_prompt(judge: LLMJudge):
    custom = LLMJudge("c", prompt_template="Q: {problem}\nA: {solution}\nCorrect? Yes or No.", system_prompt="Be strict.")
    custom._tokenizer = judge.tokenizer
    text = judge.tokenizer.decode(custom.encode(replace(PROBLEM, reference_answer=None), "The answer is 7."))
    assert "Be strict." in text and "Correct? Yes or No." in text and "Here is a math problem" not in text
