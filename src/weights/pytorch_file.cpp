#include "hpctrain/weights/pytorch_file.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <variant>

#include "hpctrain/core/error.h"

namespace hpctrain::weights {
namespace {

// Note [Restricted unpickler]: torch.save pickles a state_dict as
//   collections.OrderedDict() + SETITEMS of (name, _rebuild_tensor_v2(storage, offset, size,
//   stride, requires_grad, hooks)), a storage being a persistent id ('storage', torch.FloatStorage,
//   key, location, numel) whose bytes are the zip's data/<key>.
// Only the opcodes and globals that form such a pickle are understood; any other global (which
// Python's pickle would import and call) is refused, so a file cannot run code or allocate what
// its bytes do not hold.
struct Value;
using ValuePtr = std::shared_ptr<Value>;
struct Global {
  std::string name;  // "module.name"
};
struct Mark {};
using Items = std::vector<ValuePtr>;
using Entries = std::vector<std::pair<ValuePtr, ValuePtr>>;
struct Value {
  std::variant<std::monostate, bool, std::int64_t, double, std::string, Items, Entries, Global, at::Tensor, Mark> v;
  bool tuple = false;  // Items: a tuple rather than a list
};

const std::map<std::string, at::ScalarType> kStorageTypes = {
    {"torch.DoubleStorage", at::kDouble}, {"torch.FloatStorage", at::kFloat}, {"torch.HalfStorage", at::kHalf},
    {"torch.BFloat16Storage", at::kBFloat16}, {"torch.LongStorage", at::kLong}, {"torch.IntStorage", at::kInt},
    {"torch.ShortStorage", at::kShort}, {"torch.CharStorage", at::kChar}, {"torch.ByteStorage", at::kByte},
    {"torch.BoolStorage", at::kBool}};

const char* const kCallables[] = {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2",
                                  "torch._utils._rebuild_parameter"};

class Unpickler {
 public:
  Unpickler(const std::uint8_t* data, std::int64_t size, const StorageLoader& storage, std::string where)
      : p_(data), end_(data + size), storage_(storage), where_(std::move(where)) {}

  ckpt::NamedTensors run();

 private:
  [[noreturn]] void refuse(const std::string& what) const {
    throw CheckpointError(where_ + ": not a state_dict hpctrain reads: " + what);
  }
  const std::uint8_t* take(std::int64_t n) {
    if (n < 0 || n > end_ - p_) refuse("the pickle ends inside an instruction");
    const std::uint8_t* at = p_;
    p_ += n;
    return at;
  }
  std::uint64_t little(int n) {
    const std::uint8_t* b = take(n);
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | b[i];
    return v;
  }
  std::string line() {
    const auto* nl = static_cast<const std::uint8_t*>(std::memchr(p_, '\n', static_cast<size_t>(end_ - p_)));
    if (nl == nullptr) refuse("a global's name has no end");
    std::string text(reinterpret_cast<const char*>(p_), static_cast<size_t>(nl - p_));
    p_ = nl + 1;
    return text;
  }
  void push(Value v) { stack_.push_back(std::make_shared<Value>(std::move(v))); }
  ValuePtr pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) refuse("an instruction has no operand");
    ValuePtr v = stack_.back();
    stack_.pop_back();
    return v;
  }
  ValuePtr& top() {
    if (stack_.empty()) refuse("an instruction has no operand");
    return stack_.back();
  }
  Items pop_to_mark() {
    if (marks_.empty()) refuse("a MARK is missing");
    Items items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  template <typename T>
  T& as(const ValuePtr& v, const char* what) {
    if (!std::holds_alternative<T>(v->v)) refuse(std::string("expected ") + what);
    return std::get<T>(v->v);
  }
  void push_tuple(Items items) {
    Value v{std::move(items)};
    v.tuple = true;
    push(std::move(v));
  }
  void push_string(std::int64_t n) {
    const std::uint8_t* b = take(n);
    push(Value{std::string(reinterpret_cast<const char*>(b), static_cast<size_t>(n))});
  }
  void global(const std::string& name);
  void set_items(Items items);
  void reduce();
  void persistent_id();
  at::Tensor rebuild_tensor(const Items& args);
  bool step();

  const std::uint8_t* p_;
  const std::uint8_t* end_;
  const StorageLoader& storage_;
  std::string where_;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::map<std::uint64_t, ValuePtr> memo_;
  std::map<std::string, at::Tensor> storages_;  // by key: tensors that share one stay shared
};

void Unpickler::global(const std::string& name) {
  bool known = kStorageTypes.count(name) != 0;
  for (const char* callable : kCallables) known = known || name == callable;
  if (!known) refuse("it pickles '" + name + "', which is not part of a dict of tensors (save model.state_dict())");
  push(Value{Global{name}});
}

void Unpickler::set_items(Items items) {
  if (items.size() % 2 != 0) refuse("SETITEMS with an odd count");
  auto& dict = as<Entries>(top(), "a dict");
  for (size_t i = 0; i < items.size(); i += 2) dict.emplace_back(items[i], items[i + 1]);
}

at::Tensor Unpickler::rebuild_tensor(const Items& args) {
  if (args.size() < 4) refuse("_rebuild_tensor_v2 with too few arguments");
  const at::Tensor& storage = as<at::Tensor>(args[0], "a storage");
  const std::int64_t offset = as<std::int64_t>(args[1], "a storage offset");
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
  for (const ValuePtr& s : as<Items>(args[2], "a size")) sizes.push_back(as<std::int64_t>(s, "a size"));
  for (const ValuePtr& s : as<Items>(args[3], "a stride")) strides.push_back(as<std::int64_t>(s, "a stride"));
  if (sizes.size() != strides.size()) refuse("a tensor's size and stride differ in length");
  // The last element the view reaches must lie in the storage (overflow counts as outside).
  std::int64_t last = offset;
  bool outside = offset < 0;
  bool empty = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || strides[i] < 0) refuse("a negative size or stride");
    empty = empty || sizes[i] == 0;
    std::int64_t reach = 0;
    if (sizes[i] > 0) {
      outside = outside || __builtin_mul_overflow(sizes[i] - 1, strides[i], &reach) ||
                __builtin_add_overflow(last, reach, &last);
    }
  }
  if (!empty && (outside || last >= storage.numel())) {
    refuse("a tensor reaches past its storage of " + std::to_string(storage.numel()) + " elements");
  }
  if (empty) return at::empty(sizes, storage.options());
  return storage.as_strided(sizes, strides, offset);
}

