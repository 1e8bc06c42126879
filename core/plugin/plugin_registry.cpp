#include "plugin/plugin_registry.hpp"

#include "config/plugin_config.hpp"
#include "runtime/error.hpp"

#include "runtime/input.hpp"

#define BOOST_DLL_USE_STD_FS
#include <boost/dll/runtime_symbol_info.hpp>

#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstddef>
#include <cstdlib>
#include <set>
#include <sstream>

namespace zf {
namespace fs = std::filesystem;

const char *kind_name(zf_kind kind) {
  switch (kind) {
    case ZF_KIND_STAGE: return "stage";
    case ZF_KIND_OFFLOAD: return "offload";
    case ZF_KIND_OPTIMIZER: return "optimizer";
    case ZF_KIND_SELECTOR: return "selector";
  }
  return "unknown";
}

std::optional<zf_kind> kind_from_name(const std::string &name) {
  for (zf_kind kind : {ZF_KIND_STAGE, ZF_KIND_OFFLOAD, ZF_KIND_OPTIMIZER, ZF_KIND_SELECTOR})
    if (name == kind_name(kind)) return kind;
  return std::nullopt;
}

namespace {

struct FileName {
  std::string kind, name;
};

// "zf-KIND-NAME.so" -> {KIND, NAME}; nullopt for other names.
std::optional<FileName> parse_file_name(const fs::path &path) {
  std::string base = path.filename().string();
  if (base.rfind("zf-", 0) != 0 || path.extension() != ".so") return std::nullopt;
  std::string stem = base.substr(3, base.size() - 3 - 3);
  auto dash = stem.find('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 >= stem.size()) return std::nullopt;
  return FileName{stem.substr(0, dash), stem.substr(dash + 1)};
}

std::string version_text(uint32_t version) {
  return format("%u.%u", ZF_ABI_MAJOR_OF(version), ZF_ABI_MINOR_OF(version));
}

// Whether a symbol is code: a plugin may export an entry's name as data, which cannot be called.
bool is_function(void *address) {
  Dl_info info{};
  void *entry = nullptr;
  if (!dladdr1(address, &info, &entry, RTLD_DL_SYMENT) || !entry) return true;
  const auto *symbol = static_cast<const ElfW(Sym) *>(entry);
  int type = ELF64_ST_TYPE(symbol->st_info);
  return type == STT_FUNC || type == STT_GNU_IFUNC;
}

// Whether `bytes` bytes at address can be read, asked of the kernel instead of touching them (a
// wild pointer from a plugin would otherwise end the process).
bool readable(const void *address, size_t bytes) {
  if (!address) return false;
  std::vector<char> copy(bytes);
  iovec local{copy.data(), bytes}, remote{const_cast<void *>(address), bytes};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == ssize_t(bytes)) return true;
  return errno != EFAULT;  // the call itself unavailable: cannot tell
}

// A NUL-terminated string of at most max_chars within readable memory.
bool readable_string(const char *text, size_t max_chars = 4096) {
  for (size_t i = 0; i < max_chars; ++i) {
    if ((i == 0 || (uintptr_t(text + i) & 4095) == 0) && !readable(text + i, 1)) return false;
    if (text[i] == '\0') return true;
  }
  return false;
}

// Size of each kind's table at ABI 1.0 and its required entries.
struct KindTable {
  size_t minimum_size;
  std::vector<std::pair<const char *, size_t>> required;  // entry name, offset
};

#define ZF_ENTRY(type, member) {#member, offsetof(type, member)}
KindTable kind_table(zf_kind kind) {
  switch (kind) {
    case ZF_KIND_STAGE:
      return {offsetof(zf_stage_api, gather_block),  // ABI 1.0's table; 1.1 added gather_block
              {ZF_ENTRY(zf_stage_api, create), ZF_ENTRY(zf_stage_api, destroy),
               ZF_ENTRY(zf_stage_api, plan), ZF_ENTRY(zf_stage_api, reduce_gradients)}};
    case ZF_KIND_OFFLOAD:
      return {offsetof(zf_offload_api, transfer_event),  // ABI 1.0's table; 1.3 added transfer_event
              {ZF_ENTRY(zf_offload_api, create), ZF_ENTRY(zf_offload_api, destroy),
               ZF_ENTRY(zf_offload_api, plan)}};
    case ZF_KIND_OPTIMIZER:
      return {offsetof(zf_optimizer_api, state_spec),  // ABI 1.0's table; 1.3 added state_spec, bind_state
              {ZF_ENTRY(zf_optimizer_api, create), ZF_ENTRY(zf_optimizer_api, destroy),
               ZF_ENTRY(zf_optimizer_api, init_state), ZF_ENTRY(zf_optimizer_api, step)}};
    case ZF_KIND_SELECTOR:
      return {sizeof(zf_selector_api),
              {ZF_ENTRY(zf_selector_api, create), ZF_ENTRY(zf_selector_api, destroy),
               ZF_ENTRY(zf_selector_api, select)}};
  }
  return {0, {}};
}
#undef ZF_ENTRY

// An entry past the end of the plugin's table (an older minor version) counts as NULL.
bool wired(const void *api, size_t offset) {
  if (*static_cast<const uint32_t *>(api) < offset + sizeof(void *)) return false;
  void *entry = nullptr;
  std::memcpy(&entry, static_cast<const char *>(api) + offset, sizeof entry);
  return entry != nullptr;
}

// Capability bits must match what the table wires.
std::string check_capabilities(const zf_descriptor &d) {
  uint64_t caps = d.capabilities;
  if (!(caps & (ZF_CAP_CPU | ZF_CAP_CUDA))) return "declares neither ZF_CAP_CPU nor ZF_CAP_CUDA";
  struct Rule {
    zf_kind kind;
    uint64_t cap;
    const char *cap_name;
    std::vector<std::pair<const char *, size_t>> entries;
  };
  const Rule rules[] = {
      {ZF_KIND_OPTIMIZER, ZF_CAP_ASYNC, "ZF_CAP_ASYNC",
       {{"submit", offsetof(zf_optimizer_api, submit)}, {"wait", offsetof(zf_optimizer_api, wait)}}},
      {ZF_KIND_OFFLOAD, ZF_CAP_NVME, "ZF_CAP_NVME",
       {{"write_tile", offsetof(zf_offload_api, write_tile)},
        {"read_tile", offsetof(zf_offload_api, read_tile)},
        {"wait", offsetof(zf_offload_api, wait)}}},
      {ZF_KIND_SELECTOR, ZF_CAP_SCORES, "ZF_CAP_SCORES", {{"score", offsetof(zf_selector_api, score)}}},
      {ZF_KIND_STAGE, ZF_CAP_SHARD_PARAMETERS, "ZF_CAP_SHARD_PARAMETERS",
       {{"gather_block", offsetof(zf_stage_api, gather_block)}}},
  };
  for (const Rule &rule : rules) {
    if (rule.kind != d.kind) continue;
    bool declared = caps & rule.cap;
    for (const auto &[entry, offset] : rule.entries) {
      if (declared && !wired(d.api, offset))
        return format("declares %s but its '%s' entry is NULL", rule.cap_name, entry);
    }
    if (!declared && rule.kind == ZF_KIND_OPTIMIZER &&
        (wired(d.api, rule.entries[0].second) != wired(d.api, rule.entries[1].second)))
      return "wires only one of 'submit' and 'wait'";
  }
  return "";
}

std::string check_params(const zf_descriptor &d) {
  if (d.param_count && !d.params) return "declares parameters but its table is NULL";
  if (d.param_count && (d.param_count > 4096 || !readable(d.params, d.param_count * sizeof(zf_param_decl))))
    return format("declares %u parameters but its table cannot be read", d.param_count);
  std::set<std::string> seen;
  std::set<std::string> reserved = {"plugin"};
  if (d.kind == ZF_KIND_OPTIMIZER)
    reserved.insert({"lr", "beta1", "beta2", "eps", "weight_decay"});
  for (uint32_t i = 0; i < d.param_count; ++i) {
    const zf_param_decl &p = d.params[i];
    if (!p.key || !readable_string(p.key) || !*p.key) return format("parameter %u has no key", i);
    for (const char *text : {p.default_value, p.doc, p.choices})
      if (text && !readable_string(text)) return format("parameter '%s' has a wild string pointer", p.key);
    if (reserved.count(p.key)) return format("parameter '%s' uses a key the core reserves", p.key);
    if (!seen.insert(p.key).second) return format("parameter '%s' is declared twice", p.key);
    try {
      PluginConfig::parse_default(p);
    } catch (const Error &error) {
      return error.what();
    }
  }
  return "";
}

// Loads path, negotiates and describes in a child process: a constructor or an entry point
// that crashes or hangs ends the child, not zfcore. "" when the child finished cleanly.
std::string probe_in_child(const fs::path &path) {
  if (!regular_file_problem(path.string()).empty()) return "";  // load() says why it is refused
  pid_t child = fork();
  if (child < 0) return "";  // cannot probe: load in this process
  if (child == 0) {
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    if (void *handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL)) {
      void *negotiate = dlsym(handle, ZF_NEGOTIATE_SYMBOL), *describe = dlsym(handle, ZF_DESCRIBE_SYMBOL);
      if (negotiate && is_function(negotiate) && reinterpret_cast<uint32_t (*)(uint32_t)>(negotiate)(ZF_ABI_VERSION) &&
          describe && is_function(describe))
        reinterpret_cast<const zf_descriptor *(*)()>(describe)();
    }
    _exit(0);
  }
  for (int waited_ms = 0; waited_ms < 10000; waited_ms += 10) {
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) {
      if (!WIFSIGNALED(status)) return "";
      return format("crashed while being loaded (signal %d, %s) in its constructor, " ZF_NEGOTIATE_SYMBOL
                    " or " ZF_DESCRIBE_SYMBOL,
                    WTERMSIG(status), strsignal(WTERMSIG(status)));
    }
    usleep(10000);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return "did not finish loading within 10 s (a constructor or entry point that never returns)";
}

}  // namespace

