// The runner's rotary rows gathered on the device (ModelRunner::set_rope_gather_rows): a
// step that gathers its rows from the table of every position gives the same logits,
// bit for bit, as one that uploads the rows it computed on the host; rotaries whose
// rows do not depend on the position alone (2-D, length-dependent) keep the upload.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "model/loader.h"
#include "model/model_runner.h"
#include "model/model_test_util.h"

namespace tachyon {
namespace {

using testing_util::fixture;
using testing_util::one_seq;

struct Steps {
  std::vector<Tensor> logits;
  int64_t gathers = 0;
};

// A 12-token prompt in two chunks (the second starts at position 5), then three decode
// steps, each step gathering from `gather_rows` tokens (0: never).
Steps run(const std::string& name, int64_t gather_rows) {
  auto model = load_model(fixture(name.c_str()));
  auto* d = dynamic_cast<ModelRunner*>(model.get());
  EXPECT_NE(d, nullptr);
  if (d == nullptr) return {};
  d->set_rope_gather_rows(gather_rows);
  d->init_kv_cache(8, 4);
  const std::vector<int32_t> prompt = {11, 200, 37, 480, 9, 9, 301, 77, 5, 64, 3, 150};
  const std::vector<int32_t> next = {42, 7, 311};
  const std::vector<int32_t> blocks = {0, 1, 2, 3};
  Steps r;
  r.logits.push_back(d->forward(one_seq({prompt.begin(), prompt.begin() + 5}, 0, blocks)));
  r.logits.push_back(d->forward(one_seq({prompt.begin() + 5, prompt.end()}, 5, blocks)));
  for (size_t i = 0; i < next.size(); ++i)
    r.logits.push_back(
        d->forward(one_seq({next[i]}, static_cast<int32_t>(prompt.size() + i), blocks)));
  r.gathers = d->rope_gathers();
  return r;
}

TEST(RopeGather, SameLogitsAsUploadedRows) {
  // llama* and chatglm3 (a partial rotary): rows by position (the table is built at the
  // first step and grown at the second and third: a row missing from it is an error);
  // the dynamic scaling's rows depend on the length; gpt2 has no rotary.
  const std::vector<std::pair<std::string, bool>> cases = {{"llama", true},
                                                           {"llama_rope_llama3", true},
                                                           {"llama_rope_linear", true},
                                                           {"llama_rope_dynamic", false},
                                                           {"chatglm3", true},
                                                           {"gpt2", false}};
  for (const auto& [name, position_only] : cases) {
    SCOPED_TRACE(name);
    const Steps want = run(name, 0);
    const Steps got = run(name, 1);
    EXPECT_EQ(want.gathers, 0);
    EXPECT_EQ(got.gathers, position_only ? 5 : 0);
    ASSERT_EQ(got.logits.size(), want.logits.size());
    for (size_t s = 0; s < got.logits.size(); ++s) {
      ASSERT_EQ(got.logits[s].shape(), want.logits[s].shape()) << "step " << s;
      EXPECT_EQ(std::memcmp(got.logits[s].raw(), want.logits[s].raw(), got.logits[s].nbytes()), 0)
          << "step " << s;
    }
    // Below the threshold nothing is gathered.
    EXPECT_EQ(run(name, 6).gathers, position_only ? 1 : 0);  // the 7-token chunk only
  }
}

}  // namespace
}  // namespace tachyon