void Unpickler::reduce() {
  const ValuePtr args = pop();
  const std::string callable = as<Global>(pop(), "a callable").name;
  const Items& a = as<Items>(args, "the arguments of a call");
  if (callable == "collections.OrderedDict") {
    push(Value{Entries{}});
  } else if (callable == "torch._utils._rebuild_tensor_v2") {
    push(Value{rebuild_tensor(a)});
  } else if (callable == "torch._utils._rebuild_parameter") {
    if (a.empty()) refuse("_rebuild_parameter without a tensor");
    push(Value{as<at::Tensor>(a[0], "a tensor")});
  } else {
    refuse("'" + callable + "' is not callable here");
  }
}

void Unpickler::persistent_id() {
  const ValuePtr pid = pop();  // owns what `id` refers to
  const Items& id = as<Items>(pid, "a persistent id");
  if (id.size() != 5 || as<std::string>(id[0], "'storage'") != "storage") refuse("a persistent id that is not a storage");
  const std::string type = as<Global>(id[1], "a storage type").name;
  const std::string key = as<std::string>(id[2], "a storage key");
  const std::int64_t numel = as<std::int64_t>(id[4], "a storage size");
  if (kStorageTypes.count(type) == 0) refuse("'" + type + "' is not a storage type");
  if (numel < 0) refuse("a negative storage size");
  auto found = storages_.find(key);
  if (found == storages_.end()) found = storages_.emplace(key, storage_(key, kStorageTypes.at(type), numel)).first;
  if (found->second.numel() != numel) refuse("storage " + key + " is used with two sizes");
  push(Value{found->second});
}

