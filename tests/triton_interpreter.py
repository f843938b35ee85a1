"""Run a script under Triton's CPU interpreter (TRITON_INTERPRET=1) in a subprocess, for kernel tests.

PATCH makes Triton 3.6's interpreter work with numpy >= 2.4 (``int()`` of a one-element 1-d array);
scripts start with it. Test modules import this file by name (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PATCH = textwrap.dedent("""
    import numpy as np
    import triton.runtime.interpreter as I
    if hasattr(I, "_patch_lang_tensor"):  # triton 3.6 interpreter vs numpy>=2.4: int() of a 1-elem 1-d array
        _orig = I._patch_lang_tensor
        def _patched(tensor, scope):
            _orig(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))
        I._patch_lang_tensor = _patched
""")


def run_in_interpreter(script: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """``script`` (after PATCH) in a fresh Python with the interpreter on and no GPU visible, from the repo root."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-c", PATCH + textwrap.dedent(script)], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)
