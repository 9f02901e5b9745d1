#include "cli/draft_setup.h"

#include <algorithm>
#include <filesystem>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/logging.h"
#include "core/mmap.h"
#include "engine/draft_model_proposer.h"
#include "model/hf_config.h"
#include "model/registry.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::cli {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> tokenizer_or_null(const std::string& dir) {
  try {
    return Tokenizer::load(dir);
  } catch (const NotFound&) {
    return nullptr;
  }
}

// Whether `name` holds the same bytes in both folders (absent in both counts as equal).
bool same_file(const std::string& a_dir, const std::string& b_dir, const char* name) {
  const fs::path a = fs::path(a_dir) / name, b = fs::path(b_dir) / name;
  const bool has_a = fs::exists(a), has_b = fs::exists(b);
  if (has_a != has_b) return false;
  return !has_a || read_file(a.string()) == read_file(b.string());
}

std::string show(const std::optional<std::string>& token, const std::optional<int32_t>& id) {
  if (!token) return "none";
  return fmt::format("'{}' (id {})", *token, id ? std::to_string(*id) : std::string("?"));
}

void compare_special(const char* what, const std::optional<std::string>& draft_token,
                     const std::optional<int32_t>& draft_id,
                     const std::optional<std::string>& target_token,
                     const std::optional<int32_t>& target_id) {
  if (draft_token != target_token || draft_id != target_id)
    raise<InvalidArgument>("the draft's {} token is {}, the model's {}", what,
                           show(draft_token, draft_id), show(target_token, target_id));
}

// The same token -> id map and the same special tokens.
void compare_tokenizers(const Tokenizer& target, const Tokenizer& draft) {
  if (draft.vocab_size() != target.vocab_size())
    raise<InvalidArgument>("the draft's tokenizer has {} tokens, the model's {}",
                           draft.vocab_size(), target.vocab_size());
  for (int32_t id = 0; id < target.vocab_size(); ++id) {
    const std::string d = draft.id_to_token(id), t = target.id_to_token(id);
    if (d != t)
      raise<InvalidArgument>("token {} is '{}' in the draft's tokenizer, '{}' in the model's", id,
                             d, t);
    if (draft.is_special(id) != target.is_special(id))
      raise<InvalidArgument>("token {} ('{}') is a special token in the {}'s tokenizer only", id, t,
                             target.is_special(id) ? "model" : "draft");
  }
  compare_special("BOS", draft.bos_token(), draft.bos_id(), target.bos_token(), target.bos_id());
  compare_special("EOS", draft.eos_token(), draft.eos_id(), target.eos_token(), target.eos_id());
  compare_special("padding", draft.pad_token(), draft.pad_id(), target.pad_token(),
                  target.pad_id());
  compare_special("unknown", draft.unk_token(), draft.unk_id(), target.unk_token(),
                  target.unk_id());
}

}  // namespace

std::optional<DraftOptions> draft_options(const SettingValues& v, const SpeculativeOptions& spec) {
  if (spec.method != "draft_model") {
    for (const char* s : {"draft-model-type", "draft-dtype"})
      if (v.given(s))
        raise<InvalidArgument>("{} is a setting of the draft model, and no --draft-model is given",
                               v.source(s));
    return std::nullopt;
  }
  DraftOptions o;
  o.dir = spec.draft_model;
  o.source = v.given("draft-model") ? v.source("draft-model") : v.source("speculative-config");
  if (!fs::is_directory(o.dir))
    raise<InvalidArgument>("{}: the draft model folder '{}' does not exist", o.source, o.dir);
  o.model_type = v.str("draft-model-type");
  try {
    o.dtype = parse_compute_dtype(v.str("draft-dtype"));
  } catch (const InvalidArgument& e) {
    raise<InvalidArgument>("{}: {}", v.source("draft-dtype"), e.what());
  }
  o.num_speculative_tokens = spec.num_speculative_tokens;  // 1 .. 16, checked there
  return o;
}

void check_draft_vocabulary(const std::string& target_dir, const ModelConfig& target,
                            const std::string& draft_dir, const ModelConfig& draft) {
  const std::unique_ptr<Tokenizer> target_tok = tokenizer_or_null(target_dir);
  const std::unique_ptr<Tokenizer> draft_tok = tokenizer_or_null(draft_dir);
  if (target_tok && draft_tok) {
    if (!same_file(target_dir, draft_dir, "tokenizer.json") ||
        !same_file(target_dir, draft_dir, "tokenizer_config.json"))
      compare_tokenizers(*target_tok, *draft_tok);
  } else {
    // Without both tokenizers, the configs' special ids are what can be compared.
    if (draft.bos_token_id != target.bos_token_id || draft.eos_token_ids != target.eos_token_ids)
      raise<InvalidArgument>(
          "the draft's BOS / EOS ids ({} / {}) differ from the model's ({} / {})",
          draft.bos_token_id ? std::to_string(*draft.bos_token_id) : "none",
          fmt::join(draft.eos_token_ids, ","),
          target.bos_token_id ? std::to_string(*target.bos_token_id) : "none",
          fmt::join(target.eos_token_ids, ","));
  }
  if (draft.vocab_size == target.vocab_size) return;
  // Embeddings padded past the real vocabulary differ in size and still agree.
  const Tokenizer* tok = target_tok ? target_tok.get() : draft_tok.get();
  if (tok == nullptr)
    raise<InvalidArgument>(
        "the draft's vocabulary has {} tokens (config.json), the model's {}, and there is no "
        "tokenizer to tell whether the real vocabularies agree",
        draft.vocab_size, target.vocab_size);
  if (tok->vocab_size() > std::min(draft.vocab_size, target.vocab_size))
    raise<InvalidArgument>(
        "the draft's vocabulary has {} tokens (config.json), the model's {}: the tokenizer's {} "
        "do not fit both",
        draft.vocab_size, target.vocab_size, tok->vocab_size());
}

