// The C++ side of the `neuron` device (PrivateUse1): what PyTorch only accepts from C++.
//
// - A DeviceAllocator backed by host memory, so storages created directly on the device
//   (torch.UntypedStorage(n, device="neuron"), storage resize_) have real bytes instead of
//   dereferencing a missing allocator, and torch.accelerator.memory_* has an allocator to ask.
// - PrivateUse1 hooks (availability, default generator, storage resize) and a device guard
//   whose synchronizeDevice exists (the simulator is synchronous: nothing to wait for) and
//   whose timing events read the simulated clock through Python callbacks.
// - The scaled_dot_product_attention backend choice: where CPU would run its flash kernel, the
//   device takes SDPA's "overrideable" fused path, as TorchNeuron does (its
//   _fused_sdp_choice_neuron returns overrideable), instead of the unfused math path.
// - A timer for DistributedDataParallel's runtime statistics: DDP looks one up by the
//   parameters' device type and, finding none, warns on every job that it collects time stats
//   only for CPU and CUDA.
//
// Device tensors themselves stay Python wrapper subclasses holding host tensors; their memory
// is booked by backend/device/memory.py, which the allocator's statistics ask through a
// callback. Plain C entry points (loaded with ctypes) keep pybind11 out of the build.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace {

constexpr c10::DeviceType kDevice = c10::DeviceType::PrivateUse1;

// Books of the simulated device, filled by Python: allocated current/peak, reserved
// current/peak, allocations, frees, OOMs, capacity. Returns 0 when the device has no books.
enum PoolField { kAllocCur, kAllocPeak, kResCur, kResPeak, kAllocs, kFrees, kOoms, kCapacity, kFields };
using PoolStatsFn = int (*)(int device, int64_t* out);
using PoolResetFn = void (*)(int device, int peak_only);

PoolStatsFn pool_stats = nullptr;
PoolResetFn pool_reset = nullptr;

// Timing events (torch.Event("neuron", enable_timing=True)) read the simulated clock, which
// Python keeps (backend/device/event_clock.py): recording stamps the event and returns a handle
// to the stamp, elapsed compares two stamps (NaN: different simulated timelines), release drops
// one. Cleared at interpreter exit, after which events record nothing.
using EventStampFn = int64_t (*)(int64_t previous);
using EventElapsedFn = double (*)(int64_t start, int64_t end);
using EventReleaseFn = void (*)(int64_t handle);
std::atomic<EventStampFn> event_stamp{nullptr};
std::atomic<EventElapsedFn> event_elapsed{nullptr};
std::atomic<EventReleaseFn> event_release{nullptr};

// This thread's current NeuronCore, as CUDA keeps a current device per thread (the guard below
// sets it; backend/device/neuron_module.py reads it).
thread_local c10::DeviceIndex current_device = 0;

// Storages this allocator made on one NeuronCore (torch.UntypedStorage(n, device="neuron:i")).
struct CoreBooks {
  int64_t current = 0, peak = 0, allocs = 0, frees = 0;
};
constexpr int kMaxCores = 64;

struct HostBackedAllocator final : c10::DeviceAllocator {
  std::mutex mutex;
  std::unordered_map<void*, std::pair<size_t, c10::DeviceIndex>> sizes;
  CoreBooks cores[kMaxCores];

  // A storage is made on the current device: PyTorch's storage constructor guards the device
  // it was asked for (neuron:7, or the current one inside torch.neuron.device(3)) around this call.
  c10::DataPtr allocate(size_t nbytes) override { return allocate_on(nbytes, current_device); }

  c10::DataPtr allocate_on(size_t nbytes, c10::DeviceIndex device) {
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (data) {
      std::lock_guard<std::mutex> lock(mutex);
      sizes[data] = {nbytes, device};
      CoreBooks& books = core(device);
      books.current += static_cast<int64_t>(nbytes);
      books.peak = std::max(books.peak, books.current);
      ++books.allocs;
    }
    return {data, data, &release, c10::Device(kDevice, device)};
  }

  CoreBooks& core(c10::DeviceIndex device) { return cores[std::clamp<int>(device, 0, kMaxCores - 1)]; }

