#include "server/serve_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "core/error.h"

namespace tachyon::server {
namespace {

enum class Kind { kString, kInt, kDouble, kBool, kList };

struct Option {
  const char* flag;
  std::vector<const char*> env;  // TACHYON_... first, then RTP-LLM's names
  Kind kind;
  const char* help;
  // Parses and stores one value (all kinds but kList): config, value, what, min, max.
  std::function<void(ServeConfig&, const std::string&, const std::string&, double, double)> set_one;
  std::function<void(ServeConfig&, const std::vector<std::string>&)> set_list;
  std::function<std::string(const ServeConfig&)> show;
  double min = 0, max = 0;  // for numbers
};

int64_t to_int(const std::string& v, const std::string& what, double min, double max) {
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || errno != 0 || *end != '\0')
    raise<InvalidArgument>("{}: '{}' is not an integer", what, v);
  if (static_cast<double>(x) < min || static_cast<double>(x) > max)
    raise<InvalidArgument>("{}: {} is out of range [{}, {}]", what, x, static_cast<int64_t>(min),
                           static_cast<int64_t>(max));
  return x;
}

double to_double(const std::string& v, const std::string& what, double min, double max) {
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || errno != 0 || *end != '\0' || !std::isfinite(x))
    raise<InvalidArgument>("{}: '{}' is not a number", what, v);
  if (x < min || x > max)
    raise<InvalidArgument>("{}: {} is out of range [{}, {}]", what, x, min, max);
  return x;
}

bool to_bool(const std::string& v, const std::string& what) {
  std::string s = v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  raise<InvalidArgument>("{}: '{}' is not a boolean (true/false)", what, v);
}

std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = v.find(',', start);
    std::string item =
        v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// Each setting's parse-and-store and its display: (config, value, what, min, max), the
// range for numbers.
#define STR(field)                                                                               \
  [](ServeConfig& c, const std::string& v, const std::string&, double, double) { c.field = v; }, \
      nullptr,                                                                                   \
      [](const ServeConfig& c) { return c.field.empty() ? std::string("(none)") : c.field; }
#define INT(field)                                                                          \
  [](ServeConfig& c, const std::string& v, const std::string& what, double lo, double hi) { \
    c.field = to_int(v, what, lo, hi);                                                      \
  },                                                                                        \
      nullptr, [](const ServeConfig& c) { return std::to_string(c.field); }
#define DBL(field)                                                                          \
  [](ServeConfig& c, const std::string& v, const std::string& what, double lo, double hi) { \
    c.field = to_double(v, what, lo, hi);                                                   \
  },                                                                                        \
      nullptr, [](const ServeConfig& c) { return fmt::format("{}", c.field); }
#define BOOL(field)                                                                   \
  [](ServeConfig& c, const std::string& v, const std::string& what, double, double) { \
    c.field = to_bool(v, what);                                                       \
  },                                                                                  \
      nullptr, [](const ServeConfig& c) { return std::string(c.field ? "true" : "false"); }

