"""Engines sharing a GPU (:mod:`monkeybarrel.samplers.gpu_sharing`): published KV sizes keyed by run and configuration,
and who starts when, with real lock and size files (threads stand for the engines: ``flock`` locks belong to each
open file, so two threads of one process exclude each other as two processes would)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from monkeybarrel.samplers.gpu_sharing import (engine_fingerprint, forget, gpu_turn, publish_size, read_published,
                                               share_key)
from monkeybarrel.samplers.vllm_offline import VLLMSampler

OPTIONS = {"gpu_memory_utilization": 0.43, "dtype": "bfloat16", "engine_kwargs": {"max_num_seqs": 512}}


def test_the_fingerprint_keys_model_options_and_memory_share_not_their_order():
    same = engine_fingerprint("vllm", "m", dict(reversed(list(OPTIONS.items()))), expected_sharing=8.0)
    assert engine_fingerprint("vllm", "m", OPTIONS, expected_sharing=8.0) == same
    for other in (engine_fingerprint("vllm", "other", OPTIONS, expected_sharing=8.0),
                  engine_fingerprint("vllm", "m", {**OPTIONS, "gpu_memory_utilization": 0.195}, expected_sharing=8.0),
                  engine_fingerprint("vllm", "m", {**OPTIONS, "engine_kwargs": {}}, expected_sharing=8.0),
                  engine_fingerprint("vllm", "m", OPTIONS, expected_sharing=1.0)):
        assert other != same


def test_share_key_only_for_a_backend_that_takes_a_size_and_not_when_the_size_is_given():
    key, measures = share_key(VLLMSampler, "vllm", "m", OPTIONS, "run1")
    assert measures and key == f"run1-{engine_fingerprint('vllm', 'm', OPTIONS)}"
    assert share_key(VLLMSampler, "vllm", "m", OPTIONS, "run2")[0] != key  # another pool run: another key
    assert share_key(VLLMSampler, "vllm", "m", OPTIONS, None) == (None, True)  # no token: each measures in turn
    assert share_key(object, "embedded", "m", {}, "run1") == (None, True)  # cannot take a size: today's turns
    for given in ({**OPTIONS, "kv_cache_memory_bytes": 2**30},
                  {**OPTIONS, "engine_kwargs": {"kv_cache_memory_bytes": 2**30}}):
        assert share_key(VLLMSampler, "vllm", "m", given, "run1") == (None, False)  # given: nothing to share


def test_a_published_size_is_read_only_under_its_own_key_and_gpus(tmp_path: Path):
    publish_size(tmp_path, "0", "run1-abc", 123_456_789)
    assert read_published(tmp_path, "0", "run1-abc") == 123_456_789
    assert read_published(tmp_path, "0", "run0-abc") is None  # a stale file of an earlier run is never read
    assert read_published(tmp_path, "0", "run1-def") is None  # another configuration
    assert read_published(tmp_path, "1", "run1-abc") is None  # another GPU
    # a file whose record is not its name's (copied, renamed), or not a positive size, counts as none
    copied = (tmp_path / "monkeybarrel-gpu-0-kv-run1-abc.json").read_bytes()
    (tmp_path / "monkeybarrel-gpu-0-kv-run2-abc.json").write_bytes(copied)
    assert read_published(tmp_path, "0", "run2-abc") is None
    for bad in (b"{not json", b"[]", b'{"gpus": "0", "key": "run3-abc", "kv_cache_memory_bytes": 0}',
                b'{"gpus": "0", "key": "run3-abc", "kv_cache_memory_bytes": true}'):
        (tmp_path / "monkeybarrel-gpu-0-kv-run3-abc.json").write_bytes(bad)
        assert read_published(tmp_path, "0", "run3-abc") is None
    forget(tmp_path, "0", "run1-abc")
    assert read_published(tmp_path, "0", "run1-abc") is None


class _Engines:
    """Engines starting in threads: each takes its turn, "starts" for ``start_s`` seconds (publishing ``size`` after
    ``publish_after_s`` if it measures) and records its span and what its turn said."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.records, self.threads = directory, {}, []

    def start(self, name: str, key: str | None, size: int | None = 1000, start_s: float = 0.6,
              publish_after_s: float = 0.2, measures: bool = True, delay_s: float = 0.0) -> None:
        def run() -> None:
            time.sleep(delay_s)
            with gpu_turn(True, key, measures, gpus="0", directory=self.directory) as turn:
                began = time.perf_counter()
                if turn.measuring:
                    time.sleep(publish_after_s)
                    turn.publish(size)
                    time.sleep(start_s - publish_after_s)
                else:
                    time.sleep(start_s)
                self.records[name] = {"span": (began, time.perf_counter()), "wait_s": turn.wait_s,
                                      "shared": turn.shared_bytes, "published": turn.published_bytes,
                                      "published_s": turn.published_s}

        thread = threading.Thread(target=run)
        thread.start()
        self.threads.append(thread)

    def join(self) -> dict:
        for thread in self.threads:
            thread.join(timeout=30)
        return self.records


def _overlap(a: dict, b: dict) -> float:
    return min(a["span"][1], b["span"][1]) - max(a["span"][0], b["span"][0])


