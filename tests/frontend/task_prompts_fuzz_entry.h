// The entry point of the task prompt fuzz target, shared with the corpus replay test so
// the same code runs under libFuzzer (clang) and in the ordinary test binary (g++).
//
// An input is the text of a task prompt file. It is parsed (parse_task_prompts); an
// InvalidArgument is a clean refusal. What is accepted must be a list of task ids that
// are unique and non-empty with non-empty prompts, that reads back the same when written
// out again, and that installs over a fake model: each task's ids are its prompt's
// encoding, found under its id. Anything else (another exception, a crash, a sanitizer
// report) is a bug, reported by abort() with a message. Returns whether the input was
// accepted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "core/error.h"
#include "core/logging.h"
#include "frontend/task_prompts.h"
#include "server/fake_backend.h"

namespace tachyon::fuzz {

[[noreturn]] inline void task_prompts_bug(const std::string& what) {
  std::fprintf(stderr, "task prompt fuzz bug: %s\n", what.c_str());
  std::abort();
}

inline bool task_prompts_one(const uint8_t* data, size_t size) {
  set_log_level(LogLevel::kOff);
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<TaskPrompt> tasks;
  try {
    tasks = parse_task_prompts(text, "fuzz.json");
  } catch (const InvalidArgument&) {
    return false;
  }
  std::set<std::string> ids;
  Json again = Json::array();
  for (const TaskPrompt& t : tasks) {
    if (t.task_id.empty() || t.prompt.empty()) task_prompts_bug("an empty task_id or prompt");
    if (!ids.insert(t.task_id).second) task_prompts_bug("task_id " + t.task_id + " twice");
    again.push_back({{"task_id", t.task_id}, {"prompt", t.prompt}});
  }
  std::vector<TaskPrompt> back;
  try {
    back = parse_task_prompts(again.dump(), "again.json");
  } catch (const InvalidArgument& e) {
    task_prompts_bug(std::string("accepted task prompts do not read back: ") + e.what());
  }
  if (back.size() != tasks.size()) task_prompts_bug("read back a different number of tasks");
  for (size_t i = 0; i < back.size(); ++i)
    if (back[i].task_id != tasks[i].task_id || back[i].prompt != tasks[i].prompt)
      task_prompts_bug("task " + tasks[i].task_id + " reads back differently");
  server::testing::FakeBackend backend(1 << 20);
  std::shared_ptr<const TaskPrefixes> installed;
  try {
    installed = install_task_prompts(backend, tasks);
  } catch (const InvalidArgument&) {
    return true;  // a prompt that does not fit the window
  }
  if (installed->size() != tasks.size()) task_prompts_bug("installed a different number of tasks");
  for (const TaskPrompt& t : tasks) {
    const TaskPrefixes::Entry* e = installed->find(t.task_id);
    if (e == nullptr) task_prompts_bug("task " + t.task_id + " not found once installed");
    if (e->ids != backend.encode(t.prompt, true))
      task_prompts_bug("task " + t.task_id + " holds other ids than its prompt's");
  }
  return true;
}

}  // namespace tachyon::fuzz
