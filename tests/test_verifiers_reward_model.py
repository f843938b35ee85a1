"""Reward-model verifier on a locally built tiny sequence-classification model (real Llama architecture and
SmolLM2 tokenizer), briefly trained so that it prefers the right answer of the check problem."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from monkeybarrel.core.models import resolve_model
from monkeybarrel.verifiers.checks import PROBLEM, candidates, check_verifier
from monkeybarrel.verifiers.reward_model import RewardModel

RIGHT = ["He has 3 + 4 = 7 apples. The answer is 7.", "3 + 4 = 7. The answer is 7."]
WRONG = ["3 times 4 is 12. The answer is 12.", "He has 1 apple. The answer is 1."]


def build_tiny_reward_model(path: Path, num_labels: int = 1, chat_template: bool = True, train_steps: int = 30) -> Path:
    """A 2-layer Llama reward model with the SmolLM2 tokenizer, trained a few steps on RIGHT vs WRONG."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
    if not chat_template:
        tokenizer.chat_template = None
    config = LlamaConfig(vocab_size=tokenizer.vocab_size + len(tokenizer.get_added_vocab()), hidden_size=32,
                         intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         num_labels=num_labels, pad_token_id=tokenizer.pad_token_id, max_position_embeddings=512)
    model = LlamaForSequenceClassification(config)
    if train_steps:
        reward = RewardModel("train", str(path))
        reward._tokenizer, reward._model = tokenizer, model
        texts = reward.texts(PROBLEM, candidates(RIGHT + WRONG))
        encoded = tokenizer(texts, padding=True, return_tensors="pt", add_special_tokens=False)
        target = torch.tensor([1.0, 1.0, 0.0, 0.0])
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        for _ in range(train_steps):
            logits = model(**encoded).logits
            margin = logits[:, 0] if num_labels == 1 else logits[:, 1] - logits[:, 0]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(margin, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    return build_tiny_reward_model(tmp_path_factory.mktemp("rm") / "tiny-rm")


def test_reward_model_ranks_with_its_head_and_batching_changes_nothing(tiny_rm: Path):
    verifier = RewardModel("rm", str(tiny_rm), batch_size=4)
    scores = verifier.score(PROBLEM, candidates(RIGHT + WRONG))
    assert scores[:2].min() > scores[2:].max()  # the trained head prefers the right answers
    one_by_one = RewardModel("rm", str(tiny_rm), batch_size=1).score(PROBLEM, candidates(RIGHT + WRONG))
    assert np.allclose(scores, one_by_one, atol=1e-5)  # padding does not move a row's score
    check_verifier(verifier)


def test_two_class_heads_score_log_odds_and_no_chat_template_uses_text_pairs(tmp_path: Path):
    path = build_tiny_reward_model(tmp_path / "two", num_labels=2, chat_template=False, train_steps=0)
    verifier = RewardModel("rm", str(path))
    verifier.load()
    assert isinstance(verifier.texts(PROBLEM, candidates(RIGHT[:1]))[0], tuple)
    batch = candidates(RIGHT + WRONG)
    scores = verifier.score(PROBLEM, batch)
    encoded = verifier._tokenizer(PROBLEM.prompt, RIGHT[0], return_tensors="pt")
    with torch.inference_mode():
        logits = verifier._model(**encoded).logits[0]
    assert scores[0] == pytest.approx(float(logits[1] - logits[0]), abs=1e-4)
    negative = RewardModel("rm", str(path), positive_label=0).score(PROBLEM, batch)
    assert np.allclose(negative, -scores, atol=1e-5)


def test_a_missing_model_is_a_recorded_failure_naming_it(tmp_path: Path):
    verifier = RewardModel("rm", str(tmp_path / "no-such-model"))
    scores, errors = verifier.score_safely(PROBLEM, candidates(RIGHT))
    assert np.isnan(scores).all() and "no-such-model" in errors[0]
    with pytest.raises(ValueError, match="batch_size"):
        RewardModel("rm", "x", batch_size=0)
