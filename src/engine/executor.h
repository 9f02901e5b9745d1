// The model executor: turns the scheduler's plan into a ForwardBatch, carries out the
// block swaps and copy-on-write copies and runs the model.
#pragma once

#include <functional>
#include <memory>
#include <span>

#include "core/tensor.h"
#include "engine/scheduler.h"
#include "model/forward.h"

namespace tachyon {

// The token ids of a sequence (prompt and generated), by sequence id.
using TokenSource = std::function<std::span<const int32_t>(int64_t seq_id)>;

// Builds the batch for a step: sequences in the plan's order, each contributing
// positions [start, start + num_tokens); logits rows for the last num_logits positions
// of each sequence, in order. `batch` is overwritten (its sampling and deferred tokens
// emptied too).
void build_forward_batch(const SchedulerOutput& plan, const TokenSource& tokens,
                         ForwardBatch* batch);

class ModelExecutor {
 public:
  explicit ModelExecutor(std::shared_ptr<LanguageModel> model) : model_(std::move(model)) {}

  // The plan's swaps (out, then in) and copy-on-write copies, in that order: before the
  // step's forward pass, and also for a plan that runs none.
  void move_blocks(const SchedulerOutput& plan);
  // Runs the forward pass (LanguageModel::forward_sample: tokens chosen on the device
  // where batch.sampling says so, logits [host rows, vocab] (float32, CPU) for the
  // others).
  ForwardOutput forward(const ForwardBatch& batch) { return model_->forward_sample(batch); }

  LanguageModel& model() { return *model_; }

 private:
  std::shared_ptr<LanguageModel> model_;
};

}  // namespace tachyon
