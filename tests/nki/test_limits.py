"""Tile limits and memory rules give NKI's error codes, with what to change; the session stays usable."""
import numpy as np
import pytest

import backend.nki.isa as nisa
import backend.nki.language as nl
from backend.nki import NKIError

from nki_helpers import run


def _raises(code, kernel, *args, **options):
    with pytest.raises(NKIError, match=code) as info:
        run(kernel, *args, **options)
    assert info.value.code == code
    return info.value


def test_more_than_128_partitions():
    def kernel(x):
        nl.load(x)
    err = _raises("err_num_partition_exceed_arch_limit", kernel, np.zeros((256, 4), np.float32))
    assert "128" in str(err)


def test_moving_free_size_above_512():
    def kernel(a, b):
        nisa.nc_matmul(nl.load(a), nl.load(b))
    err = _raises("err_size_of_dimension_exceed_arch_limit", kernel, np.zeros((128, 128), np.float32),
                  np.zeros((128, 1024), np.float32))
    assert "gemm_moving_fmax" in str(err)


def test_stationary_free_size_above_128():
    def kernel(a, b):
        nisa.nc_matmul(nl.load(a), nl.load(b))
    _raises("err_size_of_dimension_exceed_arch_limit", kernel, np.zeros((128, 256), np.float32),
            np.zeros((128, 512), np.float32))


def test_contraction_sizes_must_match():
    def kernel(a, b):
        nisa.nc_matmul(nl.load(a), nl.load(b))
    _raises("err_num_partition_mismatch", kernel, np.zeros((64, 128), np.float32), np.zeros((128, 512), np.float32))


def test_psum_tile_larger_than_a_bank():
    def kernel():
        nl.zeros((128, 1024), nl.float32, buffer=nl.psum)
    err = _raises("err_size_of_dimension_exceed_arch_limit", kernel)
    assert "2048 B" in str(err)


def test_psum_holds_eight_banks():
    def kernel():
        for _ in nl.static_range(3):
            a = nl.zeros((4, nl.par_dim(128), 512), nl.float32, buffer=nl.psum)    # 4 banks
            b = nl.zeros((4, nl.par_dim(128), 512), nl.float32, buffer=nl.psum)
            c = nl.zeros((4, nl.par_dim(128), 512), nl.float32, buffer=nl.psum)
    err = _raises("err_out_of_memory", kernel)
    assert "24576 B of PSUM" in str(err) and "even with one buffer" in str(err)


def test_tiles_that_do_not_fit_twice_get_one_buffer():
    def kernel():
        for _ in nl.affine_range(3):
            nl.zeros((4, nl.par_dim(128), 512), nl.float32, buffer=nl.psum)     # 4 banks
            nl.zeros((2, nl.par_dim(128), 512), nl.float32, buffer=nl.psum)     # 2 banks
    result = run(kernel, buffers=2)          # 12 banks double-buffered: the 4-bank tile gets one buffer
    assert result.program.info.psum_peak_bytes == (4 + 2 * 2) * 2048 * 128
    assert result.tracer.site_buffers and set(result.tracer.site_buffers.values()) == {1}


def test_sbuf_capacity():
    def kernel(x):
        a = nl.ndarray((128, 100 * 1024), dtype=nl.float32)     # 400 KiB per partition
        nl.store(x, value=a[:, 0:4])
        return x
    _raises("err_out_of_memory", kernel, np.zeros((128, 4), np.float32))


def test_engines_read_on_chip_tiles_only():
    def kernel(x):
        nisa.activation(op=nl.exp, data=x)
    err = _raises("err_unsupported_memory", kernel, np.zeros((128, 4), np.float32))
    assert "nl.load" in str(err)


def test_index_out_of_bounds_without_mask():
    def kernel(x):
        i = nl.arange(128)[:, None]
        nl.load(x[64 + i, 0:4])
    _raises("err_tensor_access_out_of_bound", kernel, np.zeros((128, 4), np.float32))


def test_bn_stats_free_size_limit():
    def kernel(x):
        nisa.bn_stats(nl.load(x))
    _raises("err_size_of_dimension_exceed_arch_limit", kernel, np.zeros((128, 1024), np.float32))


def test_partition_axis_cannot_be_reduced():
    def kernel(x):
        nl.sum(nl.load(x), axis=0)
    _raises("err_unsupported_reduction_axis", kernel, np.zeros((128, 4), np.float32))


def test_output_never_stored():
    def kernel(x):
        return nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    _raises("err_tensor_output_not_written_back", kernel, np.zeros((128, 4), np.float32))


def test_nki_calls_outside_a_kernel():
    with pytest.raises(NKIError, match="err_nki_api_outside_of_nki_kernel"):
        nl.zeros((128, 4), nl.float32)


def test_branching_on_tile_values():
    def kernel(x):
        if nl.load(x):
            pass
    _raises("err_ambiguous_tensor_truth_value", kernel, np.zeros((128, 4), np.float32))


def test_a_failed_kernel_leaves_the_next_run_working():
    def bad(x):
        nl.load(x)
    with pytest.raises(NKIError):
        run(bad, np.zeros((256, 4), np.float32))

    def good(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.exp(nl.load(x)))
        return out
    np.testing.assert_allclose(run(good, np.ones((128, 4), np.float32)).outputs[0], np.e, rtol=1e-6)