const std::vector<Option>& options() {
  static const std::vector<Option> kOptions = [] {
    std::vector<Option> o = {
        {"model",
         {"TACHYON_MODEL", "CHECKPOINT_PATH"},
         Kind::kString,
         "model directory (Hugging Face layout); default: the bundled demo model",
         STR(model)},
        {"tokenizer",
         {"TACHYON_TOKENIZER", "TOKENIZER_PATH"},
         Kind::kString,
         "tokenizer directory; default: the model directory",
         STR(tokenizer)},
        {"model-type",
         {"TACHYON_MODEL_TYPE", "MODEL_TYPE"},
         Kind::kString,
         "architecture override (e.g. llama, qwen_2); default: from config.json",
         STR(model_type)},
        {"served-model-name",
         {"TACHYON_SERVED_MODEL_NAME"},
         Kind::kString,
         "model name in the API; default: the model directory's name",
         STR(served_model_name)},
        {"max-seq-len",
         {"TACHYON_MAX_SEQ_LEN", "MAX_SEQ_LEN"},
         Kind::kInt,
         "longest sequence (prompt + output); default: the model's",
         INT(max_seq_len),
         0,
         1 << 30},
        {"device", {"TACHYON_DEVICE"}, Kind::kString, "cpu, cuda or auto", STR(device)},
        {"dtype",
         {"TACHYON_DTYPE"},
         Kind::kString,
         "compute type on a GPU: auto (f16 for float16 checkpoints, else bf16), bf16, f16, f32; "
         "the CPU computes in f32",
         STR(dtype)},
        {"kv-cache-dtype",
         {"TACHYON_KV_CACHE_DTYPE"},
         Kind::kString,
         "KV cache element type: auto (the compute type) or fp8 (e4m3, GPU only: half the "
         "bytes per token, keys and values rounded to 3 mantissa bits)",
         STR(kv_cache_dtype)},
        {"gpu-memory-fraction",
         {"TACHYON_GPU_MEMORY_FRACTION"},
         Kind::kDouble,
         "share of the GPU's memory the process may fill; the KV cache takes what the "
         "weights and the step workspace leave",
         DBL(gpu_memory_fraction),
         0.05,
         1.0},
        {"swap-space",
         {"TACHYON_SWAP_SPACE"},
         Kind::kDouble,
         "GiB of pinned host memory where preempted requests' KV blocks wait instead of being "
         "recomputed; default: 4 on a GPU, 0 on the CPU",
         DBL(swap_space_gb),
         0,
         1 << 20},
        {"overlap-steps",
         {"TACHYON_OVERLAP_STEPS"},
         Kind::kBool,
         "queue each engine step before the host has seen the tokens of the step in flight "
         "(they stay on the GPU), so that scheduling and streaming overlap the GPU's work",
         BOOL(overlap_steps)},
        {"max-num-seqs",
         {"TACHYON_MAX_NUM_SEQS"},
         Kind::kInt,
         "sequences the engine runs at once (0: default)",
         INT(max_num_seqs),
         0,
         1 << 20},
        {"max-num-batched-tokens",
         {"TACHYON_MAX_NUM_BATCHED_TOKENS"},
         Kind::kInt,
         "tokens per engine step (0: default)",
         INT(max_num_batched_tokens),
         0,
         1 << 24},
        {"num-kv-blocks",
         {"TACHYON_NUM_KV_BLOCKS"},
         Kind::kInt,
         "KV cache blocks (0: sized automatically)",
         INT(num_kv_blocks),
         0,
         1 << 30},
        {"kv-cache-bytes",
         {"TACHYON_KV_CACHE_BYTES"},
         Kind::kInt,
         "KV cache size in bytes (0: automatic)",
         INT(kv_cache_bytes),
         0,
         9.0e18},
        {"block-size",
         {"TACHYON_BLOCK_SIZE"},
         Kind::kInt,
         "tokens per KV block (0: default)",
         INT(block_size),
         0,
         4096},
        {"threads",
         {"TACHYON_NUM_THREADS"},
         Kind::kInt,
         "compute threads (0: all cores)",
         INT(threads),
         0,
         4096},
        {"host", {"TACHYON_HOST"}, Kind::kString, "address to listen on", STR(host)},
        {"port",
         {"TACHYON_PORT", "START_PORT"},
         Kind::kInt,
         "port to listen on (0: any free port)",
         INT(port),
         0,
         65535},
        {"io-threads",
         {"TACHYON_IO_THREADS"},
         Kind::kInt,
         "threads serving HTTP connections",
         INT(io_threads),
         1,
         256},
        {"max-connections",
         {"TACHYON_MAX_CONNECTIONS"},
         Kind::kInt,
         "open connections at most",
         INT(max_connections),
         1,
         1 << 20},
        {"max-body-bytes",
         {"TACHYON_MAX_BODY_BYTES"},
         Kind::kInt,
         "largest request body",
         INT(max_body_bytes),
         1024,
         1 << 30},
        {"keep-alive-timeout",
         {"TACHYON_KEEP_ALIVE_TIMEOUT"},
         Kind::kDouble,
         "seconds an idle connection is kept",
         DBL(keep_alive_timeout_s),
         0.001,
         86400},
        {"read-timeout",
         {"TACHYON_READ_TIMEOUT"},
         Kind::kDouble,
         "seconds to receive one whole request",
         DBL(read_timeout_s),
         0.001,
         86400},
        {"write-timeout",
         {"TACHYON_WRITE_TIMEOUT"},
         Kind::kDouble,
         "seconds one write may wait for a client that does not read",
         DBL(write_timeout_s),
         0.001,
         86400},
        {"shutdown-timeout",
         {"TACHYON_SHUTDOWN_TIMEOUT"},
         Kind::kDouble,
         "seconds requests in flight may take to finish after SIGINT/SIGTERM",
         DBL(shutdown_timeout_s),
         0,
         86400},
        {"max-concurrency",
         {"TACHYON_MAX_CONCURRENCY", "CONCURRENCY_LIMIT"},
         Kind::kInt,
         "generation requests admitted at once",
         INT(max_concurrency),
         1,
         1 << 20},
        {"max-queued-requests",
         {"TACHYON_MAX_QUEUED_REQUESTS"},
         Kind::kInt,
         "requests waiting for admission; more are refused with 429",
         INT(max_queued_requests),
         0,
         1 << 20},
        {"max-n",
         {"TACHYON_MAX_N"},
         Kind::kInt,
         "largest n / num_return_sequences / num_beams",
         INT(max_n),
         1,
         64},
        {"max-tokens",
         {"TACHYON_MAX_TOKENS"},
         Kind::kInt,
         "largest max_tokens (0: the model's window)",
         INT(max_tokens),
         0,
         1 << 30},
        {"max-stop",
         {"TACHYON_MAX_STOP"},
         Kind::kInt,
         "most stop strings per request",
         INT(max_stop),
         0,
         64},
        {"max-prompts",
         {"TACHYON_MAX_PROMPTS"},
         Kind::kInt,
         "most prompts in one batch request",
         INT(max_prompts),
         1,
         4096},
        {"max-top-logprobs",
         {"TACHYON_MAX_TOP_LOGPROBS"},
         Kind::kInt,
         "most top_logprobs per token",
         INT(max_top_logprobs),
         0,
         20},
        {"request-timeout",
         {"TACHYON_REQUEST_TIMEOUT"},
         Kind::kDouble,
         "seconds a generation may take (0: no limit); a request's own timeout_ms may be shorter",
         DBL(request_timeout_s),
         0,
         1e9},
        {"api-key",
         {"TACHYON_API_KEY"},
         Kind::kList,
         "API key clients must send as 'Authorization: Bearer KEY' (repeatable; comma-separated in "
         "the "
         "environment); none: no authentication",
         nullptr,
         [](ServeConfig& c, const std::vector<std::string>& v) { c.api_keys = v; },
         [](const ServeConfig& c) {
           return c.api_keys.empty() ? std::string("(none)") : std::string("(set)");
         }},
        {"log-requests",
         {"TACHYON_LOG_REQUESTS"},
         Kind::kBool,
         "log each request's metadata (never its text)",
         BOOL(log_requests)},
        {"log-prompts",
         {"TACHYON_LOG_PROMPTS"},
         Kind::kBool,
         "with --log-requests, log prompts and outputs too",
         BOOL(log_prompts)},
        {"log-level",
         {"TACHYON_LOG_LEVEL"},
         Kind::kString,
         "debug, info, warning, error",
         STR(log_level)},
        {"progress",
         {"TACHYON_PROGRESS"},
         Kind::kBool,
         "progress bar while loading (only on a terminal)",
         BOOL(progress)},
    };
    return o;
  }();
  return kOptions;
}

