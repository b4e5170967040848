// The op tracer's per-op work in C++ (trace_native.py builds and loads it).
//
// A boxed fallback on one dispatch key, active on the threads whose TLS include set holds
// that key (and on the autograd threads their backward runs on, which inherit it). For each
// aten call it records the operator and its arguments (tensors as dtype, shape and device,
// other values as they are) into a fixed-size ring, excludes its key and runs the op. Python
// runs only for the registered operators (the prechecks, before the kernel, given the range
// of the index argument read here) and for a call that throws (its live arguments). Operators whose kernel is CompositeImplicitAutograd are
// passed through unrecorded with the key still included, so the calls they decompose into
// are recorded, as a dispatch mode (which sits below autograd) sees them. The calls made while
// torch.compile traces (its fake tensors) are not recorded.

#include <torch/extension.h>
#include <torch/library.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

namespace py = pybind11;
using c10::IValue;

enum class Kind : uint8_t { Value, Tensor, List };

struct Arg {
  Kind kind = Kind::Value;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::Device device{c10::kCPU};
  c10::SmallVector<int64_t, 6> sizes;
  IValue value;
  std::vector<Arg> items;
};

struct Call {
  const c10::FunctionSchema* schema = nullptr;
  std::vector<Arg> args;
};

struct Facts {
  bool composite;
  bool hooked;
  int64_t index_arg;  // the watched operator's index argument whose range is read, or -1
  uint64_t version;
  const c10::FunctionSchema* schema;  // kept_schema's copy: what the ring's calls point at
};

c10::DispatchKey g_key = c10::DispatchKey::TESTING_ONLY_GenericMode;
std::unique_ptr<torch::Library> g_library;
std::mutex g_mutex;  // the ring and the watched operators
std::vector<Call> g_ring;
size_t g_next = 0;
size_t g_count = 0;
std::unordered_map<std::string, int64_t> g_hooked;
// A copy of each operator's schema seen, kept for the process's life: the ring points at
// these, so a call recorded before its operator's library was torn down (a custom operator
// deregistered) still reads a schema that exists.
std::unordered_map<std::string, std::unique_ptr<const c10::FunctionSchema>> g_schemas;
std::atomic<uint64_t> g_version{1};
// Never destroyed: they would be released at exit without the GIL.
py::object* g_on_call = new py::object();
py::object* g_on_failure = new py::object();
py::object* g_tensor_mark = new py::object();

thread_local std::unordered_map<const void*, Facts> t_facts;
thread_local Call t_scratch;
thread_local std::vector<IValue> t_saved;

// Called with g_mutex held.
const c10::FunctionSchema* kept_schema(const c10::FunctionSchema& schema) {
  auto& kept = g_schemas[schema.name() + "." + schema.overload_name()];
  if (!kept) {
    kept = std::make_unique<const c10::FunctionSchema>(schema);
  }
  return kept.get();
}

const Facts& facts_of(const c10::OperatorHandle& op) {
  const void* id = &op.operator_name();
  uint64_t version = g_version.load(std::memory_order_relaxed);
  auto found = t_facts.find(id);
  if (found != t_facts.end() && found->second.version == version) {
    return found->second;
  }
  bool hooked;
  int64_t index_arg = -1;
  const c10::FunctionSchema* schema;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto watched = g_hooked.find(op.operator_name().name);
    hooked = watched != g_hooked.end();
    if (hooked) {
      index_arg = watched->second;
    }
    schema = kept_schema(op.schema());
  }
  bool composite = op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
  Facts& facts = t_facts[id];
  facts = Facts{composite, hooked, index_arg, version, schema};
  return facts;
}

void fill(Arg& arg, const IValue& value);

bool tracing() {
  using c10::impl::TorchDispatchModeKey;
  using c10::impl::TorchDispatchModeTLS;
  return TorchDispatchModeTLS::get_mode(TorchDispatchModeKey::FAKE).has_value() ||
      TorchDispatchModeTLS::get_mode(TorchDispatchModeKey::PROXY).has_value() ||
      TorchDispatchModeTLS::get_mode(TorchDispatchModeKey::FUNCTIONAL).has_value();
}

