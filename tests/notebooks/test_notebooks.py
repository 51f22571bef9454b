"""Every tutorial notebook runs end to end in a real kernel, and shows what it promises."""
from __future__ import annotations

import json
import logging
import time

import nbformat
import pytest
from nbclient import NotebookClient

from nb_paths import NOTEBOOKS

log = logging.getLogger(__name__)

WIDGET = "application/vnd.jupyter.widget-view+json"
PLOTLY = "application/vnd.plotly.v1+json"
EXPECTED = ("01_quickstart.ipynb", "02_eager_vs_compiled.ipynb", "03_cuda_to_neuron.ipynb",
            "04_transformer_anatomy.ipynb", "05_hardware_what_ifs.ipynb", "06_migration_report.ipynb",
            "07_llama_from_a_laptop.ipynb", "08_scaling_llama.ipynb", "09_porting_a_custom_kernel.ipynb",
            "10_serving_what_if.ipynb")

# Per notebook: (text that some output must contain, mime types some output must have).
FACTS = {
    "01_quickstart.ipynb": (["simulated trn2 NeuronCore", "max |neuron - cpu| = 0.0", "neuron trn2", "cuda h100",
                             "Profile: neuron trn2", "cpu False"], [WIDGET, PLOTLY]),
    "02_eager_vs_compiled.ipynb": (["compiled / eager", "FX code of", "addmm,gelu"], [WIDGET, PLOTLY]),
    "03_cuda_to_neuron.ipynb": (["emulated h100 GPU", "redirected to the neuron device", "aten::nonzero",
                                 "NeuronCore vs CPU:     max |diff| = 0.0", "top-5 classes agree"], [WIDGET]),
    "04_transformer_anatomy.ipynb": (["ridge point", "aten::bmm", "seq 512 (%)",
                                      "aten::_scaled_dot_product_fused_attention_overrideable"], [WIDGET, PLOTLY]),
    "05_hardware_what_ifs.ipynb": (["neuron trn1", "neuron trn3", "cuda h100", "2x HBM + DMA",
                                    "what-if change", "simulated on trn2:", "dominant assumption",
                                    "from v6e's timing error band"], [PLOTLY]),
    "06_migration_report.ipynb": (["Migration report: Sequential (inference, batch 16) on trn2 vs h100",
                                   "op types fall back to the host (aten::_fft_", "3x3 conv: 0 host fallback op(s)",
                                   "1 graph break(s)", "fits; largest batch that fits",
                                   "tokens per dollar on v6e than on h100", "tpu v6e"], [WIDGET, PLOTLY]),
    "07_llama_from_a_laptop.ipynb": (["timing-only: shapes, no values", "OutOfMemoryError: neuron out of memory",
                                      "12.00 GiB", "in bf16 on trn2-96GiB", "32 layers (scaled)",
                                      "tokens/s on one core", "compiled", "timing-only now: False"], []),
    "08_scaling_llama.ipynb": (["trn2-ultraserver", "dgx-h100", "of the step is exposed communication, speedup",
                                "trn2/lnc2", "restored: trn2 with 8 NeuronCores", "Llama-3-70B: 70.6 B parameters",
                                "trn1 TP32 x PP8 x DP4 (512 chips): pipeline bubble 88% at 1 micro-batch",
                                "'pipeline_schedule_bubble_fraction'", "ChipFit(ddp on trn1"],
                               [PLOTLY]),
    "10_serving_what_if.ipynb": (["usd_per_1m_tokens", "no memory left for the KV cache",
                                  "cheapest per rate meeting the SLO", "interpolated_s", "kv_peak_percent",
                                  "usd_per_audio_hour", "cheapest per target meeting the speech SLO",
                                  "the audio per dollar of h100", "communication", "usd_per_audio_hour_high"],
                                 [PLOTLY]),
    "09_porting_a_custom_kernel.ipynb": (["CUDA extension not available here", "step 1 matches PyTorch: True",
                                          "weight broadcast hoisted", "bf16 in and out", "output dtype: torch.bfloat16",
                                          "err_num_partition_exceed_arch_limit", "nki::rmsnorm_v2",
                                          "opaque_rmsnorm_v2", "compiled matches PyTorch: True"], [PLOTLY]),
}


def _texts(nb) -> list[str]:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.output_type == "stream":
                out.append(o.text)
            for value in o.get("data", {}).values():
                out.append(value if isinstance(value, str) else json.dumps(value))
    return out


def _mimes(nb) -> set[str]:
    return {m for cell in nb.cells for o in cell.get("outputs", []) for m in o.get("data", {})}


def test_every_tutorial_is_there():
    assert tuple(p.name for p in NOTEBOOKS) == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    assert "%load_ext workbench" in code[0].source


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_end_to_end(path, kernel_name, tmp_path):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=240, kernel_name=kernel_name, allow_errors=False,
                            resources={"metadata": {"path": str(tmp_path)}})
    start = time.perf_counter()
    client.execute()            # raises CellExecutionError on the first failing cell
    log.info("%s ran in %.1f s", path.name, time.perf_counter() - start)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    stderr = "".join(o.text for c in nb.cells for o in c.get("outputs", [])
                     if o.output_type == "stream" and o.name == "stderr")
    assert "Traceback" not in stderr and "UsageError" not in stderr
    # DDP's warning for a device without a timer (docs/stack.md, "DDP's time stats").
    assert "Time stats are currently only collected" not in stderr
    texts, mimes = _texts(nb), _mimes(nb)
    wanted_text, wanted_mimes = FACTS[path.name]
    for fact in wanted_text:
        assert any(fact in t for t in texts), f"{path.name}: no output mentions {fact!r}"
    for mime in wanted_mimes:
        assert mime in mimes, f"{path.name}: no {mime} output"