#undef STR
#undef INT
#undef DBL
#undef BOOL

void apply(ServeConfig& c, const Option& o, const std::string& value, const std::string& what) {
  if (o.kind == Kind::kList) return o.set_list(c, split_list(value));
  o.set_one(c, value, what, o.min, o.max);
}

const Option* find_option(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  for (const auto& o : options())
    if (name == o.flag) return &o;
  return nullptr;
}

std::string yaml_scalar(const YAML::Node& n, const std::string& what) {
  if (!n.IsScalar()) raise<InvalidArgument>("{}: expected a single value", what);
  return n.Scalar();
}

void apply_config_file(ServeConfig& c, const std::string& path,
                       const std::map<std::string, bool>& overridden) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    raise<InvalidArgument>("--config: cannot read '{}'", path);
  } catch (const YAML::Exception& e) {
    raise<InvalidArgument>("--config {}: {}", path, e.what());
  }
  if (root.IsNull()) return;
  if (!root.IsMap())
    raise<InvalidArgument>("--config {}: expected a mapping of setting names to values", path);
  for (auto it = root.begin(); it != root.end(); ++it) {
    std::string key = it->first.as<std::string>();
    const Option* o = find_option(key);
    std::string what = "--config " + path + ": " + key;
    if (o == nullptr || std::string(o->flag) == "config")
      raise<InvalidArgument>("{}: unknown setting", what);
    if (overridden.count(o->flag)) continue;
    if (o->kind == Kind::kList && it->second.IsSequence()) {
      std::vector<std::string> items;
      for (const auto& item : it->second) items.push_back(yaml_scalar(item, what));
      o->set_list(c, items);
    } else {
      apply(c, *o, yaml_scalar(it->second, what), what);
    }
  }
}

}  // namespace