// Absolute directories: summary.json and messages name plugin files by paths that still hold
// when read from another working directory.
PluginRegistry::PluginRegistry(std::vector<fs::path> search_path) : search_path_(std::move(search_path)) {
  for (fs::path &dir : search_path_) {
    std::error_code ec;
    fs::path absolute = fs::absolute(dir, ec);
    if (!ec) dir = absolute.lexically_normal();
  }
}

fs::path PluginRegistry::builtin_dir() {
  boost::dll::fs::error_code error;
  fs::path program = boost::dll::program_location(error);
  return program.parent_path().parent_path() / "lib" / "zfcore" / "plugins";
}

std::vector<fs::path> PluginRegistry::default_search_path(const std::vector<std::string> &config_paths) {
  std::vector<fs::path> dirs = {builtin_dir()};
  if (const char *env = std::getenv("ZFCORE_PLUGIN_PATH")) {
    std::stringstream stream(env);
    std::string dir;
    while (std::getline(stream, dir, ':'))
      if (!dir.empty()) dirs.emplace_back(dir);
  }
  for (const std::string &dir : config_paths) dirs.emplace_back(dir);
  return dirs;
}

const PluginFile *PluginRegistry::load(const fs::path &path, std::string *reason) {
  std::error_code ec;
  fs::path canonical = fs::weakly_canonical(path, ec);
  std::string key = (ec ? path : canonical).string();
  if (auto it = loaded_.find(key); it != loaded_.end()) return &it->second;
  auto reject = [&](const std::string &why) -> const PluginFile * {
    rejected_[key] = why;
    if (reason) *reason = why;
    return nullptr;
  };
  if (auto it = rejected_.find(key); it != rejected_.end()) return reject(it->second);

  auto file_name = parse_file_name(path);
  if (!file_name) return reject("not a plugin file name (expected zf-KIND-NAME.so)");
  if (!kind_from_name(file_name->kind))
    return reject(format("unknown kind '%s' in the file name (expected stage, offload, optimizer or selector)",
                         file_name->kind.c_str()));

  if (std::string problem = regular_file_problem(path.string()); !problem.empty())
    return reject("cannot be loaded: " + problem);
  // Libraries are never unloaded: worker threads or callbacks could still run their code.
  void *library = dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (!library) {
    const char *why = dlerror();
    return reject(format("cannot be loaded: %s", why ? why : "unknown reason"));
  }
  void *negotiate_entry = dlsym(library, ZF_NEGOTIATE_SYMBOL);
  if (!negotiate_entry) return reject("not a zfcore plugin: it exports no " ZF_NEGOTIATE_SYMBOL " entry");
  if (!is_function(negotiate_entry)) return reject("it exports " ZF_NEGOTIATE_SYMBOL " as data, not as a function");
  auto negotiate = reinterpret_cast<uint32_t (*)(uint32_t)>(negotiate_entry);
  uint32_t agreed = negotiate(ZF_ABI_VERSION);
  if (agreed == 0)
    return reject(format("refused ABI negotiation with this zfcore (ABI %s)", version_text(ZF_ABI_VERSION).c_str()));
  if (ZF_ABI_MAJOR_OF(agreed) < ZF_ABI_MAJOR_OF(kMinimumAbiVersion) || agreed < kMinimumAbiVersion)
    return reject(format("ABI too old: the plugin speaks %s, this zfcore needs %s or newer; rebuild it against "
                         "the current zfcore SDK",
                         version_text(agreed).c_str(), version_text(kMinimumAbiVersion).c_str()));
  if (ZF_ABI_MAJOR_OF(agreed) > ZF_ABI_MAJOR || agreed > ZF_ABI_VERSION)
    return reject(format("ABI too new: the plugin speaks %s, this zfcore speaks %s; upgrade zfcore or build the "
                         "plugin against this zfcore's SDK",
                         version_text(agreed).c_str(), version_text(ZF_ABI_VERSION).c_str()));
  void *describe_entry = dlsym(library, ZF_DESCRIBE_SYMBOL);
  if (!describe_entry) return reject("missing entry: it exports " ZF_NEGOTIATE_SYMBOL " but not " ZF_DESCRIBE_SYMBOL);
  if (!is_function(describe_entry)) return reject("it exports " ZF_DESCRIBE_SYMBOL " as data, not as a function");
  const zf_descriptor *d = reinterpret_cast<const zf_descriptor *(*)()>(describe_entry)();
  if (!d) return reject(ZF_DESCRIBE_SYMBOL " returned NULL");
  if (!readable(d, sizeof(uint32_t)) || !readable(d, std::min<size_t>(d->struct_size, sizeof(zf_descriptor))))
    return reject(ZF_DESCRIBE_SYMBOL " returned a pointer to memory that cannot be read");
  if (d->struct_size < sizeof(zf_descriptor))
    return reject(format("descriptor too short: %u bytes, ABI %s needs at least %zu", d->struct_size,
                         version_text(agreed).c_str(), sizeof(zf_descriptor)));
  if (!d->name || !readable_string(d->name) || !*d->name) return reject("descriptor has no name (or a wild pointer)");
  for (const char *text : {d->version, d->description})
    if (text && !readable_string(text)) return reject("descriptor's version or description is a wild pointer");
  if (!kind_from_name(kind_name(d->kind)))
    return reject(format("descriptor declares unknown kind %d", d->kind));
  if (file_name->kind != kind_name(d->kind))
    return reject(format("wrong kind: the file name says %s, the descriptor says %s", file_name->kind.c_str(),
                         kind_name(d->kind)));
  if (file_name->name != d->name)
    return reject(format("name mismatch: the descriptor says '%s', the file name says '%s'", d->name,
                         file_name->name.c_str()));
  KindTable table = kind_table(d->kind);
  if (!d->api) return reject(format("descriptor has no %s function table", kind_name(d->kind)));
  if (!readable(d->api, sizeof(uint32_t)) || !readable(d->api, *static_cast<const uint32_t *>(d->api)))
    return reject(format("descriptor's %s function table is a wild pointer", kind_name(d->kind)));
  uint32_t api_size = *static_cast<const uint32_t *>(d->api);
  if (api_size < table.minimum_size)
    return reject(format("%s function table too short: %u bytes, ABI %s needs at least %zu", kind_name(d->kind),
                         api_size, version_text(agreed).c_str(), table.minimum_size));
  for (const auto &[entry, offset] : table.required)
    if (!wired(d->api, offset)) return reject(format("missing entry: required '%s' is NULL", entry));
  if (std::string why = check_capabilities(*d); !why.empty()) return reject(why);
  if (std::string why = check_params(*d); !why.empty()) return reject(why);

  PluginFile &file = loaded_[key];
  file.path = path;
  file.descriptor = d;
  file.abi_version = agreed;
  return &file;
}

