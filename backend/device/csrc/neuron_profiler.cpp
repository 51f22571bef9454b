// The `neuron` device's activity profiler for Kineto: how torch.profiler sees the simulated device.
//
// `torch.profiler.profile(activities=[CPU, PrivateUse1])` asks Kineto for PrivateUse1 activities;
// Kineto gets them from the IActivityProfiler a PrivateUse1 backend registers with
// REGISTER_PRIVATEUSE1_PROFILER (torch/csrc/profiler/standalone/privateuse1_profiler.h), as
// torch_openreg does. This one turns the simulator's timeline into Kineto activities:
//
// - While a session records, Python (backend/device/profiler.py) runs a simulator over the
//   device's op stream and reports every simulated op here (`neuron_profiler_op`), on the thread
//   that ran it. The op is tagged with the correlation id Kineto pushed for the innermost
//   PyTorch op running on that thread, so PyTorch attaches its device time to that op
//   (key_averages' device columns) and the trace links the two.
// - Each op becomes a launch on the host thread (PRIVATEUSE1_RUNTIME: the host time spent
//   handing it to the simulated device) and a kernel or copy on the device (CONCURRENT_KERNEL /
//   GPU_MEMCPY) on stream 1, collectives on stream 2 (their own lane, as NCCL's stream), joined
//   by an "ac2g" flow, with `correlation`, `device` and `stream` args as CUPTI's kernels have.
// - Device times are the simulator's clock: its zero is the host time the first op was launched,
//   so the device track shows what the NeuronCore would do if the host kept it fed. The host
//   here also computes every value on the CPU and is far slower than a real one, so kernels may
//   sit before their launch on the host track; their durations are exact simulated times.
//
// The legacy profiler (torch.autograd.profiler.profile(use_device="neuron"), use_kineto=False:
// PyTorch's KINETO_PRIVATEUSE1_FALLBACK) instead asks the ProfilerStubs registered with
// registerPrivateUse1Methods for an event at each op's start and end, and takes the time between
// them as the op's device time; here an event is the simulated clock (Python's `sim_clock`, which
// starts a simulator for the profile if none runs), so an op's device time is the simulated time
// of the device work it issued, its children's included, as CUDA events measure it.
//
// Plain C entry points (loaded with ctypes) keep pybind11 out of the build, as neuron_hooks.cpp;
// it is built with USE_KINETO (torch's Kineto headers) and FMT_HEADER_ONLY (Kineto's activities
// format their metadata with fmt, which libtorch does not export).
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <libkineto.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

using libkineto::ActivityType;

enum OpKind { kCompute = 0, kCopy = 1, kCollective = 2 };
enum Stream { kComputeStream = 1, kCollectiveStream = 2 };

// Python's side of a session: open the simulator on start (which names the device for the
// trace), close it on stop.
using SessionFn = void (*)();
SessionFn on_start = nullptr;
SessionFn on_stop = nullptr;
using ClockFn = double (*)();
ClockFn sim_clock = nullptr;   // the simulated clock (ns) of the profile recording now
std::string device_label = "neuron (simulated)";   // e.g. "neuron (simulated trn2)"

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The correlation ids Kineto pushed for the PyTorch ops running on this thread, innermost last.
thread_local std::vector<uint64_t> correlation_stack;

// The op a device op belongs to: the innermost enclosing PyTorch op, passing over the
// "PythonSubclass" record PyTorch wraps around a tensor subclass's __torch_dispatch__ (the aten
// op the user called is the one around it).
const libkineto::ITraceActivity* owner(const std::array<uint64_t, 4>& enclosing,
                                       const libkineto::getLinkedActivityCallback& linked) {
  for (uint64_t id : enclosing) {
    if (id == 0) break;
    const libkineto::ITraceActivity* op = linked(static_cast<int32_t>(id));
    if (op != nullptr && op->name() != "PythonSubclass") return op;
  }
  return enclosing[0] ? linked(static_cast<int32_t>(enclosing[0])) : nullptr;
}