std::optional<std::string> process_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<ServeConfig> load_serve_config(const std::vector<std::string>& args,
                                             const EnvLookup& env, std::string* help_out) {
  // Flags first (they win), remembering which settings they set.
  std::map<std::string, std::vector<std::string>> flags;
  std::string config_path;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      if (help_out) *help_out = serve_help();
      return std::nullopt;
    }
    if (a.rfind("--", 0) != 0) raise<InvalidArgument>("unexpected argument '{}'", a);
    std::string name = a.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (name == "config") {
      if (!value) {
        if (i + 1 >= args.size()) raise<InvalidArgument>("flag --config needs a value");
        value = args[++i];
      }
      config_path = *value;
      continue;
    }
    const Option* o = find_option(name);
    if (o == nullptr || name.find('_') != std::string::npos)
      raise<InvalidArgument>("unknown flag --{}", name);
    if (!value) {
      if (o->kind == Kind::kBool) {
        // "--log-requests" alone, or followed by a boolean word ("--progress false").
        static const std::set<std::string> kWords = {"true", "false", "1",  "0",
                                                     "yes",  "no",    "on", "off"};
        value = "true";
        if (i + 1 < args.size() && kWords.count(args[i + 1])) value = args[++i];
      } else {
        if (i + 1 >= args.size()) raise<InvalidArgument>("flag --{} needs a value", name);
        value = args[++i];
      }
    }
    flags[o->flag].push_back(*value);
  }

  ServeConfig c;
  std::map<std::string, bool> overridden;  // set by a flag or the environment
  for (const auto& o : options()) {
    if (auto it = flags.find(o.flag); it != flags.end()) {
      std::string what = std::string("--") + o.flag;
      if (o.kind == Kind::kList) {
        o.set_list(c, it->second);
      } else {
        apply(c, o, it->second.back(), what);
      }
      overridden[o.flag] = true;
      continue;
    }
    for (const char* var : o.env) {
      if (auto v = env(var)) {
        apply(c, o, *v, var);
        overridden[o.flag] = true;
        break;
      }
    }
  }
  if (config_path.empty())
    if (auto v = env("TACHYON_CONFIG")) config_path = *v;
  if (!config_path.empty()) {
    ServeConfig from_file = c;
    apply_config_file(from_file, config_path, overridden);
    c = from_file;
  }
  return c;
}

std::string serve_help() {
  std::string out =
      "usage: tachyon serve [--model DIR] [--host 127.0.0.1] [--port 8088] [flags]\n\n"
      "Serves a model over HTTP: RTP-LLM's native API (POST /) and the OpenAI API (/v1/...).\n"
      "Each setting: --flag, else its environment variable(s), else the --config file (YAML or\n"
      "JSON; keys like the flags), else the default.\n\n";
  out += fmt::format("  --{:<24} {}\n", "config FILE", "settings file (also TACHYON_CONFIG)");
  ServeConfig defaults;
  for (const auto& o : options()) {
    std::string vars;
    for (const char* v : o.env) vars += (vars.empty() ? "" : ", ") + std::string(v);
    out += fmt::format("  --{:<24} {}\n  {:<26} [{}; default {}]\n", o.flag, o.help, "", vars,
                       o.show(defaults));
  }
  return out;
}

}  // namespace tachyon::server
