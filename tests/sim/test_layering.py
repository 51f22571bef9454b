"""backend.sim and backend.lowering import no torch / IPython / widgets / plotly."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fresh_interpreter_imports_no_frontend_modules():
    code = (
        "import sys, backend.sim, backend.lowering, backend.sim.scheduler, backend.lowering.kernel\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'IPython', 'ipywidgets', 'plotly'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", out.stdout


def test_packages_declare_all():
    import backend.lowering
    import backend.sim
    import backend.sim.costs
    for pkg in (backend.sim, backend.lowering, backend.sim.costs):
        assert pkg.__all__ and all(hasattr(pkg, name) for name in pkg.__all__)