  c10::DeviceIndex device_of(void* data) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = sizes.find(data);
    return it == sizes.end() ? current_device : it->second.second;
  }

  static void release(void* data);

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}              // nothing is cached
  void recordStream(const c10::DataPtr&, c10::Stream) override {}  // one synchronous stream

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    int64_t books[kFields] = {0};
    if (pool_stats == nullptr || pool_stats(device, books) == 0) {
      std::fill(books, books + kFields, 0);
    }
    std::lock_guard<std::mutex> lock(mutex);
    const CoreBooks& own = core(device);
    c10::CachingDeviceAllocator::DeviceStats stats;
    auto set = [](c10::CachingDeviceAllocator::StatArray& array, int64_t cur, int64_t top,
                  int64_t allocated, int64_t freed) {
      for (auto& stat : array) {
        stat.current = cur;
        stat.peak = top;
        stat.allocated = allocated;
        stat.freed = freed;
      }
    };
    // Device tensors (the Python books) plus storages made directly by this allocator; the
    // peak of a sum is at most the sum of the peaks, which is what is reported.
    set(stats.allocated_bytes, books[kAllocCur] + own.current, books[kAllocPeak] + own.peak, 0, 0);
    set(stats.active_bytes, books[kAllocCur] + own.current, books[kAllocPeak] + own.peak, 0, 0);
    set(stats.requested_bytes, books[kAllocCur] + own.current, books[kAllocPeak] + own.peak, 0, 0);
    set(stats.reserved_bytes, books[kResCur] + own.current, books[kResPeak] + own.peak, 0, 0);
    set(stats.allocation, books[kAllocs] - books[kFrees] + own.allocs - own.frees, 0,
        books[kAllocs] + own.allocs, books[kFrees] + own.frees);
    stats.num_ooms = books[kOoms];
    return stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    if (pool_reset) pool_reset(device, 0);
    std::lock_guard<std::mutex> lock(mutex);
    core(device).allocs = core(device).frees = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    if (pool_reset) pool_reset(device, 1);
    std::lock_guard<std::mutex> lock(mutex);
    core(device).peak = core(device).current;
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    int64_t books[kFields] = {0};
    TORCH_CHECK(pool_stats != nullptr && pool_stats(device, books) != 0,
                "neuron:", static_cast<int>(device), " has no memory books yet; use the device first");
    std::lock_guard<std::mutex> lock(mutex);
    const int64_t used = books[kAllocCur] + core(device).current;
    return {static_cast<size_t>(std::max<int64_t>(books[kCapacity] - used, 0)),
            static_cast<size_t>(books[kCapacity])};
  }
};

// Never destroyed: c10 keeps a pointer to it, and storages may be freed during interpreter exit.
HostBackedAllocator& allocator = *new HostBackedAllocator();

void HostBackedAllocator::release(void* data) {
  if (data == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(allocator.mutex);
    auto it = allocator.sizes.find(data);
    if (it != allocator.sizes.end()) {
      CoreBooks& books = allocator.core(it->second.second);
      books.current -= static_cast<int64_t>(it->second.first);
      ++books.frees;
      allocator.sizes.erase(it);
    }
  }
  c10::free_cpu(data);
}

// NeuronCores of the simulated chip (the most Python has reported: it only grows, since the
// autograd engine sizes its per-device queues once; backend/device/neuron_module.py: device_count).
std::atomic<int> device_count{1};

struct NeuronHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(device_count.load()); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device; }
  void setCurrentDevice(c10::DeviceIndex device) const override { check(device); select(device); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    check(device);
    const c10::DeviceIndex previous = current_device;
    select(device);
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }

  // Device values are computed on the host, so the device draws from the host generator
  // (backend/device/generator.py states the same contract for torch.Generator("neuron")).
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }

  at::Device getDeviceFromPtr(void* data) const override { return {kDevice, allocator.device_of(data)}; }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    // A wrapper subclass's bookkeeping storage (a device tensor's, whose values live in its
    // host tensor) holds no bytes: only its size changes, as FSDP2 expects of resize_.
    if (impl->data_ptr().get() == nullptr && impl->allocator() != &allocator) {
      impl->set_nbytes(newsize);
      return;
    }
    c10::DataPtr data = allocator.allocate_on(newsize, storage.device().index());
    const size_t kept = std::min(impl->nbytes(), newsize);
    if (kept > 0) std::memcpy(data.get(), impl->data_ptr().get(), kept);
    impl->set_data_ptr_noswap(std::move(data));
    impl->set_nbytes(newsize);
  }

  static void check(c10::DeviceIndex device) {
    const int count = device_count.load();
    TORCH_CHECK(device >= -1 && device < count, "Invalid device index neuron:", static_cast<int>(device),
                ": the simulated chip has ", count, " NeuronCore(s), neuron:0 to neuron:", count - 1);
  }
  static void select(c10::DeviceIndex device) {
    if (device >= 0) current_device = device;   // -1: keep the current device
  }
};

