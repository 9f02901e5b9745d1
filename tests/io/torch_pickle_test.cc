#include "io/torch_pickle.h"

#include <gtest/gtest.h>

#include "io/io_test_util.h"
#include "io/torch_test_util.h"

namespace tachyon {
namespace {

using testing::expect_error;
using testing::PickleBuilder;
using testing::state_dict_pickle;
using testing::TensorSpec;

TorchStateDict unpickle(const std::string& bytes, const UnpickleLimits& limits = {}) {
  return unpickle_torch_state_dict(bytes, "data.pkl", limits);
}

template <size_t N>
std::string B(const char (&s)[N]) {
  return std::string(s, N - 1);
}

void expect_refused(const std::string& bytes, std::initializer_list<std::string> needles,
                    const UnpickleLimits& limits = {}) {
  expect_error<InvalidArgument>([&] { unpickle(bytes, limits); }, needles);
}

const std::vector<TensorSpec> kSpecs = {
    {"layer.weight", "BFloat16Storage", "0", 6, 0, {2, 3}, {3, 1}},
    {"layer.bias", "FloatStorage", "1", 3, 0, {3}, {1}},
    {"tied", "BFloat16Storage", "0", 6, 3, {3}, {1}},
};

TEST(TorchPickle, ReadsAStateDict) {
  TorchStateDict sd = unpickle(state_dict_pickle(kSpecs));
  ASSERT_EQ(sd.tensors.size(), 3u);
  ASSERT_EQ(sd.storages.size(), 2u);  // "0" is shared
  EXPECT_EQ(sd.tensors[0].name, "layer.weight");
  EXPECT_EQ(sd.tensors[0].shape, (Shape{2, 3}));
  EXPECT_EQ(sd.tensors[0].stride, (Shape{3, 1}));
  EXPECT_EQ(sd.storages[sd.tensors[0].storage].dtype, DType::kBF16);
  EXPECT_EQ(sd.storages[sd.tensors[1].storage].dtype, DType::kF32);
  EXPECT_EQ(sd.tensors[2].storage, sd.tensors[0].storage);
  EXPECT_EQ(sd.tensors[2].storage_offset, 3);
  EXPECT_EQ(sd.storages[0].key, "0");
  EXPECT_EQ(sd.storages[0].numel, 6);
}

TEST(TorchPickle, ReadsEveryStorageClass) {
  const std::pair<const char*, DType> classes[] = {
      {"FloatStorage", DType::kF32},     {"HalfStorage", DType::kF16},
      {"BFloat16Storage", DType::kBF16}, {"DoubleStorage", DType::kF64},
      {"LongStorage", DType::kI64},      {"IntStorage", DType::kI32},
      {"ShortStorage", DType::kI16},     {"CharStorage", DType::kI8},
      {"ByteStorage", DType::kU8},       {"BoolStorage", DType::kBool}};
  for (const auto& [cls, dtype] : classes) {
    TorchStateDict sd = unpickle(state_dict_pickle({{"t", cls, "k", 2, 0, {2}, {1}}}));
    ASSERT_EQ(sd.storages.size(), 1u);
    EXPECT_EQ(sd.storages[0].dtype, dtype) << cls;
  }
}

// Protocol 4 spelling: FRAME, STACK_GLOBAL, SHORT_BINUNICODE, MEMOIZE, plus
// _rebuild_parameter, LONG1, BUILD with OrderedDict state, and non-tensor values.
TEST(TorchPickle, ReadsProtocol4ParametersAndMetadata) {
  PickleBuilder p;
  p.proto(4).raw("\x95").raw(testing::le_bytes(0, 8));
  p.stack_global("collections", "OrderedDict").op('\x94').op(')').op('R').op('\x94');
  p.op('(').short_str("w").op('\x94');
  p.stack_global("torch._utils", "_rebuild_parameter").op('\x94');
  p.stack_global("torch._utils", "_rebuild_tensor_v2").op('\x94').op('(');
  p.op('(').short_str("storage").stack_global("torch", "FloatStorage").short_str("0");
  p.short_str("cpu").raw(std::string("\x8a\x02\x00\x01", 4)).op('t').op('Q');  // numel 256
  p.raw(std::string("\x8a\x00", 2));  // LONG1 of zero bytes: 0
  p.int_tuple({16, 16}).int_tuple({16, 1}).op('\x89');
  p.stack_global("collections", "OrderedDict").op(')').op('R').op('t').op('R');
  p.op('\x88').stack_global("collections", "OrderedDict").op(')').op('R').op('\x87').op('R');
  p.short_str("step").integer(-7);
  p.short_str("lr").raw("G").raw(std::string("\x3f\xf0\0\0\0\0\0\0", 8));
  p.op('u');
  // BUILD with the `_metadata` attribute state dicts carry.
  p.op('}').short_str("_metadata").op('}').short_str("version").integer(1).op('s').op('s');
  p.op('b').op('.');
  TorchStateDict sd = unpickle(p.bytes());
  ASSERT_EQ(sd.tensors.size(), 1u);
  EXPECT_EQ(sd.tensors[0].name, "w");
  EXPECT_EQ(sd.tensors[0].shape, (Shape{16, 16}));
  EXPECT_EQ(sd.storages[0].numel, 256);
}

TEST(TorchPickle, RefusesForeignGlobals) {
  PickleBuilder g;
  g.proto(2).global("os", "system").str("echo pwned").op('\x85').op('R').op('.');
  expect_refused(g.bytes(), {"'os.system'"});
  PickleBuilder sg;
  sg.proto(4).stack_global("builtins", "eval").short_str("1").op('\x85').op('R').op('.');
  expect_refused(sg.bytes(), {"'builtins.eval'"});
  PickleBuilder sg2;
  sg2.proto(4).stack_global("os", "system").op('.');
  expect_refused(sg2.bytes(), {"'os.system'"});
  PickleBuilder cls;
  cls.proto(2).global("torch.nn.modules.linear", "Linear").op(')').op('\x81').op('.');
  expect_refused(cls.bytes(), {"'torch.nn.modules.linear.Linear'"});
  PickleBuilder call;  // a storage class is a type, never called
  call.proto(2).global("torch", "FloatStorage").op(')').op('R').op('.');
  expect_refused(call.bytes(), {"torch.FloatStorage"});
  PickleBuilder inst;  // INST and OBJ build arbitrary objects
  inst.proto(2).op('(').raw("ios\nsystem\n").op('.');
  expect_refused(inst.bytes(), {"opcode 0x69"});
}

TEST(TorchPickle, RefusesEveryTruncation) {
  std::string good = state_dict_pickle(kSpecs);
  ASSERT_NO_THROW(unpickle(good));
  for (size_t n = 0; n < good.size(); ++n) {
    SCOPED_TRACE(n);
    expect_error<InvalidArgument>([&] { unpickle(good.substr(0, n)); }, {"data.pkl"});
  }
}

TEST(TorchPickle, RefusesMalformedStreams) {
  expect_refused(B("\x80\x02."), {"STOP with 0 values"});
  expect_refused(B("K\x01K\x02."), {"STOP with 2 values"});
  expect_refused(B("h\x05."), {"memo index 5 is not set"});
  expect_refused(B("0."), {"stack underflow"});
  expect_refused(B("(0."), {"stack underflow"});
  expect_refused(B("t."), {"no MARK"});
  expect_refused(B("K\x00K\x01K\x02s."), {"not a dict"});
  expect_refused(B("}K\x01K\x02s."), {"keys must be strings"});
  expect_refused(B("]K\x01"
                   "a."),
                 {"no state dict"});
  expect_refused(B("K\x01."), {"no state dict"});
  expect_refused(B("\x80\x09}."), {"protocol 9"});
  expect_refused(B("\xff"), {"opcode 0xff"});
  expect_refused(B("X\x01\0\0\0\xff."), {"UTF-8"});
  expect_refused(B("\x8a\x09\1\1\1\1\1\1\1\1\1."), {"too large"});
  expect_refused(B("cos\nsys"), {"GLOBAL"});
  expect_refused(B("K\x00K\x01"
                   "b."),
                 {"BUILD"});
  expect_refused(B("K\x01)R."), {"not a global"});
  // An empty state dict is fine; a value that is not a tensor is skipped.
  EXPECT_TRUE(unpickle(B("}.")).tensors.empty());
  PickleBuilder other;
  other.proto(2).op('}').str("a").str("b").op('s').op('.');
  EXPECT_TRUE(unpickle(other.bytes()).tensors.empty());
}

TEST(TorchPickle, DuplicateTensorNamesAreRefused) {
  std::vector<TensorSpec> specs = {kSpecs[1], kSpecs[1]};
  expect_refused(state_dict_pickle(specs), {"'layer.bias' appears twice"});
}

TEST(TorchPickle, HardLimitsFailCleanly) {
  UnpickleLimits small;
  small.max_marks = 8;
  expect_refused(std::string(100, '('), {"MARKs nested deeper than 8"}, small);
  small = {};
  small.max_stack = 100;
  std::string many;
  for (int i = 0; i < 200; ++i) many += "K\x01";
  expect_refused(many, {"stack deeper than 100"}, small);
  small = {};
  small.max_ops = 50;
  expect_refused(many, {"more than 50 opcodes"}, small);
  small = {};
  small.max_memo = 1000;
  expect_refused(B("}r\xff\xff\xff\x7f."), {"memo index 2147483647"}, small);
  small = {};
  small.max_items = 10;
  expect_refused(B("](K\x01K\x01K\x01K\x01K\x01K\x01"
                   "e(K\x01K\x01K\x01K\x01K\x01"
                   "e."),
                 {"more than 10 container items"}, small);
  expect_refused(B("(K\x01"
                   "2222222222t."),
                 {"more than 10 container items"}, small);
  // A self-referencing list (a cycle) is harmless.
  expect_refused(B("]q\x00h\x00"
                   "a."),
                 {"no state dict"});
  // Default limits bound a huge memo index too.
  expect_refused(B("}r\xff\xff\xff\xff."), {"memo index 4294967295"});
}

TEST(TorchPickle, ChecksTensorGeometry) {
  expect_refused(state_dict_pickle({{"w", "FloatStorage", "0", 4, 0, {2, 2}, {2}}}),
                 {"differ in rank"});
  expect_refused(state_dict_pickle({{"w", "FloatStorage", "0", 4, -1, {2}, {1}}}),
                 {"negative storage offset"});
  expect_refused(state_dict_pickle({{"w", "FloatStorage", "0", 4, 0, {-2}, {1}}}), {"negative"});
  expect_refused(state_dict_pickle({{"w", "FloatStorage", "0", 4, 3, {2}, {1}}}),
                 {"exceeds its storage '0' of 4 elements"});
  expect_refused(state_dict_pickle({{"w", "FloatStorage", "0", -4, 0, {2}, {1}}}),
                 {"negative storage numel"});
  expect_refused(state_dict_pickle({{"w", "FloatStorage", "0", 4, 0, {2}, {1LL << 62}}}),
                 {"exceeds its storage"});
  expect_refused(state_dict_pickle({{"w", "FloatStorage", "0", 4, 0, {5}, {1LL << 62}}}),
                 {"overflows"});
  std::vector<TensorSpec> clash = {{"a", "FloatStorage", "0", 4, 0, {4}, {1}},
                                   {"b", "HalfStorage", "0", 4, 0, {4}, {1}}};
  expect_refused(state_dict_pickle(clash), {"storage '0' declared twice"});
  // An empty tensor may sit anywhere.
  EXPECT_NO_THROW(unpickle(state_dict_pickle({{"w", "FloatStorage", "0", 0, 9, {0, 3}, {3, 1}}})));
}

TEST(TorchPickle, ContiguityRule) {
  EXPECT_TRUE(is_contiguous({2, 3}, {3, 1}));
  EXPECT_TRUE(is_contiguous({}, {}));
  EXPECT_TRUE(is_contiguous({1, 3}, {99, 1}));
  EXPECT_FALSE(is_contiguous({3, 2}, {1, 3}));
  EXPECT_FALSE(is_contiguous({2, 3}, {4, 1}));
}

}  // namespace
}  // namespace tachyon
