// Unit tests of the post-processors (post_processors.cc) on small hand-built
// tokenizer.json sections, with expectations derived by hand from the documented
// behaviour of Hugging Face `tokenizers` (several are the examples of its documentation).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::tok {
namespace {

TEST(PostProcessors, TemplateRobertaBertSequence) {
  Json tmpl = {{"type", "TemplateProcessing"},
               {"single",
                {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                 {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
               {"special_tokens",
                {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}},
                 {"</s>", {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}}}}}};
  std::vector<int32_t> ids = {7, 8};
  make_post_processor(tmpl, "post_processor")->process(ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 7, 8, 2}));
  ids = {7};
  make_post_processor({{"type", "RobertaProcessing"}, {"sep", {"</s>", 2}}, {"cls", {"<s>", 0}}},
                      "post_processor")
      ->process(ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 7, 2}));
  ids = {7};
  make_post_processor(
      {{"type", "Sequence"},
       {"processors",
        {{{"type", "ByteLevel"}},
         {{"type", "BertProcessing"}, {"sep", {"[SEP]", 102}}, {"cls", {"[CLS]", 101}}}}}},
      "post_processor")
      ->process(ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{101, 7, 102}));
  Json bad = tmpl;
  bad["special_tokens"].erase("</s>");
  EXPECT_THROW(make_post_processor(bad, "post_processor"), InvalidArgument);
}

}  // namespace
}  // namespace tachyon::tok
