#include "cli/args.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "core/logging.h"
#include "core/thread_pool.h"

namespace tachyon::cli {

std::optional<SettingValues> parse_command(std::string_view command,
                                           const std::vector<std::string>& argv,
                                           std::string_view usage) {
  auto values = parse_settings(command, argv);
  if (!values) {
    const std::string help = settings_help(command, usage);
    std::fwrite(help.data(), 1, help.size(), stdout);
    return std::nullopt;
  }
  // The settings the libraries read from the environment: a malformed one fails here,
  // before any work, rather than deep inside the first use.
  for (const Setting& s : settings_table())
    if (s.commands.empty()) setting_env_str(s.name);
  if (find_setting("log-level").takes(command))
    set_log_level(parse_log_level(values->str("log-level")));
  if (find_setting("threads").takes(command) && values->integer("threads") > 0)
    ThreadPool::set_global_threads(static_cast<int>(values->integer("threads")));
  return values;
}

int64_t parse_int(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || end == nullptr || *end != '\0')
    raise<InvalidArgument>("{}: '{}' is not an integer", what, text);
  return v;
}

}  // namespace tachyon::cli
