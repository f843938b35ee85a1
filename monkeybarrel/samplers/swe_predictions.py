"""SWE-bench prediction files as candidates: the sampler backend ``swe_predictions`` (no model is run).

Configure one generator per system with ``options: {path: preds.jsonl}`` (harness format, see
``monkeybarrel.kits.swebench.predictions``); ``num_samples`` caps how many predictions per
instance are kept (a file may hold several per instance, e.g. many samples). An instance without
a prediction gets an error candidate, so the gap is visible, not silent.
"""

from __future__ import annotations

from ..core.records import Candidate
from ..kits.swebench.predictions import read_predictions
from .base import SAMPLERS, Sampler, SampleRequest


@SAMPLERS.register("swe_predictions")
class SWEPredictionsSampler(Sampler):
    """Serves a system's predictions as candidates (no model is run).

    Args:
        spec: the generator (its id names the system; ``num_samples`` predictions per instance).
        path: the prediction file.
    """

    def __init__(self, spec, path: str) -> None:
        super().__init__(spec)
        self.path = path
        self.predictions = read_predictions(path)

    def _sample(self, request: SampleRequest) -> list[Candidate]:
        rows = self.predictions.get(request.problem.problem_id, [])
        out = []
        for index in request.sample_indices:
            if index < len(rows):
                out.append(Candidate(problem_id=request.problem.problem_id, generator_id=self.generator_id,
                                     sample_index=index, text=rows[index]["model_patch"] or "", seed=request.seed))
            else:
                out.append(Candidate(problem_id=request.problem.problem_id, generator_id=self.generator_id,
                                     sample_index=index, text=None, finish_reason="error", seed=request.seed,
                                     error=f"{self.path}: no prediction #{index} for {request.problem.problem_id}"))
        return out
