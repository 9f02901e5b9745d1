// The draft-model proposer (engine/draft_model_proposer.h) on the CPU: the time of one
// propose() call of k greedy drafts for each of --batch sequences, in the steady state
// of speculative decoding where every draft is accepted (each call's tokens are the last
// call's plus its k drafts and one token of the target's: the call computes 2 tokens of
// catch-up, then k - 1 single-token steps). Alternated with it, the same forward passes
// of the draft model alone (a runner of its own): the ratio is what the proposer adds.
// A sequence that reaches --max-context starts again from its prompt (a prefill inside
// that call; the median does not see it).
//
//   draft_proposer_bench [--model build/models/tiny-kjv-draft] [--k 4] [--batch 1]
//                        [--prompt 16] [--max-context 512] [--seconds 3] [--threads N]
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/thread_pool.h"
#include "engine/draft_model_proposer.h"
#include "model/loader.h"

namespace tachyon {
namespace {

int run(int argc, char** argv) {
  std::string model_dir = "build/models/tiny-kjv-draft";
  int32_t k = 4, batch = 1, prompt = 16, max_context = 512, threads = 0;
  double seconds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model")
      model_dir = v;
    else if (a == "--k")
      k = std::stoi(v);
    else if (a == "--batch")
      batch = std::stoi(v);
    else if (a == "--prompt")
      prompt = std::stoi(v);
    else if (a == "--max-context")
      max_context = std::stoi(v);
    else if (a == "--seconds")
      seconds = std::stod(v);
    else if (a == "--threads")
      threads = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (threads > 0) ThreadPool::set_global_threads(threads);
  LoadOptions opts;
  opts.device = parse_device("cpu");
  std::shared_ptr<Model> draft = load_model(model_dir, opts);
  const int32_t vocab = draft->vocab_size();
  DraftProposerConfig pc;
  pc.num_blocks = batch * ((max_context + k + 2 * pc.block_size) / pc.block_size);
  DraftModelProposer proposer(draft, pc);

  // The step alone: another instance of the model, its own cache.
  auto alone = load_model(model_dir, opts);
  alone->init_kv_cache(batch * ((max_context + pc.block_size) / pc.block_size), pc.block_size);

  GenerateConfig greedy;
  greedy.temperature = 0.0f;
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(batch));
  auto restart = [&](size_t s) {
    tokens[s].clear();
    for (int32_t i = 0; i < prompt; ++i)
      tokens[s].push_back(1 + static_cast<int32_t>((s * 7919 + static_cast<size_t>(i) * 104729) %
                                                   static_cast<size_t>(vocab - 1)));
  };
  for (size_t s = 0; s < tokens.size(); ++s) restart(s);
  std::vector<ProposalRequest> reqs(tokens.size());
  std::vector<Proposal> out(tokens.size());
  int64_t drafted = 0;
  auto call = [&](int64_t) {
    for (size_t s = 0; s < tokens.size(); ++s) {
      if (static_cast<int32_t>(tokens[s].size()) + k + 1 > max_context) {
        proposer.release(static_cast<int64_t>(s));
        restart(s);
      }
      reqs[s].seq_id = static_cast<int64_t>(s);
      reqs[s].tokens = tokens[s];
      reqs[s].prompt_len = prompt;
      reqs[s].max_tokens = k;
      reqs[s].config = &greedy;
    }
    proposer.propose(reqs, out);
    for (size_t s = 0; s < tokens.size(); ++s) {
      drafted += static_cast<int64_t>(out[s].tokens.size());
      tokens[s].insert(tokens[s].end(), out[s].tokens.begin(), out[s].tokens.end());
      tokens[s].push_back(1 + static_cast<int32_t>(tokens[s].size() % 1000));  // the target's
    }
  };
  // The same forward passes without the proposer: a 2-token step, then k - 1 steps of
  // one token, each over the batch, with the context growing as the proposer's does.
  int32_t context = prompt;
  const int32_t per_seq = (max_context + pc.block_size) / pc.block_size;
  auto forward = [&](int32_t q) {
    ForwardBatch b;
    b.max_blocks_per_seq = per_seq;
    b.query_start.push_back(0);
    for (int32_t s = 0; s < batch; ++s) {
      for (int32_t i = 0; i < q; ++i) {
        b.token_ids.push_back(5);
        b.positions.push_back(context + i);
      }
      b.query_start.push_back((s + 1) * q);
      b.context_lens.push_back(context + q);
      for (int32_t i = 0; i < per_seq; ++i) b.block_tables.push_back(s * per_seq + i);
      b.logits_rows.push_back((s + 1) * q - 1);
    }
    alone->forward(b);
    context += q;
  };
  auto steps = [&](int64_t) {
    if (context + k + 1 > max_context) context = prompt;
    forward(2);
    for (int32_t j = 1; j < k; ++j) forward(1);
  };
  const bench::PairTiming t = bench::time_pair(steps, call, seconds, 20);
  std::printf(
      "draft proposer %s, k=%d, batch %d: propose %.3f ms median (p10 %.3f), %.3f ms per "
      "draft position; its forward passes alone %.3f ms (p10 %.3f); ratio %.2fx; %lld calls, "
      "%lld drafts; other CPUs %.2f\n",
      model_dir.c_str(), k, batch, t.b.median * 1e3, t.b.p10 * 1e3,
      t.b.median * 1e3 / static_cast<double>(k), t.a.median * 1e3, t.a.p10 * 1e3, t.ratio,
      static_cast<long long>(t.b.calls), static_cast<long long>(drafted), t.b.other_cpus);
  return 0;
}

}  // namespace
}  // namespace tachyon

int main(int argc, char** argv) {
  return tachyon::run(argc, argv);
}
