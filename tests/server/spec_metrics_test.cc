// Speculative decoding in the server: its counters on /metrics under vLLM's names (and
// tachyon's), the native API's force_disable_sp_run and aux_info fields.
#include <gtest/gtest.h>

#include "server/app_test_util.h"

namespace tachyon::server::testing {
namespace {

TEST(SpeculativeMetrics, ExportedFromTheBackendStats) {
  TestServer s;
  auto before = s.get("/metrics");
  ASSERT_EQ(before.status, 200);
  EXPECT_NE(before.body.find("vllm:spec_decode_num_drafts_total{model_name=\"fake-model\"} 0"),
            std::string::npos);
  EXPECT_EQ(before.body.find("spec_decode_num_accepted_tokens_per_pos_total{"), std::string::npos);
  s.backend->prefix_stats.spec_num_drafts = 40;
  s.backend->prefix_stats.spec_num_draft_tokens = 150;
  s.backend->prefix_stats.spec_num_accepted_tokens = 90;
  s.backend->prefix_stats.spec_accepted_per_pos = {35, 30, 25};
  auto r = s.get("/metrics");
  ASSERT_EQ(r.status, 200);
  for (const char* needle :
       {"vllm:spec_decode_num_drafts_total{model_name=\"fake-model\"} 40",
        "tachyon:spec_decode_num_drafts_total{model_name=\"fake-model\"} 40",
        "vllm:spec_decode_num_draft_tokens_total{model_name=\"fake-model\"} 150",
        "vllm:spec_decode_num_accepted_tokens_total{model_name=\"fake-model\"} 90",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"fake-model\",position="
        "\"0\"} 35",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"fake-model\",position="
        "\"2\"} 25",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter"})
    EXPECT_NE(r.body.find(needle), std::string::npos) << needle << "\n" << r.body;
}

TEST(SpeculativeNativeApi, ForceDisableReachesTheEngineAndAuxInfoReports) {
  TestServer s;
  Json b = {{"prompt", "hello"},
            {"generate_config", {{"max_new_tokens", 4}, {"force_disable_sp_run", true}}}};
  auto r = s.post("/", b);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(s.backend->last_params().force_disable_sp_run);
  const Json j = Json::parse(r.body);
  EXPECT_EQ(j["aux_info"]["speculative_draft_rounds"], 0);
  EXPECT_EQ(j["aux_info"]["speculative_accepted_tokens_per_pos"], Json::array());
  b["generate_config"].erase("force_disable_sp_run");
  ASSERT_EQ(s.post("/", b).status, 200);
  EXPECT_FALSE(s.backend->last_params().force_disable_sp_run);
  b["generate_config"]["force_disable_sp_run"] = "yes";
  EXPECT_EQ(s.post("/", b).status, 400);
}

}  // namespace
}  // namespace tachyon::server::testing