// Each launch's id, as CUPTI's correlation id: it names the launch, its kernel and the flow
// arrow between them (clear of the small ids of PyTorch's fwdbwd flows); the PyTorch op they
// belong to is their "External id".
std::atomic<int32_t> next_launch{1 << 30};

struct DeviceOp {
  std::string name;
  int kind;
  int device;
  double sim_start_ns, sim_end_ns;      // the simulator's clock
  int64_t launch_begin_ns, launch_end_ns;   // host wall clock
  std::array<uint64_t, 4> enclosing;   // correlation ids of the innermost ops running, innermost first
  int32_t host_pid, host_tid;
};

class NeuronSession;
std::mutex active_mutex;
NeuronSession* active = nullptr;   // the session recording now, if any

class NeuronSession final : public libkineto::IActivityProfilerSession {
 public:
  explicit NeuronSession(std::set<ActivityType> types) : types_(std::move(types)) {}

  ~NeuronSession() override {
    std::lock_guard<std::mutex> lock(active_mutex);
    if (active == this) active = nullptr;
  }

  void start() override {
    {
      std::lock_guard<std::mutex> lock(active_mutex);
      active = this;
    }
    status_ = libkineto::TraceStatus::RECORDING;
    if (on_start) on_start();
  }

  void stop() override {
    if (on_stop) on_stop();
    std::lock_guard<std::mutex> lock(active_mutex);
    if (active == this) active = nullptr;
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  void record(DeviceOp op) {
    std::lock_guard<std::mutex> lock(mutex_);
    ops_.push_back(std::move(op));
  }

  void pushCorrelationId(uint64_t id) override { correlation_stack.push_back(id); }
  void popCorrelationId() override {
    if (!correlation_stack.empty()) correlation_stack.pop_back();
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked, int64_t,
                    int64_t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ops_.empty()) return;
    // Simulated zero is when the first op was launched (it starts at its launch).
    const int64_t origin = ops_.front().launch_begin_ns - std::llround(ops_.front().sim_start_ns);
    const bool runtime = types_.count(ActivityType::PRIVATEUSE1_RUNTIME) > 0;
    for (const DeviceOp& op : ops_) {
      const ActivityType type = op.kind == kCopy ? ActivityType::GPU_MEMCPY : ActivityType::CONCURRENT_KERNEL;
      if (!types_.count(type)) continue;
      const libkineto::ITraceActivity* cpu_op = owner(op.enclosing, linked);
      const int32_t launch_id = next_launch++;
      if (runtime) {
        libkineto::GenericTraceActivity launch(span(), ActivityType::PRIVATEUSE1_RUNTIME, launch_name(op.kind));
        launch.startTime = op.launch_begin_ns;
        launch.endTime = op.launch_end_ns;
        launch.device = op.host_pid;
        launch.resource = op.host_tid;
        launch.threadId = op.host_tid;
        launch.id = launch_id;
        launch.linked = cpu_op;
        launch.flow.id = static_cast<uint32_t>(launch_id);
        launch.flow.type = libkineto::kLinkAsyncCpuGpu;
        launch.flow.start = true;
        launch.addMetadata("correlation", launch_id);
        launch.log(logger);
      }
      libkineto::GenericTraceActivity work(span(), type, op.name);
      work.startTime = origin + std::llround(op.sim_start_ns);
      work.endTime = origin + std::llround(op.sim_end_ns);
      work.device = op.device;
      work.resource = op.kind == kCollective ? kCollectiveStream : kComputeStream;
      work.id = launch_id;
      work.linked = cpu_op;
      if (runtime) {
        work.flow.id = static_cast<uint32_t>(launch_id);
        work.flow.type = libkineto::kLinkAsyncCpuGpu;
        work.flow.start = false;
      }
      work.addMetadata("device", op.device);
      work.addMetadata("stream", work.resource);
      work.addMetadata("correlation", launch_id);
      work.addMetadataQuoted("simulated", "true");
      work.log(logger);
      devices_.insert(op.device);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    const int device = devices_.empty() ? 0 : *devices_.begin();
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{
        device, device + kSortAfterHost, device_label, "neuron:" + std::to_string(device)});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (int device : devices_) {
      out.push_back({kComputeStream, kComputeStream, device, "stream 1 (compute)"});
      out.push_back({kCollectiveStream, kCollectiveStream, device, "stream 2 (collectives)"});
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  std::string getDeviceProperties() override {
    return "{\"id\": 0, \"name\": \"" + device_label + "\", \"simulated\": true}";
  }

 private:
  static constexpr int64_t kSortAfterHost = 0x1000000;   // device rows below the host's
  // The span the activities point to; the trace keeps copies of them after the session is gone.
  static const libkineto::TraceSpan& span() {
    static const libkineto::TraceSpan* const span = new libkineto::TraceSpan(0, 0, "neuron");
    return *span;
  }
  static const char* launch_name(int kind) {
    return kind == kCopy ? "neuronMemcpy" : kind == kCollective ? "neuronCollective" : "neuronLaunchKernel";
  }

  std::set<ActivityType> types_;
  std::mutex mutex_;
  std::vector<DeviceOp> ops_;
  std::set<int> devices_;
};

class NeuronActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& types,
                                                                 const libkineto::Config&) override {
    // A CPU-only profile asks for no device work: no session, so nothing is simulated.
    std::set<ActivityType> wanted;
    for (ActivityType type : types) {
      if (activities_.count(type)) wanted.insert(type);
    }
    if (!wanted.count(ActivityType::CONCURRENT_KERNEL) && !wanted.count(ActivityType::GPU_MEMCPY)) {
      return nullptr;
    }
    return std::make_unique<NeuronSession>(std::move(wanted));
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t, const std::set<ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"neuron"};
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
                                     ActivityType::PRIVATEUSE1_RUNTIME};
};

