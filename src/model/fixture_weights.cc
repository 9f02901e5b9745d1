#include "model/fixture_weights.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/base64.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/normal_stream.h"

namespace tachyon {
namespace {

// Fixtures are tiny; these bounds keep a hostile manifest from asking for much.
constexpr int64_t kMaxElements = int64_t{1} << 24;  // over all stream tensors
constexpr uint64_t kMaxSkip = uint64_t{1} << 26;
constexpr size_t kMaxDims = 8;

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  raise<InvalidArgument>("fixture manifest: {}: {}", where, what);
}

const Json& field(const Json& j, const char* key, const std::string& where) {
  if (!j.is_object()) bad(where, "not an object");
  auto it = j.find(key);
  if (it == j.end()) bad(where, fmt::format("missing \"{}\"", key));
  return *it;
}

std::string str(const Json& j, const std::string& where) {
  if (!j.is_string()) bad(where, "not a string");
  return j.get<std::string>();
}

uint64_t uint(const Json& j, uint64_t max, const std::string& where) {
  if (!j.is_number_unsigned() && !(j.is_number_integer() && j.get<int64_t>() >= 0))
    bad(where, "not a non-negative integer");
  const uint64_t v = j.get<uint64_t>();
  if (v > max) bad(where, fmt::format("{} exceeds {}", v, max));
  return v;
}

const Json& array(const Json& j, const std::string& where) {
  if (!j.is_array()) bad(where, "not an array");
  return j;
}

Shape shape_of(const Json& j, const std::string& where) {
  array(j, where);
  if (j.empty() || j.size() > kMaxDims) bad(where, "needs 1 to 8 dimensions");
  Shape s;
  int64_t n = 1;
  for (size_t i = 0; i < j.size(); ++i) {
    const int64_t d =
        static_cast<int64_t>(uint(j[i], kMaxElements, fmt::format("{}[{}]", where, i)));
    if (d == 0) bad(where, "a dimension is 0");
    n *= d;
    if (n > kMaxElements) bad(where, "too many elements");
    s.push_back(d);
  }
  return s;
}

// A file name inside the fixture folder: no path separators, no dot names.
std::string file_name(const Json& j, const std::string& where, const char* suffix) {
  std::string n = str(j, where);
  const std::string_view sfx(suffix);
  if (n.empty() || n.find('/') != std::string::npos || n.find('\\') != std::string::npos ||
      n.front() == '.' || n.size() <= sfx.size() ||
      n.compare(n.size() - sfx.size(), sfx.size(), sfx) != 0)
    bad(where, fmt::format("'{}' is not a plain file name ending in {}", n, suffix));
  return n;
}

// The float dtypes a gather of stream rows is cast to; the others (integers and
// float8, the payloads of quantized checkpoints) only carry inline bytes.
bool castable(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

DType dtype_of(const Json& j, const std::string& where) {
  const std::string d = str(j, where);
  static const std::pair<const char*, DType> known[] = {
      {"F32", DType::kF32}, {"BF16", DType::kBF16},     {"F16", DType::kF16},
      {"I64", DType::kI64}, {"I32", DType::kI32},       {"I8", DType::kI8},
      {"U8", DType::kU8},   {"F8_E4M3", DType::kF8E4M3}};
  for (const auto& [name, dtype] : known)
    if (d == name) return dtype;
  bad(where, fmt::format("dtype '{}' is not F32, BF16, F16, I64, I32, I8, U8 or F8_E4M3", d));
}

FixtureStreamTensor stream_tensor(const Json& j, const std::string& where) {
  FixtureStreamTensor t;
  t.name = str(field(j, "name", where), where + ".name");
  if (t.name.empty()) bad(where + ".name", "empty");
  t.shape = shape_of(field(j, "shape", where), where + ".shape");
  if (shape_numel(t.shape) < 16) bad(where + ".shape", "a stream tensor has at least 16 elements");
  const std::string kind = str(field(j, "kind", where), where + ".kind");
  if (kind == "scaled") {
    t.kind = FixtureStreamTensor::kScaled;
  } else if (kind == "scaled64") {
    t.kind = FixtureStreamTensor::kScaled64;
  } else if (kind == "norm") {
    t.kind = FixtureStreamTensor::kNorm;
    return t;
  } else {
    bad(where + ".kind", fmt::format("'{}' is not scaled, scaled64 or norm", kind));
  }
  const Json& s = field(j, "std", where);
  if (!s.is_number() || !std::isfinite(s.get<double>())) bad(where + ".std", "not a finite number");
  t.std = s.get<double>();
  return t;
}

FixtureTensor file_tensor(const Json& j, const std::string& where,
                          const std::map<std::string, Shape>& sources) {
  FixtureTensor t;
  t.name = str(field(j, "name", where), where + ".name");
  if (t.name.empty() || t.name == "__metadata__") bad(where + ".name", "empty or reserved");
  t.dtype = dtype_of(field(j, "dtype", where), where + ".dtype");
  t.shape = shape_of(field(j, "shape", where), where + ".shape");
  const int64_t numel = shape_numel(t.shape);
  if (j.contains("base64")) {
    if (j.contains("rows")) bad(where, "both \"rows\" and \"base64\"");
    t.bytes = base64_decode(str(j["base64"], where + ".base64"), where + ".base64");
    if (t.bytes.size() != static_cast<size_t>(numel) * dtype_size(t.dtype))
      bad(where + ".base64", fmt::format("{} bytes for {} elements of {}", t.bytes.size(), numel,
                                         dtype_name(t.dtype)));
    return t;
  }
  if (!castable(t.dtype))
    bad(where + ".dtype", fmt::format("{} tensors carry inline \"base64\" bytes, not stream rows",
                                      dtype_name(t.dtype)));
  if (j.contains("rows")) {
    const Json& rows = array(j["rows"], where + ".rows");
    if (rows.empty()) bad(where + ".rows", "empty");
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::string w = fmt::format("{}.rows[{}]", where, i);
      if (!rows[i].is_array() || rows[i].size() != 3) bad(w, "not [source, first, count]");
      FixtureRows r;
      r.source = str(rows[i][0], w + "[0]");
      r.first = static_cast<int64_t>(uint(rows[i][1], kMaxElements, w + "[1]"));
      r.count = static_cast<int64_t>(uint(rows[i][2], kMaxElements, w + "[2]"));
      t.rows.push_back(std::move(r));
    }
  } else {
    t.rows.push_back({t.name, 0, -1});  // the stream tensor of the same name, whole
  }
  int64_t total = 0;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    FixtureRows& r = t.rows[i];
    const std::string w = fmt::format("{}.rows[{}]", where, i);
    auto it = sources.find(r.source);
    if (it == sources.end()) bad(w, fmt::format("no stream tensor '{}'", r.source));
    const int64_t dim0 = it->second[0];
    if (r.count < 0) r.count = dim0;
    if (r.count == 0 || r.first + r.count > dim0)
      bad(w, fmt::format("rows [{}, {}) outside '{}' ({} rows)", r.first, r.first + r.count,
                         r.source, dim0));
    total += r.count * (shape_numel(it->second) / dim0);
    if (total > kMaxElements) bad(w, "too many elements");
  }
  if (total != numel)
    bad(where, fmt::format("the rows hold {} elements, the shape {}", total, numel));
  return t;
}

