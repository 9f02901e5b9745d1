// Post-processors of tokenizer.json (special tokens around a single sequence) and the
// JSON field helpers shared by the pipeline factories.
#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/pipeline.h"

namespace tachyon::tok {

const Json& field(const Json& j, std::string_view key, const std::string& path) {
  if (!j.is_object()) raise<InvalidArgument>("{}: expected an object", path);
  auto it = j.find(key);
  if (it == j.end()) raise<InvalidArgument>("{}.{}: missing", path, key);
  return *it;
}

std::string get_string(const Json& j, std::string_view key, const std::string& path) {
  const Json& v = field(j, key, path);
  if (!v.is_string()) raise<InvalidArgument>("{}.{}: expected a string", path, key);
  return v.get<std::string>();
}

std::optional<std::string> get_opt_string(const Json& j, std::string_view key,
                                          const std::string& path) {
  if (!j.is_object()) raise<InvalidArgument>("{}: expected an object", path);
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) raise<InvalidArgument>("{}.{}: expected a string or null", path, key);
  return it->get<std::string>();
}

bool get_bool(const Json& j, std::string_view key, bool fallback, const std::string& path) {
  if (!j.is_object()) raise<InvalidArgument>("{}: expected an object", path);
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) raise<InvalidArgument>("{}.{}: expected true or false", path, key);
  return it->get<bool>();
}

int64_t get_int(const Json& j, std::string_view key, int64_t fallback, const std::string& path) {
  if (!j.is_object()) raise<InvalidArgument>("{}: expected an object", path);
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) raise<InvalidArgument>("{}.{}: expected an integer", path, key);
  return it->get<int64_t>();
}

char32_t get_char(const Json& j, std::string_view key, char32_t fallback, const std::string& path) {
  auto s = get_opt_string(j, key, path);
  if (!s) return fallback;
  size_t len = 0;
  char32_t c = s->empty() ? 0 : utf8::decode(*s, 0, len);
  if (s->empty() || len != s->size()) {
    raise<InvalidArgument>("{}.{}: expected exactly one character, got '{}'", path, key, *s);
  }
  return c;
}

std::string type_of(const Json& j, const std::string& path) {
  if (!j.is_object()) raise<InvalidArgument>("{}: expected an object", path);
  return get_string(j, "type", path);
}

namespace {

class Template : public PostProcessor {
 public:
  Template(const Json& j, const std::string& path) {
    const Json& single = field(j, "single", path);
    if (!single.is_array()) raise<InvalidArgument>("{}.single: expected an array", path);
    const Json specials = j.contains("special_tokens") ? j["special_tokens"] : Json::object();
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string p = fmt::format("{}.single[{}]", path, i);
      const Json& item = single[i];
      if (item.is_object() && item.contains("Sequence")) {
        parts_.push_back({true, {}});
      } else if (item.is_object() && item.contains("SpecialToken")) {
        std::string id = get_string(item["SpecialToken"], "id", p + ".SpecialToken");
        if (!specials.is_object() || !specials.contains(id)) {
          raise<InvalidArgument>("{}.SpecialToken: '{}' is missing from {}.special_tokens", p, id,
                                 path);
        }
        const Json& ids = field(specials[id], "ids", path + ".special_tokens." + id);
        if (!ids.is_array())
          raise<InvalidArgument>("{}.special_tokens.{}.ids: expected an array", path, id);
        Part part{false, {}};
        for (const Json& v : ids) {
          if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
            raise<InvalidArgument>("{}.special_tokens.{}.ids: expected token ids", path, id);
          }
          part.ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
        }
        parts_.push_back(std::move(part));
      } else {
        raise<InvalidArgument>("{}: expected a Sequence or a SpecialToken", p);
      }
    }
  }
  void process(std::vector<int32_t>& ids) const override {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const Part& p : parts_) {
      if (p.sequence) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else {
        out.insert(out.end(), p.ids.begin(), p.ids.end());
      }
    }
    ids.swap(out);
  }

 private:
  struct Part {
    bool sequence;
    std::vector<int32_t> ids;
  };
  std::vector<Part> parts_;
};

// [cls] A [sep], as RobertaProcessing and BertProcessing add.
class ClsSep : public PostProcessor {
 public:
  ClsSep(const Json& j, const std::string& path) {
    cls_ = token_id(j, "cls", path);
    sep_ = token_id(j, "sep", path);
  }
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), cls_);
    ids.push_back(sep_);
  }

 private:
  static int32_t token_id(const Json& j, const char* key, const std::string& path) {
    const Json& v = field(j, key, path);
    if (!v.is_array() || v.size() != 2 || !v[1].is_number_integer() || v[1].get<int64_t>() < 0 ||
        v[1].get<int64_t>() > INT32_MAX) {
      raise<InvalidArgument>("{}.{}: expected [token, id]", path, key);
    }
    return static_cast<int32_t>(v[1].get<int64_t>());
  }
  int32_t cls_, sep_;
};

class NoOp : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
};

class Sequence : public PostProcessor {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PostProcessor>> v) : items_(std::move(v)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& p : items_) p->process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> items_;
};

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const Json& j, const std::string& path) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, path);
  if (type == "TemplateProcessing") return std::make_unique<Template>(j, path);
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    return std::make_unique<ClsSep>(j, path);
  }
  if (type == "ByteLevel") return std::make_unique<NoOp>();
  if (type == "Sequence") {
    const Json& list = field(j, "processors", path);
    if (!list.is_array()) raise<InvalidArgument>("{}.processors: expected an array", path);
    std::vector<std::unique_ptr<PostProcessor>> items;
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_post_processor(list[i], fmt::format("{}.processors[{}]", path, i));
      if (p) items.push_back(std::move(p));
    }
    return std::make_unique<Sequence>(std::move(items));
  }
  raise<InvalidArgument>("{}.type: unsupported post-processor '{}'", path, type);
}

}  // namespace tachyon::tok
