"""Every module of the package imports on its own, first, in a fresh interpreter: an import cycle
that a lucky import order hides elsewhere (``e3orch.config`` → ``orchestration.handwritten`` →
``orchestration.episode`` → ``e3orch.config``) fails here."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import e3orch

# the GPU-only backends import packages that are installed only where they run
OPTIONAL = {"e3orch.policy.backends.vllm"}


def test_every_module_imports_first() -> None:
    names = sorted(m.name for m in pkgutil.walk_packages(e3orch.__path__, "e3orch."))
    assert "e3orch.orchestration.episode" in names and len(names) > 30
    # one interpreter: third-party modules stay loaded, the package's own are dropped before each
    script = f"""
import importlib, sys, traceback
failed = []
for name in {[n for n in names if n not in OPTIONAL]!r}:
    for m in [m for m in sys.modules if m == "e3orch" or m.startswith("e3orch.")]:
        del sys.modules[m]
    try:
        importlib.import_module(name)
    except Exception as e:
        failed.append(f"{{name}}: {{type(e).__name__}}: {{e}}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