float stream_value(const FixtureStreamTensor& t, double z) {
  switch (t.kind) {
    case FixtureStreamTensor::kScaled:
      return static_cast<float>(z) * static_cast<float>(t.std);
    case FixtureStreamTensor::kScaled64:
      return static_cast<float>(z * t.std);
    case FixtureStreamTensor::kNorm:
      return static_cast<float>(1.0 + 0.1 * z);
  }
  return 0.f;
}

void store(float v, DType dtype, char* dst) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, &v, 4);
  } else {
    const uint16_t bits = dtype == DType::kBF16 ? f32_to_bf16(v).bits : f32_to_f16(v).bits;
    std::memcpy(dst, &bits, 2);
  }
}

}  // namespace

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

FixtureManifest parse_fixture_manifest(std::string_view text) {
  const Json j = parse_json(text, "fixture manifest");
  FixtureManifest m;
  if (uint(field(j, "format", "manifest"), 1000, "format") != 1)
    bad("format", "only format 1 is known");
  if (j.contains("references")) m.references = file_name(j["references"], "references", "");
  std::map<std::string, Shape> sources;
  int64_t elements = 0;
  const Json& streams = array(field(j, "streams", "manifest"), "streams");
  for (size_t s = 0; s < streams.size(); ++s) {
    const std::string w = fmt::format("streams[{}]", s);
    FixtureStream st;
    st.seed = static_cast<uint32_t>(uint(field(streams[s], "seed", w), 0xffffffffu, w + ".seed"));
    st.skip = uint(field(streams[s], "skip", w), kMaxSkip, w + ".skip");
    const Json& ts = array(field(streams[s], "tensors", w), w + ".tensors");
    for (size_t i = 0; i < ts.size(); ++i) {
      const std::string wt = fmt::format("{}.tensors[{}]", w, i);
      FixtureStreamTensor t = stream_tensor(ts[i], wt);
      elements += shape_numel(t.shape);
      if (elements > kMaxElements) bad(wt, "the streams hold too many elements");
      if (!sources.emplace(t.name, t.shape).second)
        bad(wt + ".name", fmt::format("'{}' drawn twice", t.name));
      st.tensors.push_back(std::move(t));
    }
    m.streams.push_back(std::move(st));
  }
  std::set<std::string> names, files;
  const Json& fs = array(field(j, "files", "manifest"), "files");
  if (fs.empty()) bad("files", "empty");
  for (size_t f = 0; f < fs.size(); ++f) {
    const std::string w = fmt::format("files[{}]", f);
    FixtureFile file;
    file.name = file_name(field(fs[f], "name", w), w + ".name", ".safetensors");
    if (!files.insert(file.name).second) bad(w + ".name", "a file named twice");
    if (fs[f].contains("metadata")) {
      const Json& md = fs[f]["metadata"];
      if (!md.is_object()) bad(w + ".metadata", "not an object");
      for (auto it = md.begin(); it != md.end(); ++it)
        file.metadata[it.key()] = str(it.value(), w + ".metadata." + it.key());
    }
    const Json& ts = array(field(fs[f], "tensors", w), w + ".tensors");
    for (size_t i = 0; i < ts.size(); ++i) {
      const std::string wt = fmt::format("{}.tensors[{}]", w, i);
      FixtureTensor t = file_tensor(ts[i], wt, sources);
      if (!names.insert(t.name).second)
        bad(wt + ".name", fmt::format("'{}' written twice", t.name));
      file.tensors.push_back(std::move(t));
    }
    m.files.push_back(std::move(file));
  }
  if (j.contains("index")) {
    const Json& ix = j["index"];
    m.index_name = file_name(field(ix, "name", "index"), "index.name", ".json");
    if (files.count(m.index_name)) bad("index.name", "also a weight file");
    m.index_metadata = ix.contains("metadata") ? ix["metadata"] : Json::object();
    if (!m.index_metadata.is_object()) bad("index.metadata", "not an object");
  }
  const Json& sums = field(j, "fnv1a64", "manifest");
  if (!sums.is_object()) bad("fnv1a64", "not an object");
  for (auto it = sums.begin(); it != sums.end(); ++it) {
    const std::string v = str(it.value(), "fnv1a64." + it.key());
    if (v.size() != 16 || v.find_first_not_of("0123456789abcdef") != std::string::npos)
      bad("fnv1a64." + it.key(), "not 16 lowercase hex digits");
    m.checksums[it.key()] = std::stoull(v, nullptr, 16);
  }
  std::set<std::string> all = files;
  if (!m.index_name.empty()) all.insert(m.index_name);
  for (const auto& n : all)
    if (!m.checksums.count(n)) bad("fnv1a64", fmt::format("no checksum for '{}'", n));
  if (m.checksums.size() != all.size()) bad("fnv1a64", "a checksum for a file not written");
  return m;
}