void PluginRegistry::scan(std::vector<const PluginFile *> &found, std::vector<Rejection> &rejected) {
  std::map<std::string, fs::path> first;  // "kind-name" -> path
  for (const fs::path &dir : search_path_) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> files;
    for (const auto &entry : fs::directory_iterator(dir, ec)) {
      std::string base = entry.path().filename().string();
      if (base.rfind("zf-", 0) == 0 && entry.path().extension() == ".so") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path &path : files) {
      // Every file on the path is loaded here, wanted or not: try each in a child process first,
      // so that one that crashes or hangs while loading is listed instead of ending zfcore.
      std::string reason = probe_in_child(path);
      if (!reason.empty()) {
        rejected.push_back({path, reason});
        continue;
      }
      const PluginFile *file = load(path, &reason);
      if (!file) {
        rejected.push_back({path, reason});
        continue;
      }
      std::string id = std::string(kind_name(file->descriptor->kind)) + "-" + file->descriptor->name;
      if (auto it = first.find(id); it != first.end()) {
        rejected.push_back({path, "shadowed by " + it->second.string() + " (earlier in the search path)"});
        continue;
      }
      first[id] = path;
      found.push_back(file);
    }
  }
}

bool PluginRegistry::loads_in_child(const fs::path &path) {
  pid_t child = fork();
  if (child < 0) return true;  // cannot tell: list it
  if (child == 0) {
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    _exit(load(path, nullptr) ? 0 : 1);
  }
  for (int waited_ms = 0; waited_ms < 3000; waited_ms += 10) {  // a plugin loads in milliseconds
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    usleep(10000);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return false;
}

const PluginFile &PluginRegistry::find(zf_kind kind, const std::string &name) {
  std::string file_name = format("zf-%s-%s.so", kind_name(kind), name.c_str());
  for (const fs::path &dir : search_path_) {
    std::error_code ec;
    fs::path path = dir / file_name;
    if (!fs::exists(path, ec)) continue;
    std::string reason;
    const PluginFile *file = load(path, &reason);
    if (!file) throw Error(format("%s plugin '%s' (%s) was rejected: %s", kind_name(kind), name.c_str(),
                                  path.c_str(), reason.c_str()));
    return *file;
  }
  // The names on offer: the files of this kind that load, each tried in a child process (loading
  // them here would run code the user never asked for, in this process). The nearest name is
  // suggested among all the files: a broken one then says why when asked for.
  std::vector<std::string> names, files;
  int broken = 0;
  for (const fs::path &dir : search_path_) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    for (const auto &entry : fs::directory_iterator(dir, ec)) {
      auto parsed = parse_file_name(entry.path());
      if (!parsed || parsed->kind != kind_name(kind) ||
          std::find(files.begin(), files.end(), parsed->name) != files.end())
        continue;
      files.push_back(parsed->name);
      if (loads_in_child(entry.path())) names.push_back(parsed->name);
      else ++broken;
    }
  }
  std::sort(names.begin(), names.end());
  std::string dirs;
  for (const fs::path &dir : search_path_) dirs += (dirs.empty() ? "" : ", ") + dir.string();
  std::string hint = suggest(name, files);
  std::string available;
  for (const std::string &n : names) available += (available.empty() ? "" : ", ") + n;
  std::string failed = broken ? format(" (%d more file%s of this kind failed to load: zfcore plugins says why)", broken,
                                      broken == 1 ? "" : "s")
                               : "";
  throw Error(format("no %s plugin named '%s' (looked for %s in: %s); %s%savailable: %s%s", kind_name(kind),
                     name.c_str(), file_name.c_str(), dirs.c_str(), hint.c_str(), hint.empty() ? "" : " ",
                     available.empty() ? "none" : available.c_str(), failed.c_str()));
}

}  // namespace zf
