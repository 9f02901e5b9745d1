#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "core/checked.h"
#include "core/error.h"
#include "core/json.h"
#include "io/tensor_source.h"

namespace tachyon {

namespace {

constexpr int kMaxHeaderDepth = 8;
// JSON values in a header: ~6 per tensor, so room for over a million tensors while
// bounding what a hostile 100 MB header can make the parser allocate.
constexpr size_t kMaxHeaderValues = size_t{8} << 20;

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::kF64, "F64"},   {DType::kF32, "F32"},        {DType::kF16, "F16"},
    {DType::kBF16, "BF16"}, {DType::kF8E4M3, "F8_E4M3"}, {DType::kF8E5M2, "F8_E5M2"},
    {DType::kI64, "I64"},   {DType::kI32, "I32"},        {DType::kI16, "I16"},
    {DType::kI8, "I8"},     {DType::kU8, "U8"},          {DType::kBool, "BOOL"},
};

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses the header JSON, refusing duplicate top-level keys (a later duplicate would
// silently hide a tensor) and deep nesting.
Json parse_header_json(std::string_view text, std::string_view what) {
  std::set<std::string> keys;
  std::string duplicate;
  bool too_deep = false, too_big = false;
  size_t values = 0;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::value && ++values > kMaxHeaderValues) too_big = true;
    if (event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) {
      if (depth >= kMaxHeaderDepth) too_deep = true;
    } else if (event == Json::parse_event_t::key && depth == 1 && duplicate.empty()) {
      if (!keys.insert(parsed.get<std::string>()).second) duplicate = parsed.get<std::string>();
    }
    return !too_deep && !too_big && duplicate.empty();
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                    /*ignore_comments=*/false);
  } catch (const Json::exception& e) {
    raise<InvalidArgument>("{}: invalid safetensors header JSON: {}", what, e.what());
  }
  if (too_deep) raise<InvalidArgument>("{}: safetensors header nested too deeply", what);
  if (too_big)
    raise<InvalidArgument>("{}: safetensors header holds more than {} values", what,
                           kMaxHeaderValues);
  if (!duplicate.empty())
    raise<InvalidArgument>("{}: tensor '{}' appears twice in the safetensors header", what,
                           duplicate);
  return j;
}

uint64_t json_u64(const Json& v, std::string_view what, const std::string& name,
                  std::string_view field) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  raise<InvalidArgument>("{}: tensor '{}': {} must hold non-negative integers, got {}", what, name,
                         field, v.dump());
}

Shape parse_shape(const Json& j, std::string_view what, const std::string& name) {
  if (!j.is_array()) raise<InvalidArgument>("{}: tensor '{}': shape must be an array", what, name);
  Shape shape;
  for (const Json& d : j) {
    uint64_t v = json_u64(d, what, name, "shape");
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      raise<InvalidArgument>("{}: tensor '{}': dimension {} is too large", what, name, v);
    shape.push_back(static_cast<int64_t>(v));
  }
  return shape;
}

uint64_t expected_bytes(const Shape& shape, DType dtype, std::string_view what,
                        const std::string& name) {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    auto r = checked_mul<uint64_t>(n, static_cast<uint64_t>(d));
    if (!r)
      raise<InvalidArgument>("{}: tensor '{}': size of shape {} overflows", what, name,
                             shape_str(shape));
    n = *r;
  }
  return n;
}