bool Unpickler::step() {
  const std::uint8_t op = *take(1);
  switch (op) {
    case 0x80: take(1); break;                                      // PROTO
    case 0x95: take(8); break;                                      // FRAME
    case '.': return false;                                         // STOP
    case '(': marks_.push_back(stack_.size()); break;               // MARK
    case '}': push(Value{Entries{}}); break;                        // EMPTY_DICT
    case ']': push(Value{Items{}}); break;                          // EMPTY_LIST
    case ')': push_tuple({}); break;                                // EMPTY_TUPLE
    case 't': push_tuple(pop_to_mark()); break;                     // TUPLE
    case 0x85: case 0x86: case 0x87: {                              // TUPLE1..3
      Items items(static_cast<size_t>(op - 0x84));
      for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
      push_tuple(std::move(items));
      break;
    }
    case 'l': push(Value{pop_to_mark()}); break;                    // LIST
    case 'N': push(Value{}); break;                                 // NONE
    case 0x88: push(Value{true}); break;                            // NEWTRUE
    case 0x89: push(Value{false}); break;                           // NEWFALSE
    case 'K': push(Value{static_cast<std::int64_t>(little(1))}); break;  // BININT1
    case 'M': push(Value{static_cast<std::int64_t>(little(2))}); break;  // BININT2
    case 'J': push(Value{static_cast<std::int64_t>(static_cast<std::int32_t>(little(4)))}); break;  // BININT
    case 0x8a: {                                                    // LONG1
      const int n = static_cast<int>(little(1));
      if (n > 8) refuse("an integer wider than 64 bits");
      std::uint64_t v = n == 0 ? 0 : little(n);
      if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~std::uint64_t{0} << (8 * n);  // sign-extend
      push(Value{static_cast<std::int64_t>(v)});
      break;
    }
    case 'G': {                                                     // BINFLOAT, big-endian
      const std::uint8_t* b = take(8);
      std::uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = (bits << 8) | b[i];
      double d = 0;
      std::memcpy(&d, &bits, sizeof d);
      push(Value{d});
      break;
    }
    case 'X': push_string(static_cast<std::int64_t>(little(4))); break;  // BINUNICODE
    case 0x8c: push_string(static_cast<std::int64_t>(little(1))); break;  // SHORT_BINUNICODE
    case 0x8d: {                                                    // BINUNICODE8
      const std::uint64_t n = little(8);
      push_string(n > static_cast<std::uint64_t>(end_ - p_) ? -1 : static_cast<std::int64_t>(n));
      break;
    }
    case 'c': {                                                     // GLOBAL
      const std::string module = line();
      global(module + "." + line());
      break;
    }
    case 0x93: {                                                    // STACK_GLOBAL
      const std::string name = as<std::string>(pop(), "a global's name");
      global(as<std::string>(pop(), "a global's module") + "." + name);
      break;
    }
    case 'q': memo_[little(1)] = top(); break;                      // BINPUT
    case 'r': memo_[little(4)] = top(); break;                      // LONG_BINPUT
    case 0x94: memo_[memo_.size()] = top(); break;                  // MEMOIZE
    case 'h': case 'j': {                                           // BINGET, LONG_BINGET
      const auto found = memo_.find(little(op == 'h' ? 1 : 4));
      if (found == memo_.end()) refuse("a memo entry is read before it is written");
      stack_.push_back(found->second);
      break;
    }
    case 's': {                                                     // SETITEM
      ValuePtr value = pop();
      ValuePtr key = pop();
      set_items({key, value});
      break;
    }
    case 'u': set_items(pop_to_mark()); break;                      // SETITEMS
    case 'a': {                                                     // APPEND
      ValuePtr value = pop();
      as<Items>(top(), "a list").push_back(value);
      break;
    }
    case 'e': {                                                     // APPENDS
      Items items = pop_to_mark();
      auto& list = as<Items>(top(), "a list");
      list.insert(list.end(), items.begin(), items.end());
      break;
    }
    case 'Q': persistent_id(); break;                               // BINPERSID
    case 'R': reduce(); break;                                      // REDUCE
    case 'b': pop(); top(); break;  // BUILD: an OrderedDict's attributes (_metadata), not weights
    default: {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", op);
      refuse(std::string("pickle instruction ") + hex + " is not part of a state_dict");
    }
  }
  return true;
}

ckpt::NamedTensors Unpickler::run() {
  while (step()) {
  }
  if (stack_.size() != 1) refuse("the pickle does not end with one value");
  ckpt::NamedTensors out;
  for (const auto& [key, value] : as<Entries>(stack_.back(), "a dict of tensors at the top")) {
    const std::string& name = as<std::string>(key, "a dict whose keys are names");
    if (!std::holds_alternative<at::Tensor>(value->v)) {
      refuse("'" + name + "' is not a tensor (save model.state_dict(), a dict of tensors)");
    }
    out.emplace_back(name, std::get<at::Tensor>(value->v));
  }
  return out;
}

std::int64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw CheckpointError(path + ": cannot read the file");
  return static_cast<std::int64_t>(st.st_size);
}

}  // namespace

ckpt::NamedTensors unpickle_state_dict(const std::uint8_t* data, std::int64_t size, const StorageLoader& storage,
                                       const std::string& where) {
  return Unpickler(data, size, storage, where).run();
}

ckpt::NamedTensors read_pytorch_state_dict(const std::string& path) {
  const std::int64_t bytes_in_file = file_size(path);
  try {
    caffe2::serialize::PyTorchStreamReader zip(path);
    if (!zip.hasRecord("data.pkl")) throw CheckpointError(path + ": a zip file without data.pkl is not a torch.save file");
    const auto [pickle, pickle_size] = zip.getRecord("data.pkl");
    const auto load_storage = [&](const std::string& key, at::ScalarType dtype, std::int64_t numel) {
      const std::int64_t element = static_cast<std::int64_t>(c10::elementSize(dtype));
      const std::string record = "data/" + key;
      if (numel > bytes_in_file / element || !zip.hasRecord(record)) {
        throw CheckpointError(path + ": storage " + key + " of " + std::to_string(numel) +
                              " elements is not in the file (truncated, or not a torch.save file)");
      }
      auto [bytes, length] = zip.getRecord(record);
      if (static_cast<std::int64_t>(length) != numel * element) {
        throw CheckpointError(path + ": storage " + key + " holds " + std::to_string(length) + " bytes, not the " +
                              std::to_string(numel * element) + " its tensors need");
      }
      at::Tensor out = at::empty({numel}, at::TensorOptions().dtype(dtype));
      std::memcpy(out.data_ptr(), bytes.get(), static_cast<size_t>(length));
      return out;
    };
    return unpickle_state_dict(static_cast<const std::uint8_t*>(pickle.get()), static_cast<std::int64_t>(pickle_size),
                               load_storage, path);
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw CheckpointError(path + ": not a readable torch.save file: " + what.substr(0, what.find('\n')));
  }
}

}  // namespace hpctrain::weights
