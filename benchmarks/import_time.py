"""What a fresh process spends importing an engine before it can start one: torch, vLLM's ``LLM``, our plugin.

Prints one JSON line (seconds): ``torch_s``, ``vllm_llm_s`` (``from vllm import LLM``: vLLM's config, engine and
transformers), ``plugin_s`` (monkeybarrel's vLLM sampler and attention plug-in), ``total_s``. Run several at
once to see what engines starting side by side pay (benchmarks/gpu_lanes.sh stage ``imports``: before and after
the site's bytecode is compiled). No GPU work.
"""

from __future__ import annotations

import json
import time

if __name__ == "__main__":
    began = time.perf_counter()
    import torch  # noqa: F401

    after_torch = time.perf_counter()
    from vllm import LLM  # noqa: F401

    after_vllm = time.perf_counter()
    from monkeybarrel.kernels import vllm_plugin
    from monkeybarrel.samplers import vllm_offline  # noqa: F401

    vllm_plugin.register()
    done = time.perf_counter()
    print(json.dumps({"torch_s": round(after_torch - began, 2), "vllm_llm_s": round(after_vllm - after_torch, 2),
                      "plugin_s": round(done - after_vllm, 2), "total_s": round(done - began, 2)}), flush=True)
