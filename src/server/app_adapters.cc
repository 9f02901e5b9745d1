// The LoRA adapter endpoints: RTP-LLM's declarative POST /update and vLLM's
// /v1/load_lora_adapter and /v1/unload_lora_adapter. Each change runs under
// adapters_mu_, so that two requests never interleave their changes.
#include <map>

#include "core/error.h"
#include "core/logging.h"
#include "frontend/adapter_names.h"
#include "server/api_error.h"
#include "server/app.h"
#include "server/json_fields.h"

namespace tachyon::server {
namespace {

// RTP-LLM reports every /update problem with its UPDATE_ERROR code.
ApiError update_error(const ApiError& e) {
  return ApiError(e.status(), e.type(), e.message(), e.param(), e.code(),
                  NativeErrorCode::kUpdateError);
}

// vLLM answers its adapter routes' errors with 400, a server fault with 500.
ApiError adapter_route_error(const ApiError& e) {
  if (e.status() >= 500 || e.status() == 400) return e;
  return ApiError(400, "invalid_request_error", e.message(), e.param(), e.code(), e.native_code());
}

// A name requests may select: a valid adapter name that is not the served model's.
void check_new_name(const std::string& name, const std::string& served, const std::string& field) {
  if (const std::string problem = adapter_name_problem(name); !problem.empty())
    throw ApiError::bad_request(field + ": " + problem, field);
  if (name == served)
    throw ApiError::bad_request(
        field + ": '" + name + "' is the served model's name; an adapter needs its own", field);
}

Json names_json(const std::vector<std::string>& names) {
  Json out = Json::array();
  for (const auto& n : names) out.push_back(n);
  return out;
}

void respond_text(ResponseWriter& w, const std::string& text) {
  w.respond(200, "text/plain; charset=utf-8", text, {});
}

}  // namespace

void ServerApp::handle_update(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w) {
  std::shared_ptr<InferenceBackend> b;
  std::map<std::string, std::string> wanted;
  std::vector<std::string> to_unload, to_load;
  std::unique_lock<std::mutex> lock(adapters_mu_);
  // The whole body is checked before anything changes.
  try {
    b = ready_backend();
    Json body = parse_request_object(req.body);
    FieldReader top(body);
    const Json* peft = top.raw("peft_info");
    if (peft == nullptr || !peft->is_object())
      throw ApiError::bad_request(
          "peft_info must be an object {\"lora_info\": {\"NAME\": \"DIR\", ...}}", "peft_info");
    top.refuse_unless("models_info", {Json::object()},
                      "updating the model's weights is not supported");
    top.finish();
    FieldReader pr(*peft, "peft_info");
    const Json* info = pr.raw("lora_info");
    if (info == nullptr || !info->is_object())
      throw ApiError::bad_request(
          "peft_info.lora_info must be an object {\"NAME\": \"DIR\", ...} (empty: no adapters)",
          "peft_info.lora_info");
    pr.finish();
    for (const auto& [name, path] : info->items()) {
      const std::string field = "peft_info.lora_info." + name;
      check_new_name(name, options_.model_name, "peft_info.lora_info");
      if (!path.is_string() || path.get<std::string>().empty())
        throw ApiError::bad_request(field + " must be the adapter's folder (a non-empty string)",
                                    field);
      wanted.emplace(name, path.get<std::string>());
    }
    std::map<std::string, std::string> current;
    for (const AdapterInfo& a : b->adapters()) current.emplace(a.name, a.path);
    for (const auto& [name, path] : current) {
      auto it = wanted.find(name);
      if (it == wanted.end()) {
        to_unload.push_back(name);
      } else if (it->second != path) {
        throw ApiError::bad_request("adapter '" + name + "' is loaded from '" + path +
                                        "'; it cannot change to '" + it->second +
                                        "' (give it another name, or unload it first)",
                                    "peft_info.lora_info." + name);
      }
    }
    for (const auto& [name, path] : wanted)
      if (current.count(name) == 0) to_load.push_back(name);
  } catch (...) {
    throw update_error(ApiError::from_current_exception());
  }
  // Unloads first (they free room), then loads; a failure stops there and says what
  // changed before it.
  std::vector<std::string> unloaded, loaded;
  try {
    for (const auto& name : to_unload) {
      b->unload_adapter(name);
      unloaded.push_back(name);
    }
    for (const auto& name : to_load) {
      b->load_adapter(name, wanted[name]);
      loaded.push_back(name);
    }
  } catch (...) {
    const ApiError e = update_error(ApiError::from_current_exception());
    std::string changed = "nothing changed before it";
    if (!unloaded.empty() || !loaded.empty())
      changed = "changed before it: unloaded " + names_json(unloaded).dump() + ", loaded " +
                names_json(loaded).dump();
    Json out = e.native_json();
    out["message"] = "LoRA update failed: " + e.message() + " (" + changed + ")";
    out["unloaded"] = names_json(unloaded);
    out["loaded"] = names_json(loaded);
    log_warning("{}", out["message"].get<std::string>());
    return respond_json(*w, e.status(), out);
  }
  if (!unloaded.empty() || !loaded.empty())
    log_info("LoRA adapters updated: unloaded {}, loaded {}", names_json(unloaded).dump(),
             names_json(loaded).dump());
  respond_json(
      *w, 200,
      {{"status", "ok"}, {"unloaded", names_json(unloaded)}, {"loaded", names_json(loaded)}});
}

void ServerApp::handle_load_lora(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w) {
  std::unique_lock<std::mutex> lock(adapters_mu_);
  std::string name;
  try {
    auto b = ready_backend();
    Json body = parse_request_object(req.body);
    FieldReader r(body);
    auto n = r.opt_string("lora_name", 4096);
    auto path = r.opt_string("lora_path", 1u << 16);
    r.finish();
    if (!n || !path || n->empty() || path->empty())
      throw ApiError::bad_request("Both 'lora_name' and 'lora_path' must be provided.",
                                  n && !n->empty() ? "lora_path" : "lora_name");
    name = *n;
    check_new_name(name, options_.model_name, "lora_name");
    for (const AdapterInfo& a : b->adapters())
      if (a.name == name)
        throw ApiError::bad_request("The lora adapter '" + name + "' has already been loaded.",
                                    "lora_name");
    b->load_adapter(name, *path);
  } catch (...) {
    throw adapter_route_error(ApiError::from_current_exception());
  }
  log_info("LoRA adapter '{}' loaded", name);
  respond_text(*w, "Success: LoRA adapter '" + name + "' added successfully.");
}

void ServerApp::handle_unload_lora(const HttpRequest& req,
                                   const std::shared_ptr<ResponseWriter>& w) {
  std::unique_lock<std::mutex> lock(adapters_mu_);
  std::string name;
  try {
    auto b = ready_backend();
    Json body = parse_request_object(req.body);
    FieldReader r(body);
    auto n = r.opt_string("lora_name", 4096);
    r.ignore("lora_int_id");  // vLLM's internal id: adapters are known by name here
    r.finish();
    if (!n || n->empty())
      throw ApiError::bad_request("'lora_name' needs to be provided to unload a LoRA adapter.",
                                  "lora_name");
    name = *n;
    bool known = false;
    for (const AdapterInfo& a : b->adapters()) known = known || a.name == name;
    if (!known)
      throw ApiError::bad_request("The lora adapter '" + name + "' cannot be found.", "lora_name");
    b->unload_adapter(name);
  } catch (...) {
    throw adapter_route_error(ApiError::from_current_exception());
  }
  log_info("LoRA adapter '{}' unloaded", name);
  respond_text(*w, "Success: LoRA adapter '" + name + "' removed successfully.");
}

}  // namespace tachyon::server
