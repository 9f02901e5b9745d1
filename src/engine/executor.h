// The model executor: turns the scheduler's plan into a ForwardBatch (token ids,
// positions, block tables, the rows sampled on the device and the tokens that the step
// in flight chooses), carries out the block swaps and copy-on-write copies, runs the
// model and reads each sequence's result of a step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "engine/generate_config.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "model/forward.h"

namespace tachyon {

// A placeholder token of a sequence that a launched step chooses on the device.
struct PendingToken {
  size_t index = 0;  // in the sequence's tokens
  int64_t step = 0;  // the step that chooses it
  int32_t row = 0;   // that step's logits row
};

// A prompt's images and where their tokens are: the k-th image token takes row
// k % tokens_per_image of image k / tokens_per_image's embeddings.
struct PromptImages {
  std::vector<std::shared_ptr<const ImageInput>> images;  // in prompt order
  std::vector<int32_t> positions;  // the prompt index of each image token, ascending
  int32_t tokens_per_image = 0;
};

// The images of a prompt checked against the model (any thread): null for a prompt
// without images. InvalidArgument for images given to a model without a vision tower,
// an image the tower does not take, or a count of image tokens in the prompt that is not
// image_tokens() per image.
std::shared_ptr<const PromptImages> prompt_images(
    const LanguageModel& model, std::span<const int32_t> prompt,
    const std::vector<std::shared_ptr<const ImageInput>>& images);

// What the executor reads of a scheduled sequence to build its part of a batch.
struct SeqInputs {
  std::span<const int32_t> tokens;  // prompt and generated (placeholders included)
  int32_t prompt_len = 0;
  // The config whose draw the device makes for the sequence's last row; null: the row's
  // logits come back to the host.
  const GenerateConfig* device_config = nullptr;
  RngKey rng;  // the draw's key
  // The tokens the device's draw may choose (structured output: a bitmask of
  // token_mask_words(vocab) words); empty: every token.
  std::span<const uint32_t> allowed;
  std::span<const PendingToken> pending;
  const PromptImages* images = nullptr;  // its prompt's images, if any
};
using SeqLookup = std::function<SeqInputs(const ScheduledSeq&)>;

// A sequence's result of a step: its logits row [vocab] on the host (valid while the
// step's ForwardOutput is), or the token the device chose (kTokenOnHost when the row
// came back instead).
struct StepRow {
  const float* logits = nullptr;
  int32_t token = kTokenOnHost;
  float logprob = 0.0f;  // a token chosen on the device: its chosen_logprob (engine/sampler.h)
  // A step that verified drafts: its num_rows rows, one after the other from `logits`.
  int32_t num_rows = 1;
};
using LogitRows = std::unordered_map<int64_t, StepRow>;  // seq id -> its row

class ModelExecutor {
 public:
  // eos_ids: the tokens that end sequences (for the device's logits processors);
  // device_sampling: whether rows may be sampled on the model's device.
  ModelExecutor(std::shared_ptr<LanguageModel> model, std::vector<int32_t> eos_ids,
                bool device_sampling);

  // Builds the step's batch in the executor's own buffers (kept from step to step) and
  // returns it: sequences in the plan's order, each contributing positions [start,
  // start + num_tokens); logits rows for the last num_logits positions of each, in
  // order; the embeddings of the image tokens among the positions computed (the
  // model's, LanguageModel::image_embeddings); the device's draws for the rows whose
  // sequences have a device_config; and,
  // for placeholders within the computed positions, the token of the step launched
  // before (prev_step; a placeholder of another step is a bug).
  const ForwardBatch& build(const SchedulerOutput& plan, const SeqLookup& seqs, int64_t prev_step);

  // The cache's growth (SchedulerOutput::kv_blocks), the plan's swaps (out, then in) and
  // copy-on-write copies, in that order: before the
  // step's forward pass, and also for a plan that runs none.
  void move_blocks(const SchedulerOutput& plan);
  // Queues the batch (LanguageModel::launch) / takes the oldest queued step's output.
  void launch(const ForwardBatch& batch) { model_->launch(batch); }
  // Whether launch() computes the step before it returns (LanguageModel::launch_computes).
  bool launch_computes() const { return model_->launch_computes(); }
  ForwardOutput collect() { return model_->collect(); }
  // Runs the forward pass at once (LanguageModel::forward_sample: tokens chosen on the
  // device where batch.sampling says so, logits [host rows, vocab] (float32, CPU) for
  // the others).
  ForwardOutput forward(const ForwardBatch& batch) { return model_->forward_sample(batch); }

  // Each sequence's result in `out` (the sequences in plan order, each with its
  // num_logits rows; the last one kept, or all of them for a sequence that verifies
  // drafts, whose rows must all have come back to the host), added to `rows`.
  void read_rows(std::span<const ScheduledSeq> seqs, const ForwardOutput& out,
                 LogitRows* rows) const;

  bool device_sampling() const { return device_sampling_; }

 private:
  void add_sampling(const SchedulerOutput& plan);
  void add_images(const SchedulerOutput& plan);

  std::shared_ptr<LanguageModel> model_;
  std::vector<int32_t> eos_ids_;
  bool device_sampling_ = false;
  int32_t vocab_size_ = 0;
  // Cleared, not replaced, every step: a fresh block table of ~1,000 sequences is a
  // new mapping and its page faults every step.
  ForwardBatch batch_;
  std::vector<SeqInputs> inputs_;  // the plan's sequences, in order
};

}  // namespace tachyon