// The legacy profiler's device events: a time on the simulated clock.
struct NeuronStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    if (device != nullptr) *device = 0;
    if (event != nullptr) {
      auto time = std::make_shared<double>(sim_clock != nullptr ? sim_clock() : 0.0);
      *event = std::shared_ptr<void>(time, time.get());
    }
    if (cpu_ns != nullptr) *cpu_ns = now_ns();
  }
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* start,
                const torch::profiler::impl::ProfilerVoidEventStub* end) const override {   // microseconds
    return static_cast<float>((*static_cast<const double*>(end->get()) - *static_cast<const double*>(start->get())) /
                              1000.0);
  }
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override { op(0); }
  void synchronize() const override {}   // ops finish when they return
};

}  // namespace

REGISTER_PRIVATEUSE1_PROFILER(NeuronActivityProfiler);

// Python's session callbacks and the legacy profiler's clock; registers the legacy stubs.
extern "C" void neuron_profiler_install(SessionFn start, SessionFn stop, ClockFn simulated_clock) {
  on_start = start;
  on_stop = stop;
  sim_clock = simulated_clock;
  static NeuronStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
}

// The device's name in the trace (its process name and deviceProperties).
extern "C" void neuron_profiler_set_label(const char* label) { device_label = label; }

// Whether a session records now (Python's sink asks before reporting).
extern "C" int neuron_profiler_recording() {
  std::lock_guard<std::mutex> lock(active_mutex);
  return active != nullptr;
}

// One simulated op, reported on the thread that ran it: `kind` is an OpKind, times in ns
// (simulated clock; host wall clock since the epoch for the launch).
extern "C" void neuron_profiler_op(const char* name, int kind, int device, double sim_start_ns, double sim_end_ns,
                                   int64_t launch_begin_ns) {
  std::array<uint64_t, 4> enclosing{};
  auto it = correlation_stack.rbegin();
  for (size_t i = 0; i < enclosing.size() && it != correlation_stack.rend(); ++i, ++it) enclosing[i] = *it;
  DeviceOp op{name, kind, device, sim_start_ns, sim_end_ns, launch_begin_ns, now_ns(), enclosing,
              libkineto::processId(), libkineto::systemThreadId()};
  std::lock_guard<std::mutex> lock(active_mutex);
  if (active != nullptr) active->record(std::move(op));
}
