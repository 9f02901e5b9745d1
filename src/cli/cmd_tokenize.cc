// `tachyon tokenize`: encode and decode with a checkpoint's tokenizer.
//   --tokenizer DIR --jsonl   one JSON request per stdin line, one JSON reply per stdout
//                             line (flushed per line):
//     {"text": "...", "add_special_tokens": true}          -> {"ids": [...]}
//     {"ids": [...], "skip_special_tokens": false}          -> {"text": "..."}
//     {"messages": [...], "add_generation_prompt": true}    -> {"rendered": "...", "ids": [...]}
//       (optional "tools", "documents", "chat_template_kwargs", "chat_template_name")
//     a request that fails                                  -> {"error": "..."}
//   --tokenizer DIR --text T  prints the ids of T (with special tokens unless
//                             --no-special-tokens).
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/json.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::cli {
namespace {

bool bool_field(const Json& req, const char* key, bool fallback) {
  if (!req.contains(key) || req[key].is_null()) return fallback;
  if (!req[key].is_boolean()) raise<InvalidArgument>("\"{}\" must be true or false", key);
  return req[key].get<bool>();
}

Json handle(const Tokenizer& tok, const std::string& line) {
  Json req = parse_json(line, "request");
  if (!req.is_object()) raise<InvalidArgument>("request: expected a JSON object");
  if (req.contains("text")) {
    if (!req["text"].is_string()) raise<InvalidArgument>("\"text\" must be a string");
    return Json{{"ids", tok.encode(req["text"].get<std::string>(),
                                   bool_field(req, "add_special_tokens", true))}};
  }
  if (req.contains("ids")) {
    const Json& ids = req["ids"];
    if (!ids.is_array()) raise<InvalidArgument>("\"ids\" must be an array of token ids");
    std::vector<int32_t> v;
    v.reserve(ids.size());
    for (const Json& x : ids) {
      // (An unsigned value above INT64_MAX would wrap in get<int64_t>(): read it as one.)
      const bool in_range = x.is_number_unsigned()
                                ? x.get<uint64_t>() <= static_cast<uint64_t>(INT32_MAX)
                                : x.is_number_integer() && x.get<int64_t>() >= INT32_MIN &&
                                      x.get<int64_t>() <= INT32_MAX;
      if (!in_range) {
        raise<InvalidArgument>("\"ids\" must be an array of token ids");
      }
      v.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
    return Json{{"text", tok.decode(v, bool_field(req, "skip_special_tokens", false))}};
  }
  if (req.contains("messages")) {
    // Re-read keeping key order: tools and arguments render in the order given.
    auto ordered = nlohmann::ordered_json::parse(line);
    OrderedChatRequest chat;
    chat.messages = ordered["messages"];
    if (!chat.messages.is_array()) raise<InvalidArgument>("\"messages\" must be an array");
    chat.add_generation_prompt = bool_field(req, "add_generation_prompt", false);
    if (ordered.contains("tools")) chat.tools = ordered["tools"];
    if (ordered.contains("documents")) chat.documents = ordered["documents"];
    if (ordered.contains("chat_template_kwargs") && !ordered["chat_template_kwargs"].is_null()) {
      if (!ordered["chat_template_kwargs"].is_object()) {
        raise<InvalidArgument>("\"chat_template_kwargs\" must be an object");
      }
      chat.extra = ordered["chat_template_kwargs"];
    }
    if (req.contains("chat_template_name") && req["chat_template_name"].is_string()) {
      chat.template_name = req["chat_template_name"].get<std::string>();
    }
    ChatEncoding enc = tok.apply_chat_template(chat);
    return Json{{"rendered", enc.rendered}, {"ids", enc.ids}};
  }
  raise<InvalidArgument>("request needs \"text\", \"ids\" or \"messages\"");
}

constexpr const char* kUsage =
    "usage: tachyon tokenize --tokenizer DIR --jsonl          requests on stdin, replies on "
    "stdout\n"
    "       tachyon tokenize --tokenizer DIR --text TEXT      the ids of TEXT\n\n"
    "--jsonl requests: {\"text\": ..., \"add_special_tokens\": true} -> {\"ids\": [...]};\n"
    "{\"ids\": [...], \"skip_special_tokens\": false} -> {\"text\": ...}; {\"messages\": [...],\n"
    "\"add_generation_prompt\": true} -> {\"rendered\": ..., \"ids\": [...]}; a failure -> "
    "{\"error\": ...}.\n";

}  // namespace

int cmd_tokenize(const CommandArgs& argv) {
  const auto parsed = parse_command("tokenize", argv, kUsage);
  if (!parsed) return 0;
  const SettingValues& args = *parsed;
  if (args.str("tokenizer").empty()) raise<InvalidArgument>("missing required flag --tokenizer");
  auto tok = Tokenizer::load(args.str("tokenizer"));
  if (args.given("text")) {
    Json ids = tok->encode(args.str("text"), args.flag("special-tokens"));
    std::printf("%s\n", ids.dump().c_str());
    return 0;
  }
  if (!args.flag("jsonl")) raise<InvalidArgument>("tokenize: give --jsonl or --text");
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    Json reply;
    try {
      reply = handle(*tok, line);
    } catch (const std::exception& e) {
      reply = Json{{"error", e.what()}};
    }
    std::string out = reply.dump(-1, ' ', false, Json::error_handler_t::replace);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace tachyon::cli
