// unpickle_torch_object: any object torch.save wrote, read as data (training
// checkpoints): opaque globals, instances built by NEWOBJ + BUILD, tensors named by path.
#include <gtest/gtest.h>

#include "io/io_test_util.h"
#include "io/torch_pickle.h"
#include "io/torch_test_util.h"

namespace tachyon {
namespace {

using testing::expect_error;
using testing::PickleBuilder;

TorchObject read(const std::string& bytes) {
  return unpickle_torch_object(bytes, "ckpt.pkl");
}

// A tensor of 2 floats from storage "0".
void tensor(PickleBuilder& p) {
  p.global("torch._utils", "_rebuild_tensor_v2").op('(');
  p.op('(').str("storage").global("torch", "FloatStorage").str("0").str("cpu").integer(2);
  p.op('t').op('Q').integer(0).int_tuple({2}).int_tuple({1}).op('\x89');
  p.global("collections", "OrderedDict").op(')').op('R').op('t').op('R');
}

TEST(TorchObject, ReadsANamespaceEnumsAndNestedTensors) {
  PickleBuilder p;
  p.proto(2).op('}').op('(');
  // args: argparse.Namespace() by NEWOBJ, its fields set by BUILD.
  p.str("args").global("argparse", "Namespace").op(')').op('\x81').op('}').op('(');
  p.str("num_layers").integer(4).str("params_dtype").global("torch", "bfloat16");
  p.str("model_type").global("megatron.core.enums", "ModelType").integer(1).op('\x85').op('R');
  p.op('u').op('b');
  // model: {"language_model": {"encoder": {"w": tensor}}}, a list of bytes and a set.
  p.str("model").op('}').str("language_model").op('}').str("encoder").op('}').str("w");
  tensor(p);
  p.op('s').op('s').op('s');
  p.str("extra")
      .op('(')
      .raw(
          "C\x03"
          "abc")
      .op('\x8f')
      .op('(')
      .integer(7)
      .op('\x90')
      .op('l');
  p.op('u').op('.');
  TorchObject o = read(p.bytes());
  const PyValue& root = *o.root;
  const PyValue* args = root.get("args");
  ASSERT_TRUE(args);
  EXPECT_EQ(args->kind, PyValue::Kind::kObject);
  EXPECT_EQ(args->s, "argparse.Namespace");
  EXPECT_EQ(args->attr("num_layers")->i, 4);
  EXPECT_EQ(args->attr("params_dtype")->kind, PyValue::Kind::kGlobal);
  EXPECT_EQ(args->attr("params_dtype")->s, "torch.bfloat16");
  const PyValue* mt = args->attr("model_type");
  EXPECT_EQ(mt->s, "megatron.core.enums.ModelType");
  ASSERT_EQ(mt->items.size(), 1u);
  EXPECT_EQ(mt->items[0]->i, 1);
  EXPECT_EQ(args->attr("absent"), nullptr);
  ASSERT_EQ(o.state.tensors.size(), 1u);
  EXPECT_EQ(o.state.tensors[0].name, "model.language_model.encoder.w");
  EXPECT_EQ(root.get("model")->get("language_model")->get("encoder")->get("w")->s,
            "model.language_model.encoder.w");
  const PyValue* extra = root.get("extra");
  ASSERT_EQ(extra->items.size(), 2u);
  EXPECT_EQ(extra->items[0]->kind, PyValue::Kind::kBytes);
  EXPECT_EQ(extra->items[0]->s, "abc");
  EXPECT_EQ(extra->items[1]->kind, PyValue::Kind::kSet);
  EXPECT_EQ(extra->items[1]->items[0]->i, 7);
}

TEST(TorchObject, KeepsACallOfAnyGlobalOpaque) {
  // os.system("echo PWNED") as a reduce: a value naming the call, never run.
  PickleBuilder p;
  p.proto(2).global("posix", "system").str("echo PWNED").op('\x85').op('R').op('.');
  TorchObject o = read(p.bytes());
  EXPECT_EQ(o.root->kind, PyValue::Kind::kObject);
  EXPECT_EQ(o.root->describe(), "posix.system(...)");
  // The state-dict reader still refuses it by name.
  expect_error<InvalidArgument>([&] { unpickle_torch_state_dict(p.bytes(), "sd.pkl"); },
                                {"sd.pkl", "posix.system"});
}

TEST(TorchObject, StateDictReaderRefusesNewObj) {
  PickleBuilder p;
  p.proto(2).global("collections", "OrderedDict").op(')').op('\x81').op('.');
  expect_error<InvalidArgument>([&] { unpickle_torch_state_dict(p.bytes(), "sd.pkl"); },
                                {"sd.pkl", "instance of 'collections.OrderedDict'"});
}

TEST(TorchObject, RefusesCyclesAndRepeatedTensorPaths) {
  PickleBuilder cyc;
  cyc.proto(2).op(']').put(0).get(0).op('a').op('.');
  expect_error<InvalidArgument>([&] { read(cyc.bytes()); }, {"ckpt.pkl", "contains itself"});
  PickleBuilder twice;
  twice.proto(2).op('}').op('(').str("w");
  tensor(twice);
  twice.str("w");
  tensor(twice);
  twice.op('u').op('.');
  expect_error<InvalidArgument>([&] { read(twice.bytes()); }, {"tensor 'w' appears twice"});
}

}  // namespace
}  // namespace tachyon