FixtureManifest load_fixture_manifest(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) raise<NotFound>("cannot open fixture manifest {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return parse_fixture_manifest(ss.str());
  } catch (const InvalidArgument& e) {
    raise<InvalidArgument>("{}: {}", path, e.what());
  }
}

std::map<std::string, std::string> build_fixture_files(const FixtureManifest& m) {
  std::map<std::string, std::pair<const FixtureStreamTensor*, std::vector<float>>> gen;
  std::vector<double> z;
  for (const FixtureStream& s : m.streams) {
    NormalStream ns(s.seed);
    ns.skip(s.skip);
    for (const FixtureStreamTensor& t : s.tensors) {
      const int64_t n = shape_numel(t.shape);
      z.resize(static_cast<size_t>(n));
      ns.normal(z.data(), n);
      std::vector<float> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[i] = stream_value(t, z[i]);
      gen[t.name] = {&t, std::move(v)};
    }
  }
  std::map<std::string, std::string> out;
  Json weight_map = Json::object();
  for (const FixtureFile& f : m.files) {
    NamedTensors tensors;
    for (const FixtureTensor& t : f.tensors) {
      Tensor x = Tensor::empty(t.shape, t.dtype);
      char* dst = static_cast<char*>(x.raw());
      if (t.rows.empty()) {
        std::memcpy(dst, t.bytes.data(), t.bytes.size());
      } else {
        const size_t es = dtype_size(t.dtype);
        for (const FixtureRows& r : t.rows) {
          const auto& [src, vals] = gen.at(r.source);
          const int64_t row = shape_numel(src->shape) / src->shape[0];
          for (int64_t i = r.first * row; i < (r.first + r.count) * row; ++i, dst += es)
            store(vals[static_cast<size_t>(i)], t.dtype, dst);
        }
      }
      weight_map[t.name] = f.name;
      tensors.emplace_back(t.name, std::move(x));
    }
    out[f.name] = serialize_safetensors(tensors, f.metadata);
  }
  if (!m.index_name.empty()) {
    Json index = {{"metadata", m.index_metadata}, {"weight_map", weight_map}};
    out[m.index_name] = index.dump(2) + "\n";
  }
  for (const auto& [name, bytes] : out) {
    const uint64_t got = fnv1a64(bytes), want = m.checksums.at(name);
    if (got != want)
      raise<InvalidArgument>("fixture weights: {} has FNV-1a {:016x}, the manifest records {:016x}",
                             name, got, want);
  }
  return out;
}

void write_fixture_weights(const FixtureManifest& m, const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  for (const auto& [name, bytes] : build_fixture_files(m)) {
    const fs::path p = fs::path(dir) / name;
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) raise<InvalidArgument>("cannot write {}", p.string());
  }
}

}  // namespace tachyon
