"""The Neuron workbench: run unchanged PyTorch code on a simulated NeuronCore (``neuron``) or an
emulated GPU (``cuda``) and see where the time goes.

``import workbench`` registers the ``neuron`` device and makes ``torch.compile(backend="neuron")``
resolvable (Dynamo and the compiler load on the first such compile, see
``backend.compile.entry_point``); everything else (pandas, plotly, widgets) is imported on first
use of the name.

Structure (no import cycles, checked by tests/test_import_layering.py):

- running: ``devices`` (the active device, one ``SELECTION`` object), ``session``
  (``profile()``), ``comparison`` (``compare()``), ``distributed`` (``launch()`` on N ranks),
  ``cli`` (``workbench profile``);
- hardware: ``hardware`` (``targets()``, ``derive()``, ``topology()``, ``assumptions()``);
- data: ``profiles`` (``Profile``: traces and compiled graphs as tables and counters),
  ``graphs``, ``aggregate``, ``records``, ``format`` (numbers with units), ``pricing`` (dollars);
- presentation: ``html_parts`` (the one HTML table helper and the sections the dashboard and
  the report share), ``figures/`` (plotly, one module per figure), ``widgets`` (the dashboard),
  ``report`` (standalone HTML), ``export`` (Chrome/Perfetto trace), ``tables`` (CSV/Parquet).
  They register ``Profile.show()``, ``save_html()``, the exports and ``load()`` as presenters
  (``presenters``; the modules providing them are named below), so ``profiles`` never imports them;
- ``models/``: ``wb.models.Llama`` (Hugging Face's Llama computation with named configs, LoRA and
  activation recomputation), the one model the notebooks, benchmarks and fidelity cases run;
- ``migration/``: ``migration_report()``, its questions one module each, the report data and
  its view, and ``workbench migrate``.
"""
from importlib import import_module

from backend.compile import declare as _declare_compile_backend
from backend.device import register as _register_device
from backend.distributed import register as _register_distributed
from workbench.presenters import provide as _provide

_register_device()
_register_distributed()     # torch.distributed.init_process_group("neuron")
_declare_compile_backend()   # torch.compile(backend="neuron"), without importing torch._dynamo

__version__ = "0.1.0"

# public name -> module that defines it (imported lazily, PEP 562)
_LAZY = {
    "profile": "workbench.session",
    "Profile": "workbench.profiles",
    "compare": "workbench.comparison",
    "Comparison": "workbench.comparison",
    "load_trace": "workbench.export",
    "Dashboard": "workbench.widgets",
    "set_device": "workbench.devices",
    "use_device": "workbench.devices",
    "active_device": "workbench.devices",
    "move": "workbench.devices",
    "migration_report": "workbench.migration",
    "MigrationReport": "workbench.migration",
    "migration_report_for": "workbench.migration",
    "cost": "workbench.pricing",
    "cost_table": "workbench.pricing",
    "sweep": "workbench.sweeps",
    "fit_chips": "workbench.fit",
    "pipeline_step": "workbench.pipeline",
    "SWEEP_COLUMNS": "workbench.sweeps",
    "targets": "workbench.hardware",
    "target": "workbench.hardware",
    "derive": "workbench.hardware",
    "topology": "workbench.hardware",
    "topologies": "workbench.hardware",
    "assumptions": "workbench.hardware",
    "assumption": "workbench.hardware",
    "serve": "workbench.serving",
    "ServingResult": "workbench.serving",
    "serve_sweep": "workbench.serving",
}
__all__ = ["__version__", "figures", "models", "serving", *_LAZY]

# Which module registers each presenter of a Profile (imported on first use; see presenters).
_provide("workbench.figures", "profile.figures")
_provide("workbench.widgets", "profile.show")
_provide("workbench.report", "profile.save_html")
_provide("workbench.export", "profile.export_chrome_trace", "profile.load")
_provide("workbench.tables", "profile.write_tables")


def __getattr__(name):
    if name in ("figures", "models", "serving"):
        return import_module(f"workbench.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


def load_ipython_extension(ipython):
    """``%load_ext workbench``: the magics live in ``extensions``."""
    from extensions import load_ipython_extension as _load

    _load(ipython)


def unload_ipython_extension(ipython):
    from extensions import unload_ipython_extension as _unload

    _unload(ipython)
