#include "chat/chat_template.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/mmap.h"

namespace tachyon {

ChatTemplate ChatTemplate::compile(std::string_view source) {
  ChatTemplate t;
  t.template_ = jinja::Template::parse(source);
  t.source_ = std::make_shared<const std::string>(source);
  return t;
}

template <typename J>
RenderedChat ChatTemplate::render_impl(const BasicChatTemplateInputs<J>& in,
                                       const jinja::RenderOptions& options) const {
  jinja::Vars vars;
  try {
    // What the client sent is untrusted; the special tokens come from the tokenizer.
    vars.emplace_back("messages", jinja::from_json(in.messages, /*untrusted=*/true));
    vars.emplace_back("tools", jinja::from_json(in.tools, /*untrusted=*/true));
    vars.emplace_back("documents", jinja::from_json(in.documents, /*untrusted=*/true));
    vars.emplace_back("add_generation_prompt", jinja::Value::boolean(in.add_generation_prompt));
    auto token = [&](const char* name, const std::string& v) {
      if (!v.empty()) vars.emplace_back(name, jinja::Value::string(v));
    };
    token("bos_token", in.bos_token);
    token("eos_token", in.eos_token);
    token("unk_token", in.unk_token);
    token("pad_token", in.pad_token);
    if (!in.extra.is_null()) {
      if (!in.extra.is_object())
        raise<InvalidArgument>("chat template kwargs must be a JSON object");
      if (in.extra.size() > kMaxKwargs)
        raise<InvalidArgument>("chat_template_kwargs has {} keys; the limit is {}", in.extra.size(),
                               kMaxKwargs);
      if (const size_t bytes = in.extra.dump().size(); bytes > kMaxKwargsBytes)
        raise<InvalidArgument>("chat_template_kwargs takes {} bytes as JSON; the limit is {}",
                               bytes, kMaxKwargsBytes);
      // An object's keys are unique, so a kwarg can only meet a standard argument (an
      // error) or a special token set above (which it replaces, as in transformers).
      const size_t standard = vars.size();
      for (auto it = in.extra.begin(); it != in.extra.end(); ++it) {
        const std::string& k = it.key();
        if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt")
          raise<InvalidArgument>("chat template kwarg '{}' collides with a standard argument", k);
        jinja::Value v = jinja::from_json(it.value(), /*untrusted=*/true);
        auto same = std::find_if(vars.begin(), vars.begin() + static_cast<std::ptrdiff_t>(standard),
                                 [&](const auto& kv) { return kv.first == k; });
        if (same != vars.begin() + static_cast<std::ptrdiff_t>(standard))
          same->second = std::move(v);
        else
          vars.emplace_back(k, std::move(v));
      }
    }
  } catch (const jinja::TemplateError& e) {
    raise<InvalidArgument>("chat template inputs: {}", e.message);
  }
  jinja::MarkedString out = template_.render_marked(vars, options);
  RenderedChat r;
  r.untrusted = out.take_untrusted();
  r.text = out.take_text();
  return r;
}

std::string ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  return render_impl(inputs, jinja::RenderOptions{}).text;
}
std::string ChatTemplate::render(const OrderedChatTemplateInputs& inputs) const {
  return render_impl(inputs, jinja::RenderOptions{}).text;
}
std::string ChatTemplate::render(const ChatTemplateInputs& inputs,
                                 const jinja::RenderOptions& options) const {
  return render_impl(inputs, options).text;
}
std::string ChatTemplate::render(const OrderedChatTemplateInputs& inputs,
                                 const jinja::RenderOptions& options) const {
  return render_impl(inputs, options).text;
}
RenderedChat ChatTemplate::render_marked(const ChatTemplateInputs& inputs,
                                         const jinja::RenderOptions& options) const {
  return render_impl(inputs, options);
}
RenderedChat ChatTemplate::render_marked(const OrderedChatTemplateInputs& inputs,
                                         const jinja::RenderOptions& options) const {
  return render_impl(inputs, options);
}