// A Python number the dispatcher wrapped in a tensor (`x * 2`), as the number: what a Python
// dispatch mode receives.
IValue wrapped_number(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case c10::ScalarType::Bool:
      return IValue(*t.const_data_ptr<bool>());
    case c10::ScalarType::Long:
      return IValue(*t.const_data_ptr<int64_t>());
    case c10::ScalarType::Double:
      return IValue(*t.const_data_ptr<double>());
    case c10::ScalarType::ComplexDouble:
      return IValue(*t.const_data_ptr<c10::complex<double>>());
    default:
      return IValue(t);
  }
}

void fill_tensor(Arg& arg, const at::Tensor& t) {
  arg.items.clear();
  if (!t.defined() || t.unsafeGetTensorImpl()->is_wrapped_number()) {
    arg.kind = Kind::Value;
    arg.value = t.defined() ? wrapped_number(t) : IValue();
    return;
  }
  arg.kind = Kind::Tensor;
  arg.value = IValue();
  arg.dtype = t.scalar_type();
  arg.device = t.device();
  arg.sizes.clear();
  for (const c10::SymInt& size : t.sym_sizes()) {
    auto known = size.maybe_as_int();
    arg.sizes.push_back(known ? *known : -1);
  }
}

void fill(Arg& arg, const IValue& value) {
  if (value.isTensor()) {
    fill_tensor(arg, value.toTensor());
    return;
  }
  if (value.isList()) {
    auto items = value.toListRef();
    bool tensors = false;
    for (const IValue& item : items) {
      tensors = tensors || item.isTensor();
    }
    if (tensors) {
      arg.kind = Kind::List;
      arg.value = IValue();
      arg.items.resize(items.size());
      for (size_t i = 0; i < items.size(); ++i) {
        fill(arg.items[i], items[i]);
      }
      return;
    }
  }
  arg.kind = Kind::Value;
  arg.items.clear();
  arg.value = value;
}

void commit(Call& call) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_ring.empty()) {
    return;
  }
  std::swap(g_ring[g_next], call);
  g_next = (g_next + 1) % g_ring.size();
  g_count = std::min(g_count + 1, g_ring.size());
}

// Values as a Python dispatch mode receives them: dtypes, layouts and memory formats as
// their torch objects (the dispatcher keeps them as integers).
py::object value_to_py(const c10::Argument& argument, const IValue& value) {
  if (value.isNone()) {
    return py::none();
  }
  c10::TypePtr type = argument.real_type();
  if (auto optional = type->cast<c10::OptionalType>()) {
    type = optional->getElementType();
  }
  if (type->kind() == c10::ScalarTypeType::Kind && value.isInt()) {
    return py::reinterpret_borrow<py::object>(
        reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(value.toInt()))));
  }
  if (type->kind() == c10::LayoutType::Kind && value.isInt()) {
    return py::reinterpret_borrow<py::object>(
        reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<c10::Layout>(value.toInt()))));
  }
  if (type->kind() == c10::MemoryFormatType::Kind && value.isInt()) {
    return py::reinterpret_borrow<py::object>(
        torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(value.toInt())));
  }
  return torch::jit::toPyObject(value);
}

py::object recorded_to_py(const c10::Argument& argument, const Arg& arg) {
  if (arg.kind == Kind::Tensor) {
    py::tuple shape(arg.sizes.size());
    for (size_t i = 0; i < arg.sizes.size(); ++i) {
      shape[i] = py::int_(arg.sizes[i]);
    }
    py::object dtype = py::reinterpret_borrow<py::object>(
        reinterpret_cast<PyObject*>(torch::getTHPDtype(arg.dtype)));
    py::object device = py::reinterpret_steal<py::object>(THPDevice_New(arg.device));
    return py::make_tuple(*g_tensor_mark, dtype, shape, device);
  }
  if (arg.kind == Kind::List) {
    py::list items;
    for (const Arg& item : arg.items) {
      items.append(item.kind == Kind::Value ? torch::jit::toPyObject(item.value)
                                            : recorded_to_py(argument, item));
    }
    return std::move(items);
  }
  return value_to_py(argument, arg.value);
}