def test_the_first_engine_measures_alone_and_the_others_start_together_once_it_published(tmp_path: Path):
    engines = _Engines(tmp_path)
    engines.start("first", "run1-abc")
    for name in ("second", "third"):
        engines.start(name, "run1-abc", delay_s=0.1)
    records = engines.join()
    first, second, third = records["first"], records["second"], records["third"]
    assert first["published"] == 1000 and first["shared"] is None and 0.15 < first["published_s"] < 0.4
    assert second["shared"] == third["shared"] == 1000 and second["published"] is None
    publish_at = first["span"][0] + first["published_s"]
    for later in (second, third):  # waited for the size only, not for the first's whole start
        assert publish_at - 0.01 <= later["span"][0] < first["span"][1] - 0.2
        assert later["wait_s"] >= 0.05
    assert _overlap(second, third) > 0.4  # side by side with each other
    assert read_published(tmp_path, "0", "run1-abc") == 1000


def test_an_engine_coming_after_the_publication_starts_at_once(tmp_path: Path):
    engines = _Engines(tmp_path)
    engines.start("first", "run1-abc", start_s=1.0, publish_after_s=0.1)
    engines.start("late", "run1-abc", delay_s=0.4)
    records = engines.join()
    assert records["late"]["shared"] == 1000 and records["late"]["wait_s"] < 0.1
    assert _overlap(records["first"], records["late"]) > 0.4


def test_without_a_readable_size_the_engines_take_turns_as_before(tmp_path: Path):
    engines = _Engines(tmp_path)
    engines.start("first", "run1-abc", size=None)
    for name in ("second", "third"):
        engines.start(name, "run1-abc", size=None, delay_s=0.1)
    records = engines.join()
    assert all(r["shared"] is None and r["published"] is None for r in records.values())
    pairs = [("first", "second"), ("first", "third"), ("second", "third")]
    assert all(_overlap(records[a], records[b]) <= 0.02 for a, b in pairs)
    assert max(r["wait_s"] for r in records.values()) >= 1.0  # the last waited for both others' whole starts


def test_a_stale_size_of_an_earlier_run_is_not_used(tmp_path: Path):
    publish_size(tmp_path, "0", "run0-abc", 999)  # left by an earlier pool run with the same configuration
    engines = _Engines(tmp_path)
    engines.start("first", "run1-abc")
    records = engines.join()
    assert records["first"]["shared"] is None and records["first"]["published"] == 1000


def test_engines_of_another_configuration_keep_taking_turns(tmp_path: Path):
    """An engine of another kind measures only while nothing else starts on the GPU, and nothing starts beside it;
    engines of the first kind share its size between themselves."""
    engines = _Engines(tmp_path)
    engines.start("a1", "run1-aaa", start_s=0.8, publish_after_s=0.2)
    engines.start("b1", "run1-bbb", delay_s=0.05, start_s=0.5, publish_after_s=0.2)
    engines.start("a2", "run1-aaa", delay_s=0.1)
    records = engines.join()
    b1 = records["b1"]
    assert b1["shared"] is None and b1["published"] == 1000
    assert records["a2"]["shared"] == 1000
    for other in ("a1", "a2"):  # b1 measured (until it published) with no other engine starting
        measuring = {"span": (b1["span"][0], b1["span"][0] + b1["published_s"])}
        assert _overlap(measuring, records[other]) <= 0.02, other


def test_engines_given_their_size_start_side_by_side_but_never_beside_one_that_measures(tmp_path: Path):
    engines = _Engines(tmp_path)
    engines.start("given1", None, measures=False)
    engines.start("given2", None, measures=False, delay_s=0.05)
    engines.start("measures", None, delay_s=0.1, size=None)
    records = engines.join()
    assert _overlap(records["given1"], records["given2"]) > 0.4
    assert all(_overlap(records["measures"], records[g]) <= 0.02 for g in ("given1", "given2"))


def test_a_failed_start_withdraws_its_size(tmp_path: Path):
    with pytest.raises(RuntimeError):
        with gpu_turn(True, "run1-abc", gpus="0", directory=tmp_path) as turn:
            assert turn.publish(1000) and read_published(tmp_path, "0", "run1-abc") == 1000
            assert not turn.publish(2000)  # once per turn
            raise RuntimeError("the engine died after sizing its cache")
    assert read_published(tmp_path, "0", "run1-abc") is None


def test_an_engine_not_sharing_a_gpu_takes_no_lock_and_publishes_nothing(tmp_path: Path):
    with gpu_turn(False, "run1-abc", gpus="0", directory=tmp_path) as turn:
        assert turn.wait_s is None and not turn.measuring and not turn.publish(1000)
    assert not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match="file-name"):
        with gpu_turn(True, "../x", gpus="0", directory=tmp_path):
            pass


def test_the_vllm_sampler_takes_a_kv_cache_size():
    from monkeybarrel.core.config import GeneratorSpec

    sampler = VLLMSampler(GeneratorSpec(), kv_cache_memory_bytes=2**30)
    assert sampler.engine_args["kv_cache_memory_bytes"] == 2**30 and sampler.kv_cache_bytes is None
    same = VLLMSampler(GeneratorSpec(), kv_cache_memory_bytes=2**30, engine_kwargs={"kv_cache_memory_bytes": 2**30})
    assert same.engine_args["kv_cache_memory_bytes"] == 2**30
    with pytest.raises(ValueError, match="differ"):
        VLLMSampler(GeneratorSpec(), kv_cache_memory_bytes=2**30, engine_kwargs={"kv_cache_memory_bytes": 2**20})
    with pytest.raises(ValueError, match="positive int"):
        VLLMSampler(GeneratorSpec(), kv_cache_memory_bytes=0)
    assert VLLMSampler.kv_cache_given({"engine_kwargs": {"kv_cache_memory_bytes": 5}}) == 5
    assert VLLMSampler.kv_cache_given({"gpu_memory_utilization": 0.4}) is None