// Like the Python-backend guard PyTorch registers by default, plus synchronizeDevice.
struct NeuronGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDevice; }
  c10::Device exchangeDevice(c10::Device device) const override {
    NeuronHooks::check(device.index());
    const c10::Device previous(kDevice, current_device);
    NeuronHooks::select(device.index());
    return previous;
  }
  c10::Device getDevice() const override { return {kDevice, current_device}; }
  void setDevice(c10::Device device) const override {
    NeuronHooks::check(device.index());
    NeuronHooks::select(device.index());
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override { NeuronHooks::select(device.index()); }
  c10::Stream getStream(c10::Device device) const noexcept override { return defaultStream(device); }
  c10::Stream getNewStream(c10::Device device, int) const override { return defaultStream(device); }
  c10::Stream exchangeStream(c10::Stream stream) const noexcept override { return defaultStream(stream.device()); }
  c10::DeviceIndex deviceCount() const noexcept override { return static_cast<c10::DeviceIndex>(device_count.load()); }
  // An event is a handle to its stamp, stored in the void* itself (0: never stamped).
  void record(void** event, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag flag) const override {
    if (flag != c10::EventFlag::BACKEND_DEFAULT) return;   // not a timing event: nothing to stamp
    const EventStampFn stamp = event_stamp.load();
    TORCH_CHECK(stamp != nullptr, "neuron timing events need the simulated clock, which is not available");
    const int64_t handle = stamp(reinterpret_cast<int64_t>(*event));
    TORCH_CHECK(handle != 0, "neuron: reading the simulated clock failed (see the logged error)");
    *event = reinterpret_cast<void*>(handle);
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr, "Both events must be recorded before calculating elapsed time.");
    const EventElapsedFn elapsed = event_elapsed.load();
    TORCH_CHECK(elapsed != nullptr, "neuron timing events need the simulated clock, which is not available");
    const double ms = elapsed(reinterpret_cast<int64_t>(start), reinterpret_cast<int64_t>(end));
    TORCH_CHECK(!std::isnan(ms), "The two events were recorded on different simulated timelines (one inside a "
                "profile, one outside it, or in two profiles); record both in the same one.");
    return ms;
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    const EventReleaseFn release = event_release.load();
    if (event != nullptr && release != nullptr) release(reinterpret_cast<int64_t>(event));
  }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}  // ops finish when they return

  static c10::Stream defaultStream(c10::Device device) {
    const c10::DeviceIndex index = device.index() >= 0 ? device.index() : current_device;
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kDevice, index));
  }
};

// SDPA's backend on the device: the fused (overrideable) op where CPU would run its flash kernel
// -- CPU's own conditions, as ATen's select_sdp_backend_cpp checks them (sdpa_kernel settings,
// no dropout, dense 4-D inputs, a mask needing no gradient, equal head dims, unit last-dim
// strides, non-empty sequences, matching batch and heads) -- so the host runs the kernel CPU
// runs; everything else takes the math path, as on CPU. One difference: grouped-query attention
// (enable_gqa, query heads a multiple of the key/value heads) also takes the fused op, with K and
// V as given, as Neuron's flash kernels read each KV head once for its group of query heads;
// CPU's flash kernel has no GQA, so the host kernel repeats K/V for it (host_kernels.py).
int64_t neuron_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                          const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                          std::optional<double> scale, bool enable_gqa) {
  const auto math = static_cast<int64_t>(sdp::SDPBackend::math);
  auto& ctx = at::globalContext();
  if (!ctx.userEnabledFlashSDP()) {
    return math;
  }
  if (dropout_p > 0.0 || query.is_nested() || key.is_nested() || value.is_nested()) {
    return math;
  }
  if (query.dim() != 4 || key.dim() != 4 || value.dim() != 4) {
    return math;
  }
  if (attn_mask.has_value() && attn_mask->defined() &&
      (attn_mask->requires_grad() || (attn_mask->dim() != 2 && attn_mask->dim() != 4))) {
    return math;
  }
  const auto head_dim = query.sym_size(-1);
  if (key.sym_size(-1) != head_dim || value.sym_size(-1) != head_dim) {
    return math;
  }
  if (query.sym_stride(-1) != 1 || key.sym_stride(-1) != 1 || value.sym_stride(-1) != 1) {
    return math;
  }
  if (query.sym_size(-2) == 0 || key.sym_size(-2) == 0) {
    return math;
  }
  const bool same_batch = query.sym_size(0) == key.sym_size(0) && query.sym_size(0) == value.sym_size(0);
  const bool same_heads = query.sym_size(1) == key.sym_size(1) && query.sym_size(1) == value.sym_size(1);
  // ATen's check_grouped_query_attention: equal K and V heads dividing the query heads
  const bool grouped = enable_gqa && key.sym_size(1) == value.sym_size(1) && key.sym_size(1) > 0 &&
                       query.sym_size(1) % key.sym_size(1) == 0;
  if (!same_batch || !(same_heads || grouped)) {
    return math;
  }
  return static_cast<int64_t>(sdp::SDPBackend::overrideable);
}

}  // namespace

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &neuron_sdp_choice)
}  // namespace at::native