std::shared_ptr<Proposer> make_draft_proposer(const SettingValues& v,
                                              const SpeculativeOptions& spec,
                                              const std::string& target_dir, Model& target,
                                              const LoadOptions& target_opts,
                                              EngineConfig* engine) {
  const std::optional<DraftOptions> o = draft_options(v, spec);
  if (!o) return nullptr;
  if (!o->model_type.empty()) {
    const HfConfig hf = HfConfig::load((fs::path(o->dir) / "config.json").string());
    const std::string own = find_arch(hf, "").family;
    std::string named;
    try {
      named = find_arch(hf, o->model_type).family;
    } catch (const InvalidArgument& e) {
      raise<InvalidArgument>("{}: {}", v.source("draft-model-type"), e.what());
    }
    if (named != own)
      raise<InvalidArgument>("{}: '{}' is the {} family; the draft in {} is {}",
                             v.source("draft-model-type"), o->model_type, named, o->dir, own);
  }
  // On the target's device, in the target's compute dtype unless --draft-dtype says.
  LoadOptions opts;
  opts.device = target.backend().device();
  opts.dtype = o->dtype ? o->dtype : target_opts.dtype;
  const ModelConfig draft_cfg = load_model_config(o->dir, opts);
  try {
    check_draft_vocabulary(target_dir, target.config(), o->dir, draft_cfg);
  } catch (const InvalidArgument& e) {
    raise<InvalidArgument>("{} {}: {}", o->source, o->dir, e.what());
  }
  std::shared_ptr<Model> draft = load_model(o->dir, opts);

  const int32_t k = o->num_speculative_tokens;
  DraftProposerConfig pc;  // its own block size and step limits
  pc.vocab_size = target.vocab_size();
  pc.eos_token_ids = engine->eos_token_ids;
  const int64_t draft_block = static_cast<int64_t>(draft->kv_bytes_per_block(pc.block_size));
  const int64_t target_block = static_cast<int64_t>(target.kv_bytes_per_block(engine->block_size));
  // More than every sequence at its longest, plus its drafts, is never used.
  const int64_t seq_len = std::min(target.max_seq_len(), draft->max_seq_len()) + k;
  const int64_t useful =
      int64_t{engine->max_num_seqs} * ((seq_len + pc.block_size - 1) / pc.block_size);
  int64_t blocks = 0;
  if (engine->num_kv_blocks > 0) {
    // An explicit block count sizes the target's cache; the draft's holds as many
    // tokens, in memory of its own.
    blocks =
        (int64_t{engine->num_kv_blocks} * engine->block_size + pc.block_size - 1) / pc.block_size;
  } else {
    // The draft's KV cache comes out of the target's budget: on a GPU without
    // --kv-cache-mb the budget is measured again now that the draft's weights (and its
    // step's workspace) take device memory; then it is split so that both caches hold
    // as many tokens (in proportion to their bytes per token).
    if (!target.backend().device().is_cpu() && !(v.number("kv-cache-mb") > 0)) {
      engine->kv_cache_bytes = kv_cache_budget_bytes(target, v.number("gpu-memory-fraction"),
                                                     engine->max_num_batched_tokens) -
                               static_cast<int64_t>(draft->workspace_bytes(pc.max_batch_tokens));
    }
    const double d = static_cast<double>(draft_block) / pc.block_size;
    const double t = static_cast<double>(target_block) / engine->block_size;
    const double share = static_cast<double>(engine->kv_cache_bytes) * d / (d + t);
    blocks = static_cast<int64_t>(share / static_cast<double>(draft_block));
  }
  blocks = std::min({blocks, useful, int64_t{INT32_MAX}});
  if (blocks <= 0)
    raise<ResourceExhausted>(
        "no room for the draft model's KV cache: {} bytes of KV budget, {} bytes per block of "
        "the draft",
        engine->kv_cache_bytes, draft_block);
  if (engine->num_kv_blocks <= 0) {
    engine->kv_cache_bytes -= blocks * draft_block;
    if (engine->kv_cache_bytes < target_block)
      raise<ResourceExhausted>("no room for the model's KV cache beside the draft's");
  }
  pc.num_blocks = static_cast<int32_t>(blocks);
  log_info("draft model {}: {} KV blocks of {} tokens ({:.1f} MiB), {} speculative tokens", o->dir,
           pc.num_blocks, pc.block_size,
           static_cast<double>(blocks * draft_block) / (1024.0 * 1024.0), k);
  return std::make_shared<DraftModelProposer>(std::move(draft), std::move(pc));
}

}  // namespace tachyon::cli
