#include "server/native_format.h"

#include "server/text_util.h"

namespace tachyon::server {
namespace {

class NativeFormatter : public CallFormatter {
 public:
  explicit NativeFormatter(NativeFormatOptions o) : o_(std::move(o)), start_ms_(monotonic_ms()) {
    prompts_.resize(o_.input_ids.size());
    for (auto& p : prompts_) p.seqs.resize(static_cast<size_t>(std::max(1, o_.num_sequences)));
  }

  bool streaming() const override { return o_.stream; }

  std::string on_events(size_t p, const std::vector<GenEvent>& events) override {
    Prompt& pr = prompts_[p];
    ++pr.iter;
    for (auto& s : pr.seqs) s.step_len = 0;
    for (const auto& e : events) {
      if (e.done) {
        pr.done = true;
        pr.final = e.timings;
        pr.has_final = true;
      }
      if (e.index < 0 || static_cast<size_t>(e.index) >= pr.seqs.size()) continue;
      Seq& s = pr.seqs[static_cast<size_t>(e.index)];
      if (!e.token_ids.empty() && pr.first_token_ms < 0)
        pr.first_token_ms = monotonic_ms() - start_ms_;
      s.text += e.text;
      s.ids.insert(s.ids.end(), e.token_ids.begin(), e.token_ids.end());
      s.step_len += static_cast<int32_t>(e.token_ids.size());
      s.cum = e.cum_log_prob;
      if (e.finish) s.finished = true;
    }
    if (!o_.stream) return {};
    Json out;
    if (o_.batch) {
      out = Json{{"response_batch", Json::array()}};
      for (size_t i = 0; i < prompts_.size(); ++i)
        out["response_batch"].push_back(item(i, o_.incremental));
    } else {
      out = item(p, o_.incremental);
    }
    return "data:" + dump_json(out) + "\r\n\r\n";
  }

  std::string finish() override {
    if (o_.stream) return "data:[done]\r\n\r\n";
    if (!o_.batch) return dump_json(item(0, false));
    Json out = {{"response_batch", Json::array()}};
    for (size_t i = 0; i < prompts_.size(); ++i) out["response_batch"].push_back(item(i, false));
    return dump_json(out);
  }

  std::string stream_error(const ApiError& e) override {
    return "data:" + dump_json(e.native_json()) + "\r\n\r\n";
  }
  Json error_body(const ApiError& e) const override { return e.native_json(); }

 private:
  struct Seq {
    std::string text;
    size_t text_sent = 0;
    std::vector<int32_t> ids;
    size_t ids_sent = 0;
    double cum = 0;
    int32_t step_len = 0;
    bool finished = false;
  };
  struct Prompt {
    std::vector<Seq> seqs;
    int32_t iter = 0;
    double first_token_ms = -1;
    bool done = false;
    bool has_final = false;
    GenTimings final;
  };

  Json aux(size_t p, size_t si) const {
    const Prompt& pr = prompts_[p];
    const Seq& s = pr.seqs[si];
    const GenTimings& t = pr.final;
    Json beams = Json::array();
    if (o_.beam_responses)
      for (const auto& b : pr.seqs) beams.push_back(b.text);
    return Json{{"cost_time", pr.has_final ? t.total_ms : monotonic_ms() - start_ms_},
                {"iter_count", pr.has_final ? t.iter_count : pr.iter},
                {"input_len", o_.input_ids[p].size()},
                {"prefix_len", p < o_.prefix_lens.size() ? o_.prefix_lens[p] : 0},
                {"reuse_len", t.reuse_len},
                {"local_reuse_len", t.reuse_len},
                {"remote_reuse_len", 0},
                {"output_len", s.ids.size()},
                {"step_output_len", s.step_len},
                {"first_token_cost_time",
                 pr.has_final ? t.first_token_ms : std::max(0.0, pr.first_token_ms)},
                {"wait_time", t.queue_ms},
                {"pd_sep", false},
                {"cum_log_probs", Json::array({s.cum})},
                {"beam_responses", beams},
                {"softmax_probs", Json::array()},
                {"speculative_draft_rounds", t.speculative_draft_rounds},
                {"speculative_accepted_tokens_per_pos", t.speculative_accepted_tokens_per_pos}};
  }

  // The state of prompt p; `incremental` sends only what is new since the last call.
  Json item(size_t p, bool incremental) {
    Prompt& pr = prompts_[p];
    auto text_of = [&](Seq& s) {
      std::string t = incremental ? s.text.substr(s.text_sent) : s.text;
      s.text_sent = s.text.size();
      return t;
    };
    auto ids_of = [&](Seq& s) {
      std::vector<int32_t> ids(
          s.ids.begin() + static_cast<std::ptrdiff_t>(incremental ? s.ids_sent : 0), s.ids.end());
      s.ids_sent = s.ids.size();
      return ids;
    };
    Json out = Json::object();
    bool all_finished = pr.done;
    if (o_.multi) {
      Json texts = Json::array(), auxes = Json::array(), ids = Json::array();
      for (size_t i = 0; i < pr.seqs.size(); ++i) {
        texts.push_back(text_of(pr.seqs[i]));
        if (o_.aux_info) auxes.push_back(aux(p, i));
        if (o_.return_output_ids) ids.push_back(ids_of(pr.seqs[i]));
      }
      out["response"] = std::move(texts);
      out["finished"] = all_finished;
      out["aux_info"] = std::move(auxes);
      if (o_.return_output_ids) out["output_ids"] = std::move(ids);
    } else {
      out["response"] = text_of(pr.seqs[0]);
      out["finished"] = all_finished;
      out["aux_info"] = o_.aux_info ? aux(p, 0) : Json::object();
      if (o_.return_output_ids) out["output_ids"] = Json::array({ids_of(pr.seqs[0])});
    }
    if (o_.return_input_ids) out["input_ids"] = Json::array({o_.input_ids[p]});
    return out;
  }

  NativeFormatOptions o_;
  double start_ms_;
  std::vector<Prompt> prompts_;
};

}  // namespace

std::unique_ptr<CallFormatter> make_native_formatter(NativeFormatOptions options) {
  return std::make_unique<NativeFormatter>(std::move(options));
}

}  // namespace tachyon::server
