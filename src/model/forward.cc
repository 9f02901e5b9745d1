// LanguageModel's default launch()/collect(): each step runs inside launch(), its
// deferred tokens taken from the previous step's output on the host.
#include "model/forward.h"

namespace tachyon {

void LanguageModel::launch(const ForwardBatch& batch) {
  TACHYON_CHECK(launched_.size() < 2, "launch: two steps are already launched and not collected");
  if (batch.deferred.empty()) {
    launched_.push_back(forward_sample(batch));
  } else {
    ForwardBatch b = batch;
    for (const DeferredToken& d : b.deferred) {
      if (d.index < 0 || d.index >= b.num_tokens() || d.row < 0 ||
          static_cast<size_t>(d.row) >= last_tokens_.size())
        raise<InvalidArgument>(
            "launch: deferred token {} from row {} (the step has {} tokens, "
            "the previous one {} rows)",
            d.index, d.row, b.num_tokens(), last_tokens_.size());
      const int32_t t = last_tokens_[static_cast<size_t>(d.row)];
      b.token_ids[static_cast<size_t>(d.index)] = t >= 0 ? t : 0;
    }
    b.deferred.clear();
    launched_.push_back(forward_sample(b));
  }
  last_tokens_ = launched_.back().tokens;
}

ForwardOutput LanguageModel::collect() {
  TACHYON_CHECK(!launched_.empty(), "collect: no step was launched");
  ForwardOutput out = std::move(launched_.front());
  launched_.pop_front();
  return out;
}

}  // namespace tachyon