bool is_default(const c10::Argument& argument, const Arg& arg) {
  return arg.kind == Kind::Value && argument.default_value().has_value() &&
      *argument.default_value() == arg.value;
}

bool is_default(const c10::Argument& argument, const IValue& value) {
  return argument.default_value().has_value() && *argument.default_value() == value;
}

// (args, kwargs) as a Python dispatch mode receives them: trailing positional arguments left
// at their defaults dropped, keyword-only ones given only when not at their defaults.
template <typename Item, typename ToPy>
std::pair<py::tuple, py::dict> split_args(const c10::FunctionSchema& schema,
                                          c10::ArrayRef<Item> items, ToPy to_py) {
  const auto& arguments = schema.arguments();
  size_t n = std::min(items.size(), arguments.size());
  size_t kwarg_only_start = n;
  while (kwarg_only_start > 0 && arguments[kwarg_only_start - 1].kwarg_only()) {
    --kwarg_only_start;
  }
  py::dict kwargs;
  for (size_t i = kwarg_only_start; i < n; ++i) {
    if (!is_default(arguments[i], items[i])) {
      kwargs[py::str(arguments[i].name())] = to_py(arguments[i], items[i]);
    }
  }
  size_t positional = kwarg_only_start;
  while (positional > 0 && is_default(arguments[positional - 1], items[positional - 1])) {
    --positional;
  }
  py::tuple args(positional);
  for (size_t i = 0; i < positional; ++i) {
    args[i] = to_py(arguments[i], items[i]);
  }
  return {args, kwargs};
}

// (min, max) of an integer tensor of plain values (no Python dispatch on the way: no tensor
// subclass, no dispatch mode), read with one device synchronisation; else nothing.
std::optional<std::pair<int64_t, int64_t>> value_range(const IValue& value) {
  if (!value.isTensor()) {
    return std::nullopt;
  }
  const at::Tensor& t = value.toTensor();
  if (!t.defined() || t.numel() == 0 || !c10::isIntegralType(t.scalar_type(), false) ||
      t.is_meta() || t.key_set().has(c10::DispatchKey::Python) ||
      c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Python)) {
    return std::nullopt;
  }
  auto [least, most] = at::aminmax(t);
  if (t.is_cpu()) {
    return std::make_pair(least.item<int64_t>(), most.item<int64_t>());
  }
  at::Tensor both = at::stack({least, most}).to(at::kLong).cpu();
  const int64_t* read = both.const_data_ptr<int64_t>();
  return std::make_pair(read[0], read[1]);
}

void call_python(const py::object& callback, const c10::OperatorHandle& op,
                 c10::ArrayRef<IValue> arguments, int64_t index_arg) {
  c10::impl::ExcludeDispatchKeyGuard not_traced(g_key);
  std::optional<std::pair<int64_t, int64_t>> range;
  if (index_arg >= 0 && static_cast<size_t>(index_arg) < arguments.size()) {
    range = value_range(arguments[index_arg]);
  }
  py::gil_scoped_acquire gil;
  const auto& schema = op.schema();
  auto split = split_args(schema, arguments, value_to_py);
  py::object known = range ? py::object(py::make_tuple(range->first, range->second))
                           : py::object(py::none());
  callback(schema.name(), schema.overload_name(), split.first, split.second, known);
}

void report_failure(const c10::OperatorHandle& op) {
  c10::impl::ExcludeDispatchKeyGuard not_traced(g_key);
  py::gil_scoped_acquire gil;
  if (!*g_on_failure) {
    return;
  }
  // An error a Python kernel raised (a dispatch mode's, a tensor subclass's) is still set
  // while torch carries it up as a C++ exception: kept aside while the callback runs.
  py::error_scope raised;
  try {
    const auto& schema = op.schema();
    auto split = split_args(schema, c10::ArrayRef<IValue>(t_saved), value_to_py);
    (*g_on_failure)(schema.name(), schema.overload_name(), split.first, split.second);
  } catch (py::error_already_set& error) {
    error.discard_as_unraisable("cudadiag's op tracer, recording a failing call");
  }
}