SafetensorsEntry parse_entry(const std::string& name, const Json& j, uint64_t data_start,
                             uint64_t data_size, std::string_view what) {
  if (!j.is_object())
    raise<InvalidArgument>("{}: tensor '{}': entry must be an object", what, name);
  auto dt = j.find("dtype");
  auto sh = j.find("shape");
  auto off = j.find("data_offsets");
  if (dt == j.end() || sh == j.end() || off == j.end())
    raise<InvalidArgument>("{}: tensor '{}': needs dtype, shape and data_offsets", what, name);
  if (!dt->is_string())
    raise<InvalidArgument>("{}: tensor '{}': dtype must be a string", what, name);
  auto dtype = parse_safetensors_dtype(dt->get<std::string>());
  if (!dtype)
    raise<InvalidArgument>("{}: tensor '{}': unknown dtype '{}'", what, name,
                           dt->get<std::string>());
  SafetensorsEntry e;
  e.name = name;
  e.dtype = *dtype;
  e.shape = parse_shape(*sh, what, name);
  if (!off->is_array() || off->size() != 2)
    raise<InvalidArgument>("{}: tensor '{}': data_offsets must be [begin, end]", what, name);
  uint64_t begin = json_u64((*off)[0], what, name, "data_offsets");
  uint64_t end = json_u64((*off)[1], what, name, "data_offsets");
  if (begin > end || end > data_size)
    raise<InvalidArgument>(
        "{}: tensor '{}': data_offsets [{}, {}] outside the data section of {} bytes", what, name,
        begin, end, data_size);
  uint64_t want = expected_bytes(e.shape, e.dtype, what, name);
  if (end - begin != want)
    raise<InvalidArgument>("{}: tensor '{}': {} bytes of data for {}{} (needs {})", what, name,
                           end - begin, dtype_name(e.dtype), shape_str(e.shape), want);
  e.offset = data_start + begin;
  e.nbytes = want;
  return e;
}

std::map<std::string, std::string> parse_metadata(const Json& j, std::string_view what) {
  if (!j.is_object()) raise<InvalidArgument>("{}: __metadata__ must be an object", what);
  std::map<std::string, std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_string())
      raise<InvalidArgument>("{}: __metadata__ value for '{}' must be a string", what, it.key());
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

void check_no_overlap(const std::vector<SafetensorsEntry>& sorted, std::string_view what) {
  const SafetensorsEntry* prev = nullptr;
  for (const auto& e : sorted) {
    if (e.nbytes == 0) continue;
    if (prev != nullptr && e.offset < prev->offset + prev->nbytes)
      raise<InvalidArgument>("{}: tensors '{}' and '{}' overlap in the data section", what,
                             prev->name, e.name);
    prev = &e;
  }
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  for (const auto& d : kDTypeNames)
    if (d.dtype == dtype) return d.name;
  raise<InvalidArgument>("dtype {} has no safetensors name", dtype_name(dtype));
}

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
  for (const auto& d : kDTypeNames)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}

SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size,
                                           std::string_view what) {
  if (size < 8)
    raise<InvalidArgument>("{}: truncated safetensors file ({} bytes, needs at least 8)", what,
                           size);
  uint64_t n = read_le64(data);
  if (n > kSafetensorsMaxHeader)
    raise<InvalidArgument>("{}: safetensors header length {} exceeds the limit of {} bytes", what,
                           n, kSafetensorsMaxHeader);
  if (n > size - 8)
    raise<InvalidArgument>(
        "{}: safetensors header length {} runs past the end of the file ({} "
        "bytes)",
        what, n, size);
  std::string_view text(reinterpret_cast<const char*>(data + 8), n);
  if (text.empty() || text.front() != '{')
    raise<InvalidArgument>("{}: safetensors header is not a JSON object", what);
  Json j = parse_header_json(text, what);
  if (!j.is_object()) raise<InvalidArgument>("{}: safetensors header is not a JSON object", what);
  SafetensorsHeader h;
  h.data_start = 8 + n;
  uint64_t data_size = size - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      h.metadata = parse_metadata(it.value(), what);
      continue;
    }
    h.entries.push_back(parse_entry(it.key(), it.value(), h.data_start, data_size, what));
  }
  std::sort(h.entries.begin(), h.entries.end(), [](const auto& a, const auto& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.nbytes < b.nbytes;
  });
  check_no_overlap(h.entries, what);
  return h;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto f = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  f->file_ = MappedFile::open(path);
  f->header_ = parse_safetensors_header(f->file_->data(), f->file_->size(), path);
  for (size_t i = 0; i < f->header_.entries.size(); ++i) f->index_[f->header_.entries[i].name] = i;
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.entries[it->second];
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  if (e == nullptr) raise<NotFound>("{}: no tensor named '{}'", path(), name);
  return view_or_copy(file_->data() + e->offset, e->shape, e->dtype, file_);
}

}  // namespace tachyon
