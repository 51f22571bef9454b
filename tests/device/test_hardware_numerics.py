"""Hardware numerics: off = CPU-exact; on = bf16 matmul inputs with fp32 accumulation."""
import torch


def test_off_by_default_equals_cpu(neuron):
    assert not torch.neuron.hardware_numerics_enabled()
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    assert torch.equal((a.to("neuron") @ b.to("neuron")).cpu(), a @ b)


def test_on_matches_bf16_inputs_fp32_accumulation(neuron):
    torch.manual_seed(0)
    a, b = torch.randn(128, 256), torch.randn(256, 64)
    expected = (a.bfloat16().float() @ b.bfloat16().float())
    with torch.neuron.hardware_numerics():
        out = (a.to("neuron") @ b.to("neuron")).cpu()
        linear = torch.nn.functional.linear(a.to("neuron"), b.t().to("neuron")).cpu()
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(linear, expected, rtol=1e-5, atol=1e-4)
    drift = (out - a @ b).abs().max().item()
    assert drift > 1e-3  # bf16 rounding of the inputs is visible against fp32 CPU
    assert not torch.neuron.hardware_numerics_enabled()  # context restored


def test_elementwise_unaffected(neuron):
    x = torch.randn(10)
    with torch.neuron.hardware_numerics():
        assert torch.equal((x.to("neuron").exp()).cpu(), x.exp())


def test_records_say_autocast_so_the_simulator_uses_the_bf16_rate(neuron):
    from backend import recording

    class Sink:
        records = []

        def feed(self, record):
            self.records.append(record)

    a = torch.randn(8, 8, device="neuron")
    sink = Sink()
    with recording.recording(sink):
        a @ a
        with torch.neuron.hardware_numerics():
            a @ a
            a + a
    assert [r.attrs.get("autocast") for r in sink.records] == [None, "bfloat16", None]
