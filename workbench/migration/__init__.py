"""``migration_report()``: what it would take to move a PyTorch model from a GPU to Trainium.

One call runs the model (on replicas; the model passed in is never modified) and answers five
questions, each as dataclass fields and DataFrames:

- op coverage: every aten op of a training step (forward, backward, optimizer step), lowered on
  the NeuronCore or run as a host fallback, with calls and simulated cost (transfers included);
- numerics: per-layer drift of ``neuron`` with hardware numerics (bf16 matmul inputs) against
  CPU fp32, worst layers named, layers past ``drift_threshold`` flagged with a suggestion;
- compile readiness: graph breaks with reasons and source lines, recompiles, mode caveats, and
  the step compiled with ``backend="neuron"`` (or why there is none);
- performance: simulated step time and MFU on the target and on the baseline GPU (both costing
  the same op stream), and where the NeuronCore's time goes;
- memory: parameters, activations, gradients and optimizer state against the target's per-core
  HBM, and the largest batch that fits (an estimate: activations scale linearly in the batch).

A small GPT-style model, trained on trn2 against an H100::

    import torch, workbench as wb
    from torch import nn

    class TinyGPT(nn.Module):
        def __init__(self, vocab=512, d=128, heads=4, layers=2, seq=64):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            block = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, layers)
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            return self.head(self.norm(self.blocks(x, mask=self.mask, is_causal=True)))

    report = wb.migration_report(TinyGPT(), torch.randint(0, 512, (8, 64)), target="trn2", baseline="h100")
    report.findings                 # the headline, one line per question
    report.coverage                 # DataFrame: op, status, calls, phases, time_ns, ...
    report.show()                   # the widget, in a notebook
    report.save_html("gpt_migration.html")

A CNN, inference only, with a batch sweep::

    cnn = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(64, 10))
    report = wb.migration_report(cnn, torch.randn(16, 3, 32, 32), training=False, batch_sizes=[16, 256, 4096])
    report.memory.batches           # estimated peak HBM per batch size, and whether it fits

Modules: ``run`` records steps on replicas; ``numerics``, ``memory``, ``compile`` and ``perf``
each answer one question; ``report`` holds the answers (``MigrationReport``) and builds them;
``view`` words and draws a report (findings, HTML, figures, widget); ``cli`` is
``workbench migrate``.
"""
from workbench.migration.numerics import DEFAULT_DRIFT_THRESHOLD
from workbench.migration.report import MigrationReport, migration_report, migration_report_for

__all__ = ["migration_report", "migration_report_for", "MigrationReport", "DEFAULT_DRIFT_THRESHOLD"]
