"""prof.ops leads with name, kind, time and share; prof.top(n) groups the time by op name."""
import pytest
import torch

import workbench as wb


@pytest.fixture(scope="module")
def prof():
    layer = torch.nn.TransformerEncoderLayer(64, 4, batch_first=True).to("neuron")
    x = torch.randn(2, 16, 64, device="neuron")
    with wb.profile(target="trn2") as p:
        layer(x).sum().backward()
    return p


def test_ops_lead_with_what_a_reader_looks_for(prof):
    assert list(prof.ops.columns[:4]) == ["name", "kind", "time_ns", "share"]
    assert prof.ops["share"].sum() == pytest.approx(1.0)


def test_top_sums_every_op_of_a_name_and_sorts_by_time(prof):
    top = prof.top(3)
    assert len(top) == 3 and list(top["time_ns"]) == sorted(top["time_ns"], reverse=True)
    mm = prof.ops[prof.ops["name"] == top.index[0]]
    assert top.iloc[0]["count"] == len(mm) and top.iloc[0]["time_ns"] == pytest.approx(mm["time_ns"].sum())
    everything = prof.top(10_000)
    assert everything["count"].sum() == len(prof.ops) and everything["share"].sum() == pytest.approx(1.0)


def test_top_rejects_bad_arguments(prof):
    with pytest.raises(ValueError, match="not a column"):
        prof.top(by="nope")
    with pytest.raises(ValueError, match="positive"):
        prof.top(0)
