// The fixtures' weights: the generator against PyTorch's numbers, the manifest parser's
// refusals, every manifest's materialised files against the checksums recorded when the
// fixture was made, and every checkpoint's tensors against the list Hugging Face wrote.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "conformance/fixture_dir.h"
#include "core/error.h"
#include "core/json.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/fixture_weights.h"
#include "model/normal_stream.h"

namespace tachyon {
namespace {

namespace fs = std::filesystem;

using testing_util::fixture_names;

// torch 1.13 (Debian's python3-torch):
//   g = torch.Generator().manual_seed(SEED)
//   torch.randn(20, dtype=torch.float64, generator=g)[[0, 7, 8, 15, 16, 19]]
TEST(NormalStream, MatchesTorchRandnFloat64) {
  struct Case {
    uint32_t seed;
    double want[6];
  };
  const Case cases[] = {
      {0,
       {-2.310411800234176, -0.830510051008449, 0.23871805816817063, -0.8910030351707375,
        0.6748575435940039, -0.7498915228391941}},
      {1234,
       {-0.0883100793877292, -0.1925576631186533, 0.11481509212436923, 0.9106620907519217,
        -0.3660114751930042, -0.09616418484199843}},
      {7,
       {0.06626753966449943, 0.7277603478716976, -1.3131496578292892, 0.45257550210102954,
        -1.6677291342328766, 0.6596523264462502}},
  };
  for (const Case& c : cases) {
    NormalStream s(c.seed);
    double d[20];
    s.normal(d, 20);
    const int at[6] = {0, 7, 8, 15, 16, 19};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(d[at[i]], c.want[i]) << c.seed << " " << at[i];
  }
}

// torch.randn(100) draws 116 uniforms (232 outputs): its tail group is drawn afresh.
//   g = torch.Generator().manual_seed(1234); torch.randn(100, dtype=torch.float64,
//   generator=g); torch.randn(16, dtype=torch.float64, generator=g)[0]
TEST(NormalStream, SkipCountsThirtyTwoBitOutputs) {
  NormalStream a(1234);
  double d[100];
  a.normal(d, 100);
  double x[16];
  a.normal(x, 16);
  EXPECT_EQ(x[0], 0.255280468830379);
  NormalStream b(1234);
  b.skip(232);
  b.normal(x, 16);
  EXPECT_EQ(x[0], 0.255280468830379);
  NormalStream c(1234);
  EXPECT_THROW(c.normal(x, 15), InvalidArgument);
}

constexpr const char* kTiny = R"({"format":1,
"streams":[{"seed":5,"skip":3,"tensors":[
  {"name":"w","shape":[4,8],"kind":"scaled","std":0.5},
  {"name":"n","shape":[16],"kind":"norm"}]}],
"files":[{"name":"model.safetensors","metadata":{"format":"pt"},"tensors":[
  {"name":"w","dtype":"F32","shape":[4,8]},
  {"name":"g","dtype":"BF16","shape":[3,8],"rows":[["w",3,1],["w",0,2]]},
  {"name":"n","dtype":"F16","shape":[16]},
  {"name":"b","dtype":"F32","shape":[1],"base64":"AACAPw=="}]}],
"fnv1a64":{"model.safetensors":"CHECKSUM"}})";

std::string tiny(const std::string& checksum) {
  std::string s = kTiny;
  s.replace(s.find("CHECKSUM"), 8, checksum);
  return s;
}

TEST(FixtureManifest, BuildsGathersCastsAndInlineBytes) {
  // The checksum is recorded on first build, as the fixture makers do.
  std::string err;
  try {
    build_fixture_files(parse_fixture_manifest(tiny("0000000000000000")));
  } catch (const InvalidArgument& e) {
    err = e.what();
  }
  const size_t at = err.find("FNV-1a ");
  ASSERT_NE(at, std::string::npos) << err;
  const auto files = build_fixture_files(parse_fixture_manifest(tiny(err.substr(at + 7, 16))));
  ASSERT_EQ(files.size(), 1u);
  const std::string& f = files.at("model.safetensors");
  const std::string dir = (fs::temp_directory_path() / "tachyon_fixture_tiny").string();
  write_fixture_weights(parse_fixture_manifest(tiny(err.substr(at + 7, 16))), dir);
  auto st = SafetensorsFile::open(dir + "/model.safetensors");
  Tensor w = st->get("w"), g = st->get("g"), n = st->get("n"), b = st->get("b");
  EXPECT_EQ(g.dtype(), DType::kBF16);
  EXPECT_EQ(n.dtype(), DType::kF16);
  NormalStream s(5);
  s.skip(3);
  double z[32];
  s.normal(z, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(w.data<float>()[i], static_cast<float>(z[i]) * 0.5f) << i;
  const uint16_t* gb = static_cast<const uint16_t*>(g.raw());
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 8; ++c)
      EXPECT_EQ(gb[r * 8 + c], f32_to_bf16(w.data<float>()[(r == 0 ? 3 : r - 1) * 8 + c]).bits);
  s.normal(z, 16);
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(static_cast<const uint16_t*>(n.raw())[i],
              f32_to_f16(static_cast<float>(1.0 + 0.1 * z[i])).bits);
  EXPECT_EQ(b.data<float>()[0], 1.0f);
  EXPECT_GT(f.size(), 32u * 4);
  fs::remove_all(dir);
}

