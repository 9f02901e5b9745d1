// System prompts by task (RTP-LLM's MULTI_TASK_PROMPT): a JSON array of
//   {"task_id": 1, "prompt": "You are ..."}   (task_id an integer or a string)
// read at start. Each prompt is tokenized as a raw prompt is and pinned in the engine's
// prefix cache; a request that names a task (generate_config.task_id) has that
// prompt's tokens put before its own, and its K/V comes from the cache.
//
// A task id is one key whether written as an integer or as a string: 1 and "1" are the
// same task (task_id_key).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace tachyon {

class InferenceBackend;

struct TaskPrompt {
  std::string task_id;  // the key (task_id_key)
  std::string prompt;
};

// The key of a task id given as a JSON integer or string; nullopt for any other type.
std::optional<std::string> task_id_key(const Json& v);

// Parses the task prompts. Throws InvalidArgument naming `source` and the entry (its
// index, and its task_id where it has one) for: text that is not JSON, a value that is
// not an array, an entry that is not an object, a missing or ill-typed task_id or
// prompt, an empty prompt, a task_id given twice (1 and "1" included), unknown fields.
std::vector<TaskPrompt> parse_task_prompts(std::string_view json_text, std::string_view source);
// The same from a file (NotFound when it cannot be read).
std::vector<TaskPrompt> load_task_prompts(const std::string& path);

// The task prompts as token ids, by task id: what requests put before their own prompt.
class TaskPrefixes {
 public:
  struct Entry {
    std::vector<int32_t> ids;
    int32_t pinned = 0;  // tokens held in the prefix cache
  };
  // Adds a task; throws InvalidArgument when the id is already there.
  void add(const std::string& task_id, Entry entry);
  // The task's entry; nullptr when there is no such task.
  const Entry* find(const std::string& task_id) const;
  bool empty() const { return tasks_.empty(); }
  size_t size() const { return tasks_.size(); }
  // The ids, comma-separated, in key order (for messages).
  std::string ids_list() const;

 private:
  std::map<std::string, Entry, std::less<>> tasks_;
};

// Tokenizes each task prompt as a raw prompt (backend.encode with special tokens), checks
// that it leaves room in the model's window, pins it (backend.pin_prefix) and logs one
// line per task: its id, its tokens and the tokens pinned. Throws InvalidArgument naming
// the task for a prompt that encodes to nothing or does not fit, and passes on the
// backend's errors.
std::shared_ptr<const TaskPrefixes> install_task_prompts(InferenceBackend& backend,
                                                         const std::vector<TaskPrompt>& tasks);

}  // namespace tachyon