namespace c10d {
namespace {
// DDP's time stats on the device (forward, backward compute, communication, their overlap, in
// _get_ddp_logging_data()): host timestamps, as CPU's timer takes them, since the device runs
// synchronously on the host. The simulated time of the same step is in the workbench's profile.
class NeuronDdpTimer : public Timer {
 public:
  explicit NeuronDdpTimer(c10::Device /*device*/) {}

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    const int64_t start_time = getTimeRef(start);
    const int64_t end_time = getTimeRef(end);
    // A step without the end event (no communication, say) or one recorded out of order.
    if (start_time == kUnsetTime || end_time == kUnsetTime || end_time < start_time) {
      return std::nullopt;
    }
    return end_time - start_time;
  }
};
}  // namespace

C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, NeuronDdpTimer)
}  // namespace c10d

// What neuron_install registered (bit flags), so Python can log and test it.
enum Installed { kAllocator = 1, kHooks = 2, kGuard = 4 };

extern "C" int neuron_install(PoolStatsFn stats, PoolResetFn reset) {
  static std::once_flag once;
  static int installed = 0;
  pool_stats = stats;
  pool_reset = reset;
  std::call_once(once, [] {
    // Keep the workbench's allocator (priority 1) if PrivateUse1 somehow has another already.
    c10::SetAllocator(kDevice, &allocator, 1);
    installed |= kAllocator;
    if (!at::isPrivateUse1HooksRegistered()) {
      static NeuronHooks hooks;
      at::RegisterPrivateUse1HooksInterface(&hooks);
      installed |= kHooks;
    }
    if (!c10::impl::hasDeviceGuardImpl(kDevice)) {
      static NeuronGuard guard;
      static c10::impl::DeviceGuardImplRegistrar registrar(kDevice, &guard);
      installed |= kGuard;
    }
  });
  return installed;
}

// The chip's NeuronCore count as Python sees it (visible cores at the selected LNC); the count
// C++ reports only grows, so indices the autograd engine has queues for stay valid.
extern "C" void neuron_set_device_count(int count) {
  int seen = device_count.load();
  while (count > seen && !device_count.compare_exchange_weak(seen, count)) {
  }
}

// This thread's current NeuronCore: torch.neuron.current_device() / set_device().
extern "C" int neuron_current_device() { return current_device; }

// Storages the allocator made on ``device``: current and peak bytes (torch.neuron.memory_*).
extern "C" void neuron_storage_bytes(int device, int64_t* out) {
  std::lock_guard<std::mutex> lock(allocator.mutex);
  const CoreBooks& books = allocator.core(static_cast<c10::DeviceIndex>(device));
  out[0] = books.current;
  out[1] = books.peak;
}
extern "C" void neuron_set_current_device(int device) { current_device = static_cast<c10::DeviceIndex>(device); }

// The simulated clock of timing events (all null: events record nothing, at interpreter exit).
extern "C" void neuron_set_event_clock(EventStampFn stamp, EventElapsedFn elapsed, EventReleaseFn release) {
  event_stamp.store(stamp);
  event_elapsed.store(elapsed);
  event_release.store(release);
}
