#include "frontend/task_prompts.h"

#include "core/error.h"
#include "core/logging.h"
#include "frontend/backend.h"

namespace tachyon {
namespace {

std::vector<TaskPrompt> task_prompts_from(const Json& j, std::string_view source) {
  if (!j.is_array())
    raise<InvalidArgument>(
        "{}: the task prompts must be a JSON array of {{\"task_id\": ..., \"prompt\": ...}} "
        "objects, not {}",
        source, json_type_name(j));
  std::vector<TaskPrompt> out;
  std::map<std::string, size_t, std::less<>> seen;
  for (size_t i = 0; i < j.size(); ++i) {
    const Json& e = j[i];
    if (!e.is_object())
      raise<InvalidArgument>(
          "{}: entry {} must be an object with \"task_id\" and \"prompt\", not {}", source, i,
          json_type_name(e));
    auto id_it = e.find("task_id");
    if (id_it == e.end()) raise<InvalidArgument>("{}: entry {} has no \"task_id\"", source, i);
    std::optional<std::string> key = task_id_key(*id_it);
    if (!key)
      raise<InvalidArgument>("{}: entry {}: \"task_id\" must be an integer or a string, not {}",
                             source, i, json_type_name(*id_it));
    if (key->empty())
      raise<InvalidArgument>("{}: entry {}: \"task_id\" must not be empty", source, i);
    for (auto it = e.begin(); it != e.end(); ++it)
      if (it.key() != "task_id" && it.key() != "prompt")
        raise<InvalidArgument>(
            "{}: entry {} (task_id {}): unknown field \"{}\" (an entry has \"task_id\" and "
            "\"prompt\")",
            source, i, *key, it.key());
    auto p_it = e.find("prompt");
    if (p_it == e.end())
      raise<InvalidArgument>("{}: entry {} (task_id {}) has no \"prompt\"", source, i, *key);
    if (!p_it->is_string())
      raise<InvalidArgument>("{}: entry {} (task_id {}): \"prompt\" must be a string, not {}",
                             source, i, *key, json_type_name(*p_it));
    if (p_it->get_ref<const std::string&>().empty())
      raise<InvalidArgument>("{}: entry {} (task_id {}): \"prompt\" is empty", source, i, *key);
    if (auto prev = seen.find(*key); prev != seen.end())
      raise<InvalidArgument>("{}: entry {} (task_id {}): task_id already given by entry {}", source,
                             i, *key, prev->second);
    seen.emplace(*key, i);
    out.push_back({*key, p_it->get<std::string>()});
  }
  return out;
}

}  // namespace

std::optional<std::string> task_id_key(const Json& v) {
  if (v.is_number_integer()) return v.dump();  // 1 -> "1", as the string "1"
  if (v.is_string()) return v.get<std::string>();
  return std::nullopt;
}

std::vector<TaskPrompt> parse_task_prompts(std::string_view json_text, std::string_view source) {
  return task_prompts_from(parse_json(json_text, source), source);
}

std::vector<TaskPrompt> load_task_prompts(const std::string& path) {
  return task_prompts_from(load_json_file(path), path);
}

void TaskPrefixes::add(const std::string& task_id, Entry entry) {
  if (!tasks_.emplace(task_id, std::move(entry)).second)
    raise<InvalidArgument>("task_id {} is given twice", task_id);
}

const TaskPrefixes::Entry* TaskPrefixes::find(const std::string& task_id) const {
  auto it = tasks_.find(task_id);
  return it == tasks_.end() ? nullptr : &it->second;
}

std::string TaskPrefixes::ids_list() const {
  std::string out;
  for (const auto& [id, e] : tasks_) out += (out.empty() ? "" : ", ") + id;
  return out;
}

std::shared_ptr<const TaskPrefixes> install_task_prompts(InferenceBackend& backend,
                                                         const std::vector<TaskPrompt>& tasks) {
  auto out = std::make_shared<TaskPrefixes>();
  const int32_t window = backend.model_info().max_model_len;
  for (const TaskPrompt& t : tasks) {
    TaskPrefixes::Entry e;
    e.ids = backend.encode(t.prompt, /*add_special_tokens=*/true);
    if (e.ids.empty()) raise<InvalidArgument>("task prompt {} encodes to no tokens", t.task_id);
    if (static_cast<int64_t>(e.ids.size()) >= window)
      raise<InvalidArgument>(
          "task prompt {} has {} tokens; the model's maximum sequence length is {}, which "
          "leaves no room for a request",
          t.task_id, e.ids.size(), window);
    e.pinned = backend.pin_prefix(e.ids);
    log_info("task prompt {}: {} tokens, {} pinned in the prefix cache", t.task_id, e.ids.size(),
             e.pinned);
    out->add(t.task_id, std::move(e));
  }
  return out;
}

}  // namespace tachyon
