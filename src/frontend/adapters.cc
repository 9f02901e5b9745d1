#include "frontend/adapters.h"

#include <filesystem>

#include "core/error.h"
#include "core/logging.h"
#include "frontend/adapter_names.h"
#include "model/lora_adapter.h"

namespace tachyon {

struct AdapterRegistry::Engine {
  std::mutex mu;
  AsyncModel* engine = nullptr;  // null once the registry is gone
};

struct AdapterRegistry::Entry : Lease {
  Entry(std::shared_ptr<Engine> e, int32_t i, std::string n, std::string p)
      : engine(std::move(e)), adapter_id(i), name(std::move(n)), path(std::move(p)) {}
  ~Entry() override {
    std::lock_guard<std::mutex> lock(engine->mu);
    if (engine->engine != nullptr) engine->engine->remove_adapter(adapter_id);
  }
  int32_t id() const override { return adapter_id; }

  std::shared_ptr<Engine> engine;
  int32_t adapter_id = 0;
  std::string name, path;
};

AdapterRegistry::AdapterRegistry(std::shared_ptr<Model> model, AsyncModel& engine,
                                 int32_t max_registered)
    : model_(std::move(model)),
      engine_(std::make_shared<Engine>()),
      max_registered_(max_registered) {
  engine_->engine = &engine;
}

AdapterRegistry::~AdapterRegistry() {
  std::lock_guard<std::mutex> lock(engine_->mu);
  engine_->engine = nullptr;
}

std::vector<AdapterInfo> AdapterRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<AdapterInfo> out;
  for (const auto& [name, e] : entries_) out.push_back(AdapterInfo{name, e->path});
  return out;
}

void AdapterRegistry::load(const std::string& name, const std::string& path) {
  if (std::string problem = adapter_name_problem(name); !problem.empty())
    raise<InvalidArgument>("{}", problem);
  if (path.empty()) raise<InvalidArgument>("LoRA adapter '{}': no path", name);
  const std::string abs = std::filesystem::absolute(path).lexically_normal().string();
  int32_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = entries_.find(name); it != entries_.end()) {
      if (it->second->path == abs) return;
      raise<InvalidArgument>(
          "LoRA adapter '{}' is loaded from {}: a name's path cannot change (unload it first)",
          name, it->second->path);
    }
    if (loading_.count(name) > 0) raise<InvalidArgument>("LoRA adapter '{}' is being loaded", name);
    if (static_cast<int32_t>(entries_.size() + loading_.size()) >= max_registered_)
      raise<ResourceExhausted>(
          "cannot load LoRA adapter '{}': {} adapters are registered, the most allowed "
          "(max_cpu_loras, MAX_LORA_MODEL_SIZE)",
          name, max_registered_);
    loading_.insert(name);
    id = next_id_++;
  }
  std::shared_ptr<Entry> entry;
  try {
    if (!std::filesystem::is_directory(abs))
      raise<NotFound>("LoRA adapter '{}': no folder {}", name, abs);
    LoraLimits limits;
    limits.max_rank = model_->max_lora_rank();
    const LoraAdapter adapter =
        load_lora_adapter(abs, model_->config(), model_->weights().map, limits);
    std::shared_ptr<const PreparedAdapter> prepared = model_->prepare_adapter(adapter);
    engine_->engine->add_adapter(id, std::move(prepared));
    entry = std::make_shared<Entry>(engine_, id, name, abs);
    log_info("LoRA adapter '{}' loaded from {} ({} modules, rank {})", name, abs,
             adapter.modules.size(), adapter.max_rank);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    loading_.erase(name);
    throw;
  }
  std::lock_guard<std::mutex> lock(mu_);
  loading_.erase(name);
  entries_[name] = std::move(entry);
}

void AdapterRegistry::unload(const std::string& name) {
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(name);
    if (it == entries_.end()) raise<NotFound>("LoRA adapter '{}' is not loaded", name);
    entry = std::move(it->second);
    entries_.erase(it);
  }
  log_info("LoRA adapter '{}' unloaded", name);
  // Leaves the engine here, or when the last request running on it ends.
}

std::shared_ptr<const AdapterRegistry::Lease> AdapterRegistry::acquire(
    const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    std::string known;
    for (const auto& [n, e] : entries_) known += (known.empty() ? "" : ", ") + n;
    raise<InvalidArgument>("no LoRA adapter named '{}' is loaded (loaded: {})", name,
                           known.empty() ? "none" : known);
  }
  return it->second;
}

}  // namespace tachyon