// Quantized checkpoints' payloads (packed integers, zero points, float8 values, shapes)
// are inline bytes of the integer and float8 dtypes, written as they are.
TEST(FixtureManifest, IntegerAndFloat8TensorsCarryInlineBytes) {
  const std::string text = R"({"format":1,"streams":[],
"files":[{"name":"model.safetensors","tensors":[
  {"name":"qweight","dtype":"I32","shape":[2],"base64":"eFY0Ev////8="},
  {"name":"shape","dtype":"I64","shape":[1],"base64":"QAAAAAAAAAA="},
  {"name":"signed","dtype":"I8","shape":[3],"base64":"gP9/"},
  {"name":"zeros","dtype":"U8","shape":[1,2],"base64":"B4A="},
  {"name":"fp8","dtype":"F8_E4M3","shape":[2],"base64":"OH4="}]}],
"fnv1a64":{"model.safetensors":"CHECKSUM"}})";
  auto manifest = [&](const std::string& sum) {
    std::string s = text;
    s.replace(s.find("CHECKSUM"), 8, sum);
    return parse_fixture_manifest(s);
  };
  std::string err;
  try {
    build_fixture_files(manifest("0000000000000000"));
  } catch (const InvalidArgument& e) {
    err = e.what();
  }
  const size_t at = err.find("FNV-1a ");
  ASSERT_NE(at, std::string::npos) << err;
  const std::string dir = (fs::temp_directory_path() / "tachyon_fixture_ints").string();
  write_fixture_weights(manifest(err.substr(at + 7, 16)), dir);
  auto st = SafetensorsFile::open(dir + "/model.safetensors");
  Tensor q = st->get("qweight"), shape = st->get("shape"), sgn = st->get("signed"),
         z = st->get("zeros"), f8 = st->get("fp8");
  EXPECT_EQ(q.dtype(), DType::kI32);
  EXPECT_EQ(q.data<int32_t>()[0], 0x12345678);
  EXPECT_EQ(q.data<int32_t>()[1], -1);
  EXPECT_EQ(shape.dtype(), DType::kI64);
  EXPECT_EQ(shape.data<int64_t>()[0], 64);
  EXPECT_EQ(sgn.dtype(), DType::kI8);
  EXPECT_EQ(sgn.data<int8_t>()[0], -128);
  EXPECT_EQ(sgn.data<int8_t>()[2], 127);
  EXPECT_EQ(z.dtype(), DType::kU8);
  EXPECT_EQ(z.shape(), (Shape{1, 2}));
  EXPECT_EQ(z.data<uint8_t>()[1], 0x80);
  EXPECT_EQ(f8.dtype(), DType::kF8E4M3);
  EXPECT_EQ(static_cast<const uint8_t*>(f8.raw())[0], 0x38);  // 1.0 in e4m3
  fs::remove_all(dir);
}

