#include "frontend/task_prompts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "server/fake_backend.h"

namespace tachyon {
namespace {

using server::testing::FakeBackend;
using ::testing::HasSubstr;

// The message of the InvalidArgument that parsing `text` throws ("" when none).
std::string parse_error(const std::string& text) {
  try {
    parse_task_prompts(text, "prompts.json");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(TaskPrompts, ParsesIntegerAndStringIds) {
  auto tasks = parse_task_prompts(
      R"([{"task_id": 1, "prompt": "You are terse."}, {"task_id": "sum", "prompt": "Sum up:"},
          {"task_id": -3, "prompt": "x"}])",
      "prompts.json");
  ASSERT_EQ(tasks.size(), 3u);
  EXPECT_EQ(tasks[0].task_id, "1");
  EXPECT_EQ(tasks[0].prompt, "You are terse.");
  EXPECT_EQ(tasks[1].task_id, "sum");
  EXPECT_EQ(tasks[1].prompt, "Sum up:");
  EXPECT_EQ(tasks[2].task_id, "-3");
  EXPECT_TRUE(parse_task_prompts("[]", "prompts.json").empty());
}

TEST(TaskPrompts, IdKeysOfIntegersAndStringsMatch) {
  EXPECT_EQ(task_id_key(Json(1)), "1");
  EXPECT_EQ(task_id_key(Json("1")), "1");
  EXPECT_EQ(task_id_key(Json(uint64_t{18446744073709551615u})), "18446744073709551615");
  EXPECT_EQ(task_id_key(Json(1.0)), std::nullopt);
  EXPECT_EQ(task_id_key(Json(true)), std::nullopt);
  EXPECT_EQ(task_id_key(Json(nullptr)), std::nullopt);
  EXPECT_EQ(task_id_key(Json::array()), std::nullopt);
}

TEST(TaskPrompts, RefusesWhatIsNotJson) {
  EXPECT_THAT(parse_error(R"([{"task_id": 1, "prompt": "a")"),
              HasSubstr("prompts.json: invalid JSON"));
}

TEST(TaskPrompts, RefusesWhatIsNotAnArray) {
  EXPECT_THAT(parse_error(R"({"task_id": 1, "prompt": "a"})"),
              HasSubstr("prompts.json: the task prompts must be a JSON array"));
  EXPECT_THAT(parse_error(R"("a")"), HasSubstr("not a string"));
}

TEST(TaskPrompts, RefusesAnEntryThatIsNotAnObject) {
  EXPECT_THAT(parse_error(R"([{"task_id": 1, "prompt": "a"}, 7])"),
              HasSubstr("prompts.json: entry 1 must be an object"));
}

TEST(TaskPrompts, RefusesAMissingOrIllTypedTaskId) {
  EXPECT_THAT(parse_error(R"([{"prompt": "a"}])"), HasSubstr("entry 0 has no \"task_id\""));
  EXPECT_THAT(parse_error(R"([{"task_id": 1, "prompt": "a"}, {"task_id": 2.5, "prompt": "b"}])"),
              HasSubstr("entry 1: \"task_id\" must be an integer or a string, not a number"));
  EXPECT_THAT(parse_error(R"([{"task_id": null, "prompt": "a"}])"),
              HasSubstr("entry 0: \"task_id\" must be an integer or a string, not null"));
  EXPECT_THAT(parse_error(R"([{"task_id": [1], "prompt": "a"}])"), HasSubstr("not an array"));
  EXPECT_THAT(parse_error(R"([{"task_id": "", "prompt": "a"}])"),
              HasSubstr("entry 0: \"task_id\" must not be empty"));
}

TEST(TaskPrompts, RefusesAMissingIllTypedOrEmptyPrompt) {
  EXPECT_THAT(parse_error(R"([{"task_id": 4}])"),
              HasSubstr("entry 0 (task_id 4) has no \"prompt\""));
  EXPECT_THAT(parse_error(R"([{"task_id": "x", "prompt": ["a"]}])"),
              HasSubstr("entry 0 (task_id x): \"prompt\" must be a string, not an array"));
  EXPECT_THAT(parse_error(R"([{"task_id": 1, "prompt": "a"}, {"task_id": 2, "prompt": ""}])"),
              HasSubstr("entry 1 (task_id 2): \"prompt\" is empty"));
}

TEST(TaskPrompts, RefusesADuplicateIdAlsoAcrossIntegerAndString) {
  EXPECT_THAT(parse_error(R"([{"task_id": 1, "prompt": "a"}, {"task_id": 1, "prompt": "b"}])"),
              HasSubstr("entry 1 (task_id 1): task_id already given by entry 0"));
  EXPECT_THAT(parse_error(R"([{"task_id": 1, "prompt": "a"}, {"task_id": "1", "prompt": "b"}])"),
              HasSubstr("entry 1 (task_id 1): task_id already given by entry 0"));
  // Other spellings are other ids.
  EXPECT_EQ(parse_error(R"([{"task_id": 1, "prompt": "a"}, {"task_id": "01", "prompt": "b"}])"),
            "");
}

TEST(TaskPrompts, RefusesUnknownFields) {
  EXPECT_THAT(parse_error(R"([{"task_id": 3, "prompt": "a", "system": "b"}])"),
              HasSubstr("entry 0 (task_id 3): unknown field \"system\""));
}

TEST(TaskPrompts, LoadsAFileAndNamesAMissingOne) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tachyon_task_prompts_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "tasks.json").string();
  std::ofstream(path) << R"([{"task_id": 9, "prompt": "Answer briefly."}])";
  auto tasks = load_task_prompts(path);
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].task_id, "9");
  std::ofstream(path) << R"([{"task_id": 9}])";
  try {
    load_task_prompts(path);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr(path + ": entry 0 (task_id 9) has no \"prompt\""));
  }
  EXPECT_THROW(load_task_prompts((dir / "missing.json").string()), NotFound);
  std::filesystem::remove_all(dir);
}

TEST(TaskPrompts, InstallEncodesAsARawPromptAndPinsEach) {
  FakeBackend backend;
  auto tasks = parse_task_prompts(
      R"([{"task_id": 1, "prompt": "You are a helpful assistant."}, {"task_id": "b", "prompt": "B"}])",
      "prompts.json");
  auto prefixes = install_task_prompts(backend, tasks);
  ASSERT_EQ(prefixes->size(), 2u);
  const TaskPrefixes::Entry* one = prefixes->find("1");
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(one->ids, backend.encode("You are a helpful assistant.", true));
  EXPECT_EQ(one->ids.front(), 1);  // BOS: the special tokens of a raw prompt
  EXPECT_EQ(one->pinned, 16);      // 29 tokens: one whole block of the fake's 16
  const TaskPrefixes::Entry* b = prefixes->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->pinned, 0);
  EXPECT_EQ(prefixes->find("2"), nullptr);
  EXPECT_EQ(prefixes->ids_list(), "1, b");
  auto pinned = backend.pinned();
  ASSERT_EQ(pinned.size(), 2u);
  EXPECT_EQ(pinned[0], one->ids);
  EXPECT_EQ(pinned[1], b->ids);
}

TEST(TaskPrompts, InstallRefusesAPromptThatLeavesNoRoom) {
  FakeBackend backend(/*max_model_len=*/8);
  auto tasks = parse_task_prompts(R"([{"task_id": 5, "prompt": "seven c"}])", "prompts.json");
  try {
    install_task_prompts(backend, tasks);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("task prompt 5 has 8 tokens"));
  }
  EXPECT_TRUE(backend.pinned().empty());
}

}  // namespace
}  // namespace tachyon
