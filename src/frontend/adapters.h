// The LoRA adapters registered with an engine, by name. Each is read from its PEFT
// folder for the model (model/lora_adapter.h), prepared by the model and given to the
// engine under an id that is never reused. A request holds its adapter (a Lease) until
// it ends: an adapter removed while requests run on it stays in the engine until the
// last of them ends, and no new request can name it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "engine/async_model.h"
#include "frontend/backend.h"
#include "model/model_runner.h"

namespace tachyon {

class AdapterRegistry {
 public:
  // The adapter a request runs with, held until the request ends.
  class Lease {
   public:
    virtual ~Lease() = default;
    virtual int32_t id() const = 0;
  };

  // max_registered: the most adapters registered at once (RTP-LLM's
  // MAX_LORA_MODEL_SIZE, vLLM's max_cpu_loras).
  AdapterRegistry(std::shared_ptr<Model> model, AsyncModel& engine, int32_t max_registered);
  ~AdapterRegistry();
  AdapterRegistry(const AdapterRegistry&) = delete;
  AdapterRegistry& operator=(const AdapterRegistry&) = delete;

  std::vector<AdapterInfo> list() const;
  // InferenceBackend::load_adapter / unload_adapter.
  void load(const std::string& name, const std::string& path);
  void unload(const std::string& name);
  // The adapter named, for one request; InvalidArgument naming it when none is
  // registered under that name.
  std::shared_ptr<const Lease> acquire(const std::string& name) const;

 private:
  struct Engine;  // the engine the adapters' last holders remove them from
  struct Entry;

  std::shared_ptr<Model> model_;
  std::shared_ptr<Engine> engine_;
  int32_t max_registered_ = 0;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> entries_;
  std::set<std::string> loading_;  // names being read now
  int32_t next_id_ = 1;
};

}  // namespace tachyon
