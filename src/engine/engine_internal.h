// AsyncModel's private state, shared by its two source files.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/async_model.h"

namespace tachyon {

// One sequence: the prompt and what it generated so far.
struct AsyncModel::Seq {
  int64_t id = 0;
  int32_t index = 0;  // output index (sampling) or rank (beam)
  std::vector<int32_t> tokens;
  double cum_logprob = 0;
  bool finished = false;
  // Tokens that launched steps chose and the host has not seen: placeholders in
  // `tokens`, oldest first, at most one per step in flight.
  std::vector<PendingToken> pending;
  // The last step that computed tokens of it, and how many.
  int64_t last_step = -1;
  int32_t last_step_tokens = 0;
  // Drops the placeholders (the sequence ends before them).
  void drop_pending() {
    if (pending.empty()) return;
    tokens.resize(pending.front().index);
    pending.clear();
  }
  std::chrono::steady_clock::time_point last_token;
};

struct AsyncModel::Req {
  int64_t id = 0;
  GenerateConfig cfg;
  std::vector<int32_t> prompt;  // until the first sequence takes it
  int32_t prompt_len = 0;
  PromptLayout layout;  // the model's reading of the prompt
  int32_t max_new_tokens = 0;
  uint64_t seed = 0;
  std::shared_ptr<RequestStream> stream;

  // Live sequences: by output index when sampling, best first for beams. Finished
  // sampled sequences stay (marked) until the request ends.
  std::vector<std::unique_ptr<Seq>> seqs;
  bool forked = false;  // the prompt's sequence has been split into n
  int32_t outputs_done = 0;
  std::unique_ptr<BeamSearch> beam;

  std::chrono::steady_clock::time_point submitted;
  std::chrono::steady_clock::time_point deadline;
  bool scheduled = false;
  bool first_token = false;
  int64_t last_step = -1;
  RequestTimings timings;
};

// Where submit() and cancel() leave work for the loop.
struct AsyncModel::Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<Req>> incoming;
  std::vector<int64_t> cancels;
  std::vector<std::pair<int64_t, int32_t>> stops;  // (request, sequence index)
  bool stop = false;
  bool closed = false;  // no more submissions (shut down or dead)
};

}  // namespace tachyon