void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  c10::DispatchKeySet rest = keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, g_key);
  const Facts& facts = facts_of(op);
  // Passed through unrecorded, the key still included: composite operators (the calls they
  // decompose into are recorded), calls on meta tensors (no values), and the calls made
  // while torch.compile traces (its fake, proxy and functional modes).
  if (facts.composite || keys.has_backend(c10::BackendComponent::MetaBit) ||
      (keys.has(c10::DispatchKey::Python) && tracing())) {
    op.redispatchBoxed(rest, stack);
    return;
  }
  const auto& schema = op.schema();
  size_t n = schema.arguments().size();
  c10::ArrayRef<IValue> arguments(stack->data() + stack->size() - n, n);
  if (facts.hooked && *g_on_call) {
    call_python(*g_on_call, op, arguments, facts.index_arg);
  }
  Call& call = t_scratch;
  call.schema = facts.schema;
  call.args.resize(n);
  bool meta = false;
  for (size_t i = 0; i < n; ++i) {
    fill(call.args[i], arguments[i]);
    meta = meta || (arguments[i].isDevice() && arguments[i].toDevice().is_meta());
  }
  if (meta) {  // a factory making a meta tensor (torch.compile's fake tensors are made so)
    op.redispatchBoxed(rest, stack);
    return;
  }
  t_saved.assign(arguments.begin(), arguments.end());
  try {
    c10::impl::ExcludeDispatchKeyGuard not_traced(g_key);
    op.redispatchBoxed(rest, stack);
  } catch (...) {
    report_failure(op);
    t_saved.clear();
    throw;
  }
  t_saved.clear();
  commit(call);
}

void install(const std::string& key) {
  if (g_library) {
    return;
  }
  g_key = c10::parseDispatchKey(key);
  g_library = std::make_unique<torch::Library>(
      torch::Library::IMPL, "_", std::optional<c10::DispatchKey>(g_key), __FILE__, __LINE__);
  g_library->fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

void uninstall() {
  g_library.reset();
}

void reset(size_t keep) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_ring.clear();
  g_ring.resize(keep);
  g_next = 0;
  g_count = 0;
}

void set_hooks(const std::unordered_map<std::string, int64_t>& watched, py::object on_call,
               py::object on_failure, py::object tensor_mark) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_hooked = watched;
  }
  *g_on_call = std::move(on_call);
  *g_on_failure = std::move(on_failure);
  *g_tensor_mark = std::move(tensor_mark);
  g_version.fetch_add(1);
}

py::list recent() {
  std::lock_guard<std::mutex> lock(g_mutex);
  py::list calls;
  size_t size = g_ring.size();
  for (size_t k = 0; k < g_count; ++k) {
    const Call& call = g_ring[(g_next + size - g_count + k) % size];
    auto split = split_args(*call.schema, c10::ArrayRef<Arg>(call.args), recorded_to_py);
    calls.append(py::make_tuple(call.schema->name(), call.schema->overload_name(), split.first,
                                split.second.empty() ? py::object(py::none())
                                                     : py::object(split.second)));
  }
  return calls;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("install", &install, "register the fallback on the dispatch key named `key` (once)");
  m.def("uninstall", &uninstall, "remove the fallback");
  m.def("reset", &reset, "empty the ring and give it `keep` places");
  m.def("set_hooks", &set_hooks,
        "the operators (`aten::embedding`) on which on_call runs before the kernel, each "
        "with the position of the argument whose (min, max) on_call is given (-1: none), "
        "the callback of a call that throws, and the first item of a recorded tensor's "
        "tuple");
  m.def("recent", &recent, "the ring's calls, oldest first: (name, overload, args, kwargs)");
}