const std::string& ChatTemplateSet::select(std::optional<std::string_view> name,
                                           bool has_tools) const {
  if (templates.empty())
    raise<InvalidArgument>(
        "Cannot use chat template functions because tokenizer.chat_template is not set and no "
        "template argument was passed");
  if (name) {
    auto it = templates.find(std::string(*name));
    if (it == templates.end()) raise<InvalidArgument>("no chat template named '{}'", *name);
    return it->second;
  }
  if (has_tools) {
    auto it = templates.find("tool_use");
    if (it != templates.end()) return it->second;
  }
  auto it = templates.find("default");
  if (it != templates.end()) return it->second;
  std::string names;
  for (const auto& [k, v] : templates) names += (names.empty() ? "" : ", ") + k;
  raise<InvalidArgument>(
      "This model has multiple chat templates with no default specified (available: {})", names);
}

ChatTemplate ChatTemplateSet::compile(std::optional<std::string_view> name, bool has_tools) const {
  const std::string& source = select(name, has_tools);
  try {
    return ChatTemplate::compile(source);
  } catch (const InvalidArgument& e) {
    for (const auto& [k, v] : templates)
      if (&v == &source) {
        auto o = origins.find(k);
        raise<InvalidArgument>(
            "{}: {}", o != origins.end() ? o->second : "chat template '" + k + "'", e.what());
      }
    throw;
  }
}

ChatTemplateSet chat_templates_from_config(const Json& config) {
  ChatTemplateSet set;
  if (!config.is_object()) return set;
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return set;
  if (it->is_string()) {
    set.templates["default"] = it->get<std::string>();
  } else if (it->is_array()) {
    for (const auto& t : *it) {
      if (!t.is_object() || !t.contains("name") || !t.contains("template") ||
          !t["name"].is_string() || !t["template"].is_string())
        raise<InvalidArgument>(
            "tokenizer_config.json: chat_template entries must be {{name, template}}");
      set.templates[t["name"].get<std::string>()] = t["template"].get<std::string>();
    }
  } else {
    raise<InvalidArgument>("tokenizer_config.json: chat_template must be a string or a list");
  }
  return set;
}

ChatTemplateSet load_chat_templates(const std::string& model_dir) {
  namespace fs = std::filesystem;
  ChatTemplateSet files;
  fs::path dir(model_dir);
  std::error_code ec;
  if (fs::is_regular_file(dir / "chat_template.jinja", ec)) {
    files.templates["default"] = read_file((dir / "chat_template.jinja").string());
    files.origins["default"] = (dir / "chat_template.jinja").string();
  }
  if (fs::is_directory(dir / "additional_chat_templates", ec)) {
    for (const auto& e : fs::directory_iterator(dir / "additional_chat_templates", ec)) {
      if (e.path().extension() == ".jinja") {
        files.templates[e.path().stem().string()] = read_file(e.path().string());
        files.origins[e.path().stem().string()] = e.path().string();
      }
    }
  }
  if (!files.empty()) return files;
  // A multimodal model's processor keeps its template in chat_template.json (llava-hf).
  if (fs::path pj = dir / "chat_template.json"; fs::is_regular_file(pj, ec)) {
    const Json j = load_json_file(pj.string());
    if (!j.is_object() || !j.contains("chat_template") || !j["chat_template"].is_string())
      raise<InvalidArgument>("{}: chat_template must be a string", pj.string());
    files.templates["default"] = j["chat_template"].get<std::string>();
    files.origins["default"] = pj.string() + ": chat_template";
    return files;
  }
  fs::path cfg = dir / "tokenizer_config.json";
  if (!fs::is_regular_file(cfg, ec)) return files;
  ChatTemplateSet set = chat_templates_from_config(load_json_file(cfg.string()));
  for (const auto& [k, v] : set.templates)
    set.origins[k] = cfg.string() + (set.templates.size() == 1 && k == "default"
                                         ? ": chat_template"
                                         : ": chat_template '" + k + "'");
  return set;
}

std::string special_token(const Json& config, std::string_view key) {
  if (!config.is_object()) return "";
  auto it = config.find(std::string(key));
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  return "";
}

}  // namespace tachyon
