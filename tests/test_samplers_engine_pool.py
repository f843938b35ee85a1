"""Engine sharing: experiments inside ``shared_engines()`` draw from one started sampler per engine key."""

from __future__ import annotations

from monkeybarrel.core.config import ExperimentConfig, GeneratorSpec
from monkeybarrel.orchestrator.runner import run_experiment
from monkeybarrel.samplers.embedded import EmbeddedSampler
from monkeybarrel.samplers.engine_pool import active_pool, shared_engines

from conftest import tiny_config


def test_engine_key_ignores_sampling_settings_but_not_the_model_or_options():
    base = EmbeddedSampler(GeneratorSpec(id="a", temperature=0.2, options={"num_threads": 1}), num_threads=1)
    same_engine = GeneratorSpec(id="b", temperature=1.0, max_tokens=9, prompt_template="Q: {prompt}",
                                options={"num_threads": 1})
    assert base.key_for(same_engine) == base.engine_key()
    assert base.key_for(same_engine.model_copy(update={"model": "/models/other"})) != base.engine_key()
    assert base.key_for(same_engine.model_copy(update={"options": {"num_threads": 2}})) != base.engine_key()


def test_a_sweep_of_two_temperatures_loads_the_model_once_and_matches_separate_runs(tmp_path, monkeypatch):
    loads = []
    original = EmbeddedSampler._load

    def counting_load(self):
        loads.append(self.spec.id)
        original(self)

    monkeypatch.setattr(EmbeddedSampler, "_load", counting_load)
    configs = [ExperimentConfig.model_validate(tiny_config(name=f"t{t}", problems=2, samples=3, max_tokens=12,
                                                           generators=[{"id": "smol", "num_samples": 3,
                                                                        "max_tokens": 12, "temperature": t,
                                                                        "options": {"num_threads": 1}}]))
               for t in (0.3, 1.2)]
    with shared_engines() as pool:
        shared = [run_experiment(c, tmp_path / "shared" / c.name, show_progress=False) for c in configs]
        assert active_pool() is pool
    assert active_pool() is None
    assert len(loads) == 1 and sum(pool.starts.values()) == 1
    separate = [run_experiment(c, tmp_path / "separate" / c.name, show_progress=False) for c in configs]
    assert len(loads) == 3  # one load per experiment without the pool
    for a, b in zip(shared, separate):  # the shared engine samples exactly what a fresh one does
        assert a.candidates().column("text").to_pylist() == b.candidates().column("text").to_pylist()
    texts = [e.candidates().column("text").to_pylist() for e in shared]
    assert texts[0] != texts[1]  # each experiment sampled at its own temperature