TEST(FixtureManifest, MalformedManifestsAreRefusedNamingTheField) {
  const std::string ok = tiny("0000000000000000");
  auto refused = [&](std::string from, std::string to, const char* field) {
    std::string s = ok;
    const size_t at = s.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    s.replace(at, from.size(), to);
    try {
      parse_fixture_manifest(s);
      ADD_FAILURE() << "accepted: " << to;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  refused(R"("format":1)", R"("format":2)", "format");
  refused(R"("seed":5)", R"("seed":-5)", "streams[0].seed");
  refused(R"("seed":5)", R"("seed":4294967296)", "streams[0].seed");
  refused(R"("skip":3)", R"("skip":"3")", "streams[0].skip");
  refused(R"("shape":[4,8],"kind")", R"("shape":[4,0],"kind")", "streams[0].tensors[0].shape");
  refused(R"("shape":[4,8],"kind")", R"("shape":[65536,65536],"kind")", "tensors[0].shape");
  refused(R"("shape":[16],"kind")", R"("shape":[15],"kind")", "streams[0].tensors[1].shape");
  refused(R"("kind":"scaled")", R"("kind":"uniform")", "streams[0].tensors[0].kind");
  refused(R"("std":0.5)", R"("std":null)", "streams[0].tensors[0].std");
  refused(R"("name":"n","shape":[16])", R"("name":"w","shape":[16])", "drawn twice");
  refused(R"(["w",3,1])", R"(["w",4,1])", "files[0].tensors[1].rows[0]");
  refused(R"(["w",3,1])", R"(["x",3,1])", "no stream tensor 'x'");
  refused(R"(["w",3,1])", R"(["w",3])", "files[0].tensors[1].rows[0]");
  refused(R"(["w",0,2])", R"(["w",0,1])", "files[0].tensors[1]");
  refused(R"("AACAPw==")", R"("AACA")", "files[0].tensors[3].base64");
  refused(R"("AACAPw==")", R"("AACAP!==")", "files[0].tensors[3].base64");
  refused(R"("AACAPw==")", R"("AA")", "files[0].tensors[3].base64");
  refused(R"("dtype":"F16")", R"("dtype":"I8")", "files[0].tensors[2].dtype");
  refused(R"("dtype":"F16")", R"("dtype":"I16")", "files[0].tensors[2].dtype");
  refused(R"("dtype":"BF16")", R"("dtype":"F8_E4M3")", "files[0].tensors[1].dtype");
  refused(R"("dtype":"F32","shape":[1],"base64":"AACAPw==")",
          R"("dtype":"I64","shape":[1],"base64":"AACAPw==")", "files[0].tensors[3].base64");
  refused(R"("name":"model.safetensors","metadata")", R"("name":"../x.safetensors","metadata")",
          "files[0].name");
  refused(R"("name":"b","dtype")", R"("name":"w","dtype")", "written twice");
  refused(R"("format":"pt")", R"("format":1)", "files[0].metadata.format");
  refused(R"("model.safetensors":"0000000000000000")", R"("model.safetensors":"00")", "fnv1a64");
  refused(R"("model.safetensors":"0000000000000000")", R"("other.safetensors":"0000000000000000")",
          "fnv1a64");
  refused(R"("files":[)", R"("files":{"a":[)", "");
  EXPECT_THROW(parse_fixture_manifest("[]"), InvalidArgument);
  EXPECT_THROW(parse_fixture_manifest("{"), InvalidArgument);
  EXPECT_THROW(parse_fixture_manifest(""), InvalidArgument);
}

// Every manifest builds to the files whose checksums were recorded when the fixture was
// made (build_fixture_files compares them), so any drift of the generator, the casts or
// the writer fails here.
std::vector<std::string> all_fixture_names() {
  std::vector<std::string> names = fixture_names();
  for (const std::string& q : fixture_names("quant")) names.push_back(q);
  for (const std::string& v : fixture_names("vision")) names.push_back(v);
  return names;
}

TEST(FixtureManifest, EveryFixtureBuildsToItsRecordedChecksums) {
  int built = 0;
  for (const std::string& name : all_fixture_names()) {
    const fs::path p = fs::path(testing_util::fixture_source_dir(name)) / "weights.json";
    if (!fs::exists(p)) continue;
    SCOPED_TRACE(name);
    FixtureManifest m = load_fixture_manifest(p.string());
    EXPECT_NO_THROW(build_fixture_files(m));
    if (!m.references.empty()) {
      EXPECT_TRUE(fs::exists(testing_util::fixture_reference_logits(name)));
    }
    ++built;
  }
  EXPECT_GE(built, 40);
}

// Every conformance fixture's weights, names and shapes, against what Hugging Face
// listed when it wrote them.
TEST(Checkpoint, FixturesMatchReferenceTensorList) {
  int checked = 0;
  for (const std::string& name : all_fixture_names()) {
    SCOPED_TRACE(name);
    const fs::path dir = testing_util::fixture(name);
    Json ref = load_json_file(testing_util::fixture_source_dir(name) + "/reference.json");
    const Json& expected = ref.at("checkpoint_tensors");
    auto ck = Checkpoint::open(dir.string());
    std::vector<std::string> want;
    for (auto it = expected.begin(); it != expected.end(); ++it) want.push_back(it.key());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(ck->names(), want);
    uint64_t bytes = 0;
    for (const auto& name : ck->names()) {
      if (!expected.contains(name)) continue;
      Tensor t = ck->get(name);
      EXPECT_EQ(t.shape(), expected[name].get<Shape>()) << name;
      EXPECT_EQ(t.shape(), ck->info(name).shape) << name;
      EXPECT_EQ(t.dtype(), ck->info(name).dtype) << name;
      bytes += t.nbytes();
    }
    EXPECT_EQ(ck->total_bytes(), bytes);
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

}  // namespace
}  // namespace tachyon
