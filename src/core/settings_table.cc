// The table of every setting (see core/settings.h). RTP-LLM's variable names and
// vLLM's flag spellings are listed where the same setting exists there.
#include <utility>

#include "core/settings.h"

namespace tachyon {
namespace {

using T = SettingType;
using Cmds = std::vector<std::string>;

const Cmds kEngine = {"serve", "generate", "bench"};
// The commands that build their engine in cli/engine_setup.cc, where the draft model of
// speculative decoding is loaded.
// The commands that load a model onto a device.
const Cmds kDevice = {"serve", "generate", "bench", "perplexity"};
const Cmds kLoad = {"serve", "generate", "bench", "inspect", "perplexity"};
const Cmds kAll = {"serve",       "generate", "bench",         "tokenize",   "inspect",
                   "make-random", "quantize", "bench-serving", "perplexity", "bench-overhead"};
constexpr double kMiB = 1024.0 * 1024.0;

// Builds one entry: Def(name, type, default, commands, help).env(...).range(...)...
struct Def {
  Setting s;
  Def(const char* name, T type, const char* def, Cmds cmds, const char* help) {
    s.name = name;
    s.type = type;
    s.default_value = def;
    s.commands = std::move(cmds);
    s.help = help;
  }
  Def&& env(std::vector<SettingName> e) && {
    s.env = std::move(e);
    return std::move(*this);
  }
  Def&& alias(std::vector<SettingName> a) && {
    s.aliases = std::move(a);
    return std::move(*this);
  }
  Def&& range(double lo, double hi) && {
    s.min = lo;
    s.max = hi;
    return std::move(*this);
  }
  Def&& choices(std::vector<std::string> c) && {
    s.choices = std::move(c);
    return std::move(*this);
  }
  Def&& multi_value() && {
    s.multi_value = true;
    return std::move(*this);
  }
  Def&& default_in(const char* command, const char* def) && {
    s.command_defaults.emplace_back(command, def);
    return std::move(*this);
  }
  operator Setting() && { return std::move(s); }  // NOLINT: brace tables
};

std::vector<Setting> make_table() {
  return {
      // ---- files and model ---------------------------------------------------------
      Def("config", T::kString, "", Cmds{"serve", "generate", "bench", "bench-serving"},
          "settings file (YAML or JSON): setting names, spelled like the flags, to values")
          .env({"TACHYON_CONFIG"}),
      Def("model", T::kString, "",
          Cmds{"serve", "generate", "bench", "inspect", "perplexity", "bench-overhead", "quantize"},
          "model directory (Hugging Face layout); default: the bundled demo model "
          "(models/tiny-kjv-chat)")
          .env({"TACHYON_MODEL", "CHECKPOINT_PATH"}),
      Def("tokenizer", T::kString, "", Cmds{"serve", "generate", "bench", "tokenize"},
          "tokenizer directory; default: the model directory (a Megatron-LM checkpoint has none)")
          .env({"TACHYON_TOKENIZER", "TOKENIZER_PATH"}),
      Def("model-type", T::kString, "", kLoad,
          "architecture override (e.g. llama, qwen_2); default: from config.json")
          .env({"TACHYON_MODEL_TYPE", "MODEL_TYPE"}),
      Def("sparse-config", T::kString, "", kLoad,
          "JSON file of a pruned model's per-layer shapes (layer_head_num, layer_head_num_kv, "
          "layer_inter_size) replacing config.json's; default: config.json's own")
          .env({"TACHYON_SPARSE_CONFIG", "SPARSE_CONFIG_FILE"}),
      Def("served-model-name", T::kString, "", Cmds{"serve", "bench-serving"},
          "model name in the API (bench-serving: the name its requests send); serve's "
          "default: the model directory's name")
          .env({"TACHYON_SERVED_MODEL_NAME"})
          .alias({"model"}),  // bench-serving's --model
      Def("max-seq-len", T::kInt, "0", Cmds{"serve"},
          "longest sequence (prompt + output); 0: the model's")
          .env({"TACHYON_MAX_SEQ_LEN", "MAX_SEQ_LEN"})
          .alias({"max-model-len"})
          .range(0, 1 << 30),
      Def("home", T::kString, "", Cmds{},
          "where the bundled demo model is looked for first (HOME/models/tiny-kjv-chat)")
          .env({"TACHYON_HOME"}),
      // ---- device and types --------------------------------------------------------
      Def("device", T::kString, "auto", kDevice, "cpu, cuda, cuda:N or auto")
          .env({"TACHYON_DEVICE"}),
      Def("dtype", T::kString, "auto", kDevice,
          "compute type on a GPU: auto (f16 for float16 checkpoints, else bf16), bf16, f16, "
          "f32; the CPU computes in f32")
          .env({"TACHYON_DTYPE"}),
      Def("kv-cache-dtype", T::kString, "auto", kDevice,
          "KV cache element type: auto (the compute type), bf16 (CPU: half the bytes per "
          "token), int8 (CPU: a quarter, with a float scale per token and KV head) or fp8 "
          "(e4m3: a byte per value)")
          .env({"TACHYON_KV_CACHE_DTYPE"}),
      Def("int8-kv-cache", T::kBool, "false", Cmds{},
          "RTP-LLM's switch for --kv-cache-dtype int8 (read when that is auto)")
          .env({"TACHYON_INT8_KV_CACHE", "INT8_KV_CACHE"}),
      Def("fp8-kv-cache", T::kBool, "false", Cmds{},
          "RTP-LLM's switch for --kv-cache-dtype fp8 (read when that is auto)")
          .env({"TACHYON_FP8_KV_CACHE", "FP8_KV_CACHE"}),
      Def("quantization", T::kString, "none", kDevice,
          "quantize a 16-bit checkpoint's decoder weights at load: none, int8 (per "
          "channel), int4 (groups of 128) or fp8 (e4m3, per channel); embeddings, lm_head, "
          "routers and norms stay as they are")
          .env({"TACHYON_QUANTIZATION", "QUANTIZATION", "WEIGHT_TYPE"}),
      Def("int8-mode", T::kBool, "false", Cmds{},
          "RTP-LLM's switch for --quantization int8 (read when that is none)")
          .env({"TACHYON_INT8_MODE", "INT8_MODE"}),
      Def("threads", T::kInt, "0",
          Cmds{"serve", "generate", "bench", "perplexity", "bench-overhead"},
          "compute threads on the CPU; 0: all cores")
          .env({"TACHYON_NUM_THREADS"})
          .range(0, 4096),
      Def("cpu-isa", T::kEnum, "", Cmds{},
          "CPU GEMM kernels: portable, avx2 or avx512; default: the best this CPU runs")
          .env({"TACHYON_CPU_ISA"})
          .choices({"portable", "avx2", "avx512"}),
      Def("cpu-portable", T::kBool, "false", Cmds{},
          "portable vector code instead of AVX2 in the CPU's elementwise kernels")
          .env({"TACHYON_CPU_PORTABLE"}),
      Def("graphs", T::kBool, "true", Cmds{}, "capture decode steps as CUDA graphs")
          .env({"TACHYON_GRAPHS"}),
      Def("batch-invariant", T::kBool, "false", Cmds{},
          "CUDA: logits that do not depend on the batch around a row (fixed-order products, "
          "no attention key splits), at some speed")
          .env({"TACHYON_BATCH_INVARIANT"}),
      Def("flash-probe", T::kString, "", Cmds{},
          "where the flash kernel's diagnostic build (-DTACHYON_FLASH_PROBE=ON) writes its "
          "records")
          .env({"TACHYON_FLASH_PROBE"}),
      // ---- engine ------------------------------------------------------------------
      Def("gpu-memory-fraction", T::kDouble, "0.9", kEngine,
          "share of the GPU's memory the process may fill; the KV cache takes what the "
          "weights and the step workspace leave (unless --kv-cache-mb)")
          .env({"TACHYON_GPU_MEMORY_FRACTION"})
          .alias({"gpu-memory-utilization"})
          .range(0.05, 1.0),
      Def("kv-cache-mb", T::kDouble, "0", kEngine,
          "KV cache size in MiB; 0: automatic (on a GPU from --gpu-memory-fraction, on the CPU "
          "what --max-num-seqs full-length sequences need, at most a fifth of free memory). On "
          "the CPU this is a limit: the cache is reserved one full-length sequence at a time, "
          "as requests need it")
          .env({"TACHYON_KV_CACHE_MB", {"TACHYON_KV_CACHE_BYTES", 1 / kMiB}, "KV_CACHE_MEM_MB"})
          .alias({{"kv-cache-bytes", 1 / kMiB}, {"kv-cache-memory-bytes", 1 / kMiB}})
          .range(0, 1e12),
      Def("num-kv-blocks", T::kInt, "0", kEngine,
          "KV cache blocks; 0: sized from --kv-cache-mb or automatically")
          .env({"TACHYON_NUM_KV_BLOCKS"})
          .range(0, 1 << 30),
      Def("block-size", T::kInt, "16", kEngine, "tokens per KV block (0: 16)")
          .env({"TACHYON_BLOCK_SIZE", "SEQ_SIZE_PER_BLOCK"})
          .range(0, 4096),
      Def("max-num-seqs", T::kInt, "128", kEngine, "sequences the engine runs at once (0: 128)")
          .env({"TACHYON_MAX_NUM_SEQS"})
          .range(0, 1 << 20),
      Def("max-num-batched-tokens", T::kInt, "512", kEngine,
          "tokens per engine step (0: 512; at least --max-num-seqs)")
          .env({"TACHYON_MAX_NUM_BATCHED_TOKENS"})
          .alias({"max-batch-tokens"})
          .range(0, 1 << 24),
      Def("swap-space", T::kDouble, "", kEngine,
          "GiB of pinned host memory where preempted requests' KV blocks wait instead of "
          "being recomputed; default: 4 on a GPU, 0 on the CPU")
          .env({"TACHYON_SWAP_SPACE"})
          .range(0, 1 << 20),
      Def("prefix-caching", T::kBool, "true", kEngine,
          "keep the KV blocks of finished prompts, keyed by their tokens, and reuse the longest "
          "cached prefix of each new prompt instead of computing it again")
          .env({"TACHYON_PREFIX_CACHING", "REUSE_CACHE", "USE_BLOCK_CACHE"})
          .alias({"enable-prefix-caching"}),
      Def("prefix-cache-host-gib", T::kDouble, "0", kEngine,
          "GiB of host memory for a second tier of the prefix cache: cached blocks evicted "
          "from the device wait there and come back on a hit (0: none)")
          .env({"TACHYON_PREFIX_CACHE_HOST_GIB"})
          .alias({"kv-offloading-size"})
          .range(0, 1 << 20),
      Def("system-prompts", T::kString, "", Cmds{"serve"},
          "JSON file of task prompts, [{\"task_id\": 1, \"prompt\": \"...\"}, ...]: each is "
          "pinned in the prefix cache at start and put before the prompt of every request "
          "whose generate_config.task_id names it")
          .env({"TACHYON_SYSTEM_PROMPTS", "MULTI_TASK_PROMPT"}),
      Def("system-prompts-json", T::kString, "", Cmds{"serve"},
          "the task prompts of --system-prompts as inline JSON (not with --system-prompts)")
          .env({"TACHYON_SYSTEM_PROMPTS_JSON", "MULTI_TASK_PROMPT_STR"}),
      Def("overlap-steps", T::kBool, "true", kEngine,
          "queue each engine step before the host has seen the tokens of the step in flight "
          "(they stay on the GPU), so that scheduling and streaming overlap the GPU's work")
          .env({"TACHYON_OVERLAP_STEPS"}),
      // ---- LoRA adapters (serve, generate, bench) ----------------------------------------
      Def("lora", T::kList, "", Cmds{"serve", "generate", "bench"},
          "LoRA adapter NAME=DIR (a PEFT folder), requests select it by NAME; repeatable, and "
          "several may follow one flag (vLLM's --lora-modules); also the JSON item "
          "{\"name\": NAME, \"path\": DIR}, and in LORA_INFO a JSON object {NAME: DIR, ...}")
          .env({"TACHYON_LORA", "LORA_INFO"})
          .alias({"lora-modules"})
          .multi_value(),
      Def("enable-lora", T::kBool, "false", Cmds{"serve", "generate", "bench"},
          "serve LoRA adapters: they may be loaded while serving even with none at start "
          "(implied by --lora)")
          .env({"TACHYON_ENABLE_LORA"}),
      Def("merge-lora", T::kBool, "false", Cmds{"serve", "generate", "bench"},
          "fold the one adapter of --lora into the weights at load (no per-request adapters)")
          .env({"TACHYON_MERGE_LORA"}),
      Def("max-loras", T::kInt, "4", Cmds{"serve", "generate", "bench"},
          "LoRA adapters resident on the device at once (others wait on the host and swap in "
          "as requests need them)")
          .env({"TACHYON_MAX_LORAS"})
          .range(1, 1024),
      Def("max-lora-rank", T::kInt, "16", Cmds{"serve", "generate", "bench"},
          "largest rank of an adapter (adapters of a larger rank are refused)")
          .env({"TACHYON_MAX_LORA_RANK"})
          .range(1, 1024),
      Def("max-cpu-loras", T::kInt, "64", Cmds{"serve", "generate", "bench"},
          "LoRA adapters registered at once, at least --max-loras (default: 64, or --max-loras "
          "when larger)")
          .env({"TACHYON_MAX_CPU_LORAS", "MAX_LORA_MODEL_SIZE"})
          .range(1, 1 << 20),
      // ---- Speculative decoding (serve, generate, bench) ---------------------------------
      Def("speculative", T::kString, "", kEngine,
          "speculative decoding's proposer: ngram (prompt lookup: drafts copied from what "
          "followed the context's last tokens earlier in it; RTP-LLM's deterministic) or "
          "draft_model (a smaller model's drafts, --draft-model; RTP-LLM's vanilla); "
          "default: off")
          .env({"TACHYON_SPECULATIVE", "SP_TYPE"}),
      Def("speculative-config", T::kString, "", kEngine,
          "speculative decoding as vLLM's JSON: {\"method\": \"ngram\", "
          "\"num_speculative_tokens\": K, \"prompt_lookup_min\": N, \"prompt_lookup_max\": M} "
          "or {\"method\": \"draft_model\", \"model\": DIR, \"num_speculative_tokens\": K}")
          .env({"TACHYON_SPECULATIVE_CONFIG"}),
      Def("num-speculative-tokens", T::kInt, "5", kEngine,
          "draft tokens a sequence takes per step at most, 1 to 16 (with --speculative)")
          .env({"TACHYON_NUM_SPECULATIVE_TOKENS", "GEN_NUM_PER_CIRCLE"})
          .range(1, 16),
      Def("prompt-lookup-min", T::kInt, "1", kEngine,
          "n-gram lookup: the shortest suffix of the context looked up (1 or more)")
          .env({"TACHYON_PROMPT_LOOKUP_MIN", "SP_MIN_TOKEN_MATCH"})
          .range(1, 1024),
      Def("prompt-lookup-max", T::kInt, "4", kEngine,
          "n-gram lookup: the longest suffix of the context looked up (the longest found wins)")
          .env({"TACHYON_PROMPT_LOOKUP_MAX", "SP_MAX_TOKEN_MATCH"})
          .range(1, 1024),
      Def("draft-model", T::kString, "", kEngine,
          "draft model folder (Hugging Face layout, the model's vocabulary): it proposes "
          "--num-speculative-tokens tokens per sequence and step, which the model verifies "
          "(implies --speculative draft_model)")
          .env({"TACHYON_DRAFT_MODEL", "SP_CHECKPOINT_PATH"}),
      Def("draft-model-type", T::kString, "", kEngine,
          "the draft's architecture (e.g. llama), checked against its config.json; default: "
          "not checked")
          .env({"TACHYON_DRAFT_MODEL_TYPE", "SP_MODEL_TYPE"}),
      Def("draft-dtype", T::kString, "auto", kEngine,
          "the draft's compute type on a GPU: auto (the model's --dtype), bf16, f16, f32")
          .env({"TACHYON_DRAFT_DTYPE", "SP_WEIGHT_TYPE"}),
      // ---- HTTP (serve) ------------------------------------------------------------
      Def("host", T::kString, "127.0.0.1", Cmds{"serve"}, "address to listen on")
          .env({"TACHYON_HOST"}),
      Def("port", T::kInt, "8088", Cmds{"serve"}, "port to listen on (0: any free port)")
          .env({"TACHYON_PORT", "START_PORT"})
          .range(0, 65535),
      Def("io-threads", T::kInt, "2", Cmds{"serve"}, "threads serving HTTP connections")
          .env({"TACHYON_IO_THREADS"})
          .range(1, 256),
      Def("max-connections", T::kInt, "4096", Cmds{"serve"}, "open connections at most")
          .env({"TACHYON_MAX_CONNECTIONS"})
          .range(1, 1 << 20),
      Def("max-body-bytes", T::kInt, "33554432", Cmds{"serve"}, "largest request body")
          .env({"TACHYON_MAX_BODY_BYTES"})
          .range(1024, 1 << 30),
      Def("keep-alive-timeout", T::kDouble, "30", Cmds{"serve"},
          "seconds an idle connection is kept")
          .env({"TACHYON_KEEP_ALIVE_TIMEOUT"})
          .range(0.001, 86400),
      Def("read-timeout", T::kDouble, "30", Cmds{"serve"}, "seconds to receive one whole request")
          .env({"TACHYON_READ_TIMEOUT"})
          .range(0.001, 86400),
      Def("write-timeout", T::kDouble, "60", Cmds{"serve"},
          "seconds one write may wait for a client that does not read")
          .env({"TACHYON_WRITE_TIMEOUT"})
          .range(0.001, 86400),
      Def("shutdown-timeout", T::kDouble, "30", Cmds{"serve"},
          "seconds requests in flight may take to finish after SIGINT/SIGTERM")
          .env({"TACHYON_SHUTDOWN_TIMEOUT"})
          .range(0, 86400),
      Def("render-timeout", T::kDouble, "10", Cmds{"serve"},
          "seconds one chat template render may take (a longer one gets 400)")
          .env({"TACHYON_RENDER_TIMEOUT"})
          .range(0.001, 3600),
      Def("work-threads", T::kInt, "4", Cmds{"serve"},
          "threads that parse request bodies, render chat templates and tokenize, off the "
          "HTTP threads")
          .env({"TACHYON_WORK_THREADS"})
          .range(1, 256),
      // ---- protection (serve) ------------------------------------------------------
      Def("max-concurrency", T::kInt, "256", Cmds{"serve"}, "generation requests admitted at once")
          .env({"TACHYON_MAX_CONCURRENCY", "CONCURRENCY_LIMIT"})
          .range(1, 1 << 20),
      Def("max-queued-requests", T::kInt, "1024", Cmds{"serve"},
          "requests waiting for admission; more are refused with 429")
          .env({"TACHYON_MAX_QUEUED_REQUESTS"})
          .range(0, 1 << 20),
      Def("max-n", T::kInt, "16", Cmds{"serve"}, "largest n / num_return_sequences / num_beams")
          .env({"TACHYON_MAX_N"})
          .range(1, 64),
      Def("max-tokens", T::kInt, "0", Cmds{"serve"}, "largest max_tokens (0: the model's window)")
          .env({"TACHYON_MAX_TOKENS"})
          .range(0, 1 << 30),
      Def("max-stop", T::kInt, "16", Cmds{"serve"}, "most stop strings per request")
          .env({"TACHYON_MAX_STOP"})
          .range(0, 64),
      Def("max-prompts", T::kInt, "64", Cmds{"serve"}, "most prompts in one batch request")
          .env({"TACHYON_MAX_PROMPTS"})
          .range(1, 4096),
      Def("max-top-logprobs", T::kInt, "20", Cmds{"serve"}, "most top_logprobs per token")
          .env({"TACHYON_MAX_TOP_LOGPROBS"})
          .range(0, 20),
      Def("request-timeout", T::kDouble, "0", Cmds{"serve"},
          "seconds a generation may take (0: no limit); a request's own timeout_ms may be "
          "shorter")
          .env({"TACHYON_REQUEST_TIMEOUT"})
          .range(0, 1e9),
      Def("allow-special-tokens-in-content", T::kBool, "false", Cmds{"serve"},
          "match special tokens (</s>, <|im_start|>...) written in chat messages, tools and "
          "chat_template_kwargs as control tokens, as transformers does (default: they are "
          "text; only the chat template's own text gives special tokens)")
          .env({"TACHYON_ALLOW_SPECIAL_TOKENS_IN_CONTENT"}),
      Def("enable-auto-tool-choice", T::kBool, "false", Cmds{"serve"},
          "parse tool calls for tool_choice \"auto\" in --tool-call-parser's format (default: "
          "the format the chat template tells, when it tells one)"),
      Def("tool-call-parser", T::kString, "", Cmds{"serve"},
          "the tool call format for --enable-auto-tool-choice: hermes, llama3_json, mistral"),
      // ---- images in (serve) ---------------------------------------------------------
      Def("allowed-media-domains", T::kList, "", Cmds{"serve"},
          "host names image URLs may name (repeatable; comma-separated in the environment; "
          "none: any host)")
          .env({"TACHYON_ALLOWED_MEDIA_DOMAINS"}),
      Def("allowed-local-media-path", T::kString, "", Cmds{"serve"},
          "the folder local image paths and file:// URLs must be under (symlinks resolved "
          "first; empty: local files are refused)")
          .env({"TACHYON_ALLOWED_LOCAL_MEDIA_PATH"}),
      Def("media-fetch-timeout", T::kDouble, "5", Cmds{"serve"},
          "seconds one image URL's fetch may take, redirects included")
          .env({"TACHYON_MEDIA_FETCH_TIMEOUT", "VLLM_IMAGE_FETCH_TIMEOUT"})
          .range(0.001, 3600),
      Def("max-image-bytes", T::kInt, "33554432", Cmds{"serve"},
          "largest encoded image (a download, a data URL or a file)")
          .env({"TACHYON_MAX_IMAGE_BYTES"})
          .range(1024, int64_t{1} << 32),
      Def("max-image-pixels", T::kInt, "64000000", Cmds{"serve"},
          "largest image in pixels (width x height), checked before decoding")
          .env({"TACHYON_MAX_IMAGE_PIXELS"})
          .range(1, int64_t{1} << 32),
      Def("api-key", T::kList, "", Cmds{"serve", "bench-serving"},
          "serve: a key clients must send as 'Authorization: Bearer KEY' (repeatable; "
          "comma-separated in the environment; none: no authentication); bench-serving: the "
          "key its requests send")
          .env({"TACHYON_API_KEY"}),
      // ---- logging -----------------------------------------------------------------
      Def("log-level", T::kEnum, "info", kAll, "debug, info, warning, error or off")
          .env({"TACHYON_LOG_LEVEL"})
          .choices({"debug", "info", "warning", "warn", "error", "off"}),
      Def("log-requests", T::kBool, "false", Cmds{"serve"},
          "log each request's metadata (never its text)")
          .env({"TACHYON_LOG_REQUESTS"}),
      Def("log-prompts", T::kBool, "false", Cmds{"serve"},
          "with --log-requests, log prompts and outputs too")
          .env({"TACHYON_LOG_PROMPTS"}),
      Def("progress", T::kBool, "true", Cmds{"serve"},
          "progress bar while loading (only on a terminal)")
          .env({"TACHYON_PROGRESS"}),
      // ---- generate ----------------------------------------------------------------
      Def("prompt", T::kString, "", Cmds{"generate"}, "prompt text"),
      Def("prompt-ids", T::kString, "", Cmds{"generate"}, "prompt token ids, e.g. 1,2,3"),
      Def("image", T::kList, "", Cmds{"generate"},
          "an image file (JPEG, PNG, WebP) for a vision model, one per <image> of the prompt, "
          "in prompt order; repeatable"),
      Def("input", T::kString, "", Cmds{"generate"},
          "JSONL file of requests ({\"prompt\": ...} or {\"prompt_ids\": [...]}, optionally "
          "\"images\" and \"generate_config\"), run concurrently"),
      Def("output", T::kString, "-", Cmds{"generate"}, "where --input's results go (-: stdout)"),
      Def("max-new-tokens", T::kInt, "32", Cmds{"generate"}, "tokens to generate at most")
          .range(0, 1 << 30),
      Def("temperature", T::kDouble, "0", Cmds{"generate", "bench"},
          "sampling temperature (0: greedy)")
          .range(0, 1e6),
      Def("seed", T::kInt, "0",
          Cmds{"generate", "bench", "make-random", "bench-serving", "bench-overhead"},
          "random seed")
          .range(-9.2e18, 9.2e18),
      Def("ignore-eos", T::kBool, "false", Cmds{"generate"}, "keep generating past EOS"),
      Def("generate-config", T::kString, "", Cmds{"generate"},
          "RTP-LLM generate_config JSON object; the flags above override it"),
      Def("regex", T::kString, "", Cmds{"generate", "bench"},
          "constrain the output to match this regex (ECMAScript-like, whole output)"),
      Def("grammar", T::kString, "", Cmds{"generate", "bench"},
          "constrain the output to this GBNF grammar file (llama.cpp syntax, start rule root)"),
      Def("json-object", T::kBool, "false", Cmds{"generate", "bench"},
          "constrain the output to a JSON object (response_format json_object)"),
      Def("json-schema", T::kString, "", Cmds{"generate", "bench"},
          "constrain the output to the JSON Schema in this file (response_format json_schema)"),
      Def("stream", T::kBool, "false", Cmds{"generate"}, "print the text as it comes"),
      Def("dump-logits", T::kString, "", Cmds{"generate"},
          "write the prompt's logits [prompt_len, vocab] to this safetensors file"),
      Def("json", T::kBool, "false",
          Cmds{"generate", "bench", "inspect", "bench-serving", "perplexity", "bench-overhead"},
          "print the result as JSON"),
      // ---- benchmarks --------------------------------------------------------------
      Def("url", T::kString, "http://127.0.0.1:8088", Cmds{"bench-serving"},
          "server to benchmark (http://HOST:PORT)"),
      Def("endpoint", T::kEnum, "/v1/completions", Cmds{"bench-serving"}, "API to call")
          .choices({"/v1/completions", "/v1/chat/completions"}),
      Def("overhead", T::kBool, "false", Cmds{"bench-serving", "bench-overhead"},
          "measure the HTTP layer's TTFT against the engine's with an in-process server "
          "(takes --model, --threads; see bench-serving --overhead --help)"),
      Def("num-requests", T::kInt, "64", Cmds{"bench", "bench-serving", "bench-overhead"},
          "requests to send")
          .range(1, 1000000)
          .default_in("bench-serving", "200")
          .default_in("bench-overhead", "200"),
      Def("input-len", T::kInt, "128", Cmds{"bench", "bench-serving", "bench-overhead"},
          "prompt tokens per request")
          .range(1, 1 << 30)
          .default_in("bench-overhead", "32"),
      Def("output-len", T::kInt, "128", Cmds{"bench", "bench-serving", "bench-overhead"},
          "tokens generated per request")
          .range(1, 1 << 30)
          .default_in("bench-overhead", "4"),
      Def("range-ratio", T::kDouble, "0", Cmds{"bench"},
          "prompt lengths uniform in [L(1-R), L(1+R)]")
          .range(0, 0.999999),
      Def("concurrency", T::kInt, "", Cmds{"bench", "bench-serving"},
          "requests in flight (closed loop); bench's default: min(num-requests, 32); "
          "bench-serving's default and 0: all at once")
          .alias({"max-concurrency"})
          .range(0, 1 << 20),
      Def("request-rate", T::kDouble, "", Cmds{"bench", "bench-serving"},
          "Poisson arrivals at this many requests/s instead of a closed loop")
          .range(1e-9, 1e9),
      Def("prompts", T::kString, "", Cmds{"bench"},
          "JSONL file of prompts to cycle through instead of random ones"),
      Def("warmup", T::kInt, "0", Cmds{"bench"},
          "requests of random prompts as long as the workload's first, unrelated to it, run "
          "before the measurement (device start-up out of the figures)")
          .range(0, 1 << 20),
      Def("shared-prefix-len", T::kInt, "0", Cmds{"bench", "bench-serving"},
          "every prompt opens with the same random prefix of this many tokens (words in "
          "bench-serving's text prompts), before its own --input-len")
          .range(0, 1 << 30),
      Def("multi-turn", T::kInt, "1", Cmds{"bench", "bench-serving"},
          "conversations of this many turns: each turn's prompt is the previous one, its "
          "output and a new --input-len part; --num-requests counts conversations")
          .range(1, 1 << 20),
      // ---- tokenize ----------------------------------------------------------------
      Def("text", T::kString, "", Cmds{"tokenize", "perplexity"},
          "tokenize: print the ids of this text; perplexity: the text file to score"),
      Def("jsonl", T::kBool, "false", Cmds{"tokenize"},
          "one JSON request per stdin line, one JSON reply per stdout line"),
      Def("special-tokens", T::kBool, "true", Cmds{"tokenize"},
          "add the tokenizer's special tokens when encoding --text"),
      // ---- perplexity --------------------------------------------------------------
      Def("ctx", T::kInt, "0", Cmds{"perplexity"},
          "tokens per chunk (the first half of each is context, the second half scored); 0: "
          "the model's window, at most 512")
          .range(0, 1 << 30),
      Def("batch", T::kInt, "1", Cmds{"perplexity"},
          "chunks per forward pass (the KV cache holds this many chunks)")
          .range(1, 1 << 20),
      // ---- make-random -------------------------------------------------------------
      Def("model-config", T::kString, "", Cmds{"make-random"}, "the model's config.json")
          .alias({"config"}),
      Def("out", T::kString, "", Cmds{"make-random", "quantize"}, "checkpoint directory to write"),
      Def("weight-dtype", T::kEnum, "bf16", Cmds{"make-random"}, "type of the weights written")
          .alias({"dtype"})
          .choices({"f32", "f16", "bf16"}),
      Def("shard-mib", T::kInt, "2048", Cmds{"make-random"}, "largest safetensors shard in MiB")
          .range(1, 1 << 30),
      Def("quant-format", T::kEnum, "none", Cmds{"make-random"},
          "quantized format of the decoder's linear weights: none, gptq (int4 g128 sym), awq "
          "(int4 g128 with zeros, gemm) or fp8 (128x128 blocks)")
          .choices({"none", "gptq", "awq", "fp8"}),
      Def("lora-rank", T::kInt, "0", Cmds{"make-random"},
          "> 0: write a random PEFT LoRA adapter of this rank on every decoder linear of the "
          "config's model instead of a checkpoint")
          .range(0, 4096),
      // ---- quantize ----------------------------------------------------------------
      Def("method", T::kEnum, "int4", Cmds{"quantize"},
          "int8 (GPTQ 8-bit per channel), int4 (GPTQ 4-bit, groups of 128) or fp8 (128x128 "
          "blocks)")
          .choices({"int8", "int4", "fp8"}),
  };
}

}  // namespace

const std::vector<Setting>& settings_table() {
  static const std::vector<Setting> table = make_table();
  return table;
}

const std::vector<std::pair<std::string, std::string>>& subcommands() {
  static const std::vector<std::pair<std::string, std::string>> list = {
      {"version", "print the version"},
      {"tokenize", "encode/decode with a checkpoint's tokenizer (--jsonl)"},
      {"generate", "generate tokens from a prompt with a model"},
      {"inspect", "show a model's mapped config and weights"},
      {"make-random", "write a checkpoint with random weights for a config.json"},
      {"quantize", "write a quantized copy of a 16-bit checkpoint (GPTQ or FP8)"},
      {"serve", "serve a model over HTTP (RTP-LLM native and OpenAI APIs)"},
      {"bench-serving", "benchmark a running server over HTTP (--url)"},
      {"bench", "offline throughput and latency benchmark of the engine"},
      {"perplexity", "a model's perplexity on a text file (llama.cpp's method)"},
  };
  return list;
}

}  // namespace tachyon
