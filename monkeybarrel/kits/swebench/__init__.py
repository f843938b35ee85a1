"""SWE-bench: instances, patch candidates, container evaluation, generated-test voting, LLM selection.

Modules (each with one job; docker, rank-bm25, unidiff and swebench are imported lazily):
``schema`` (instances + loaders), ``predictions`` (harness prediction files; sampler backend
``swe_predictions``), ``diffs`` (extract/normalise/check patches), ``retrieval`` (BM25 file context),
``containers`` (the docker pool), ``evaluate`` (local FAIL_TO_PASS/PASS_TO_PASS evaluator),
``harness`` (official harness adapter), ``voting`` (generated tests and votes), ``llm`` (chat models),
``state_machine`` (selection state machine and the barrel-of-monkeys ensemble).
See docs/swebench.md.
"""

from .schema import SWEInstance, load_instances, write_instances

__all__ = ["SWEInstance", "load_instances", "write_instances"]
