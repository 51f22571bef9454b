"""Tutorials use the public API only: `import workbench as wb` and its public modules, never internals."""
import json
import re

import pytest

from nb_paths import NOTEBOOK_DIR

PUBLIC_MODULES = {"workbench", "workbench.distributed", "workbench.figures", "workbench.models",
                  "workbench.nki", "workbench.nki.language", "workbench.nki.isa"}   # NKI as `neuronxcc.nki` names it
IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", re.M)


@pytest.mark.parametrize("path", sorted(NOTEBOOK_DIR.glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_imports_only_public_modules(path):
    cells = json.loads(path.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    modules = {a or b for a, b in IMPORT.findall(code)}
    internal = sorted(m for m in modules if (m.startswith(("backend", "workbench.", "extensions")) and m not in PUBLIC_MODULES))
    assert not internal, f"{path.name} imports internals: {internal}; expose what it needs on `wb`"
