// suite_launch.cpp: starts one configuration of a suite in its own process (see suite_launch.hpp).
#include "bench/suite_launch.hpp"

#include "runtime/affinity.hpp"
#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/input.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace zf::bench {
namespace {

namespace fs = std::filesystem;

std::string executable() {
  std::error_code error;
  fs::path self = fs::read_symlink("/proc/self/exe", error);
  ZF_REQUIRE(!error, "cannot find this executable (/proc/self/exe): %s", error.message().c_str());
  return self.string();
}

bool on_path(const std::string &name) {
  const char *path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && access((dir + "/" + name).c_str(), X_OK) == 0) return true;
  return false;
}

// One core per physical core among those this process may use, split into `ranks` shares.
std::vector<std::string> core_shares(int ranks) {
  std::vector<int> cores;
  std::set<std::pair<std::string, std::string>> seen;  // (package, core id)
  for (int cpu : allowed_cores()) {
    std::string topology = format("/sys/devices/system/cpu/cpu%d/topology/", cpu);
    auto key = std::make_pair(read_file(topology + "physical_package_id"), read_file(topology + "core_id"));
    if (key.second.empty() || seen.insert(key).second) cores.push_back(cpu);
  }
  std::vector<std::string> shares(static_cast<size_t>(ranks));
  size_t per = std::max<size_t>(1, cores.size() / size_t(ranks));
  for (int r = 0; r < ranks; ++r)
    for (size_t k = 0; k < per; ++k) {
      int cpu = cores[(size_t(r) * per + k) % cores.size()];
      shares[size_t(r)] += (shares[size_t(r)].empty() ? "" : ",") + std::to_string(cpu);
    }
  return shares;
}

std::vector<std::string> bind_command(const std::string &cores) {
  if (on_path("numactl")) return {"numactl", "--physcpubind=" + cores};
  return {"taskset", "-c", cores};
}

}  // namespace

std::string read_file(const std::string &path) {
  std::string text;
  if (!read_regular_file(path, uint64_t(1) << 30, &text).empty()) return "";  // a FIFO, a device: not read
  return text;
}

// The command line of one row: zfcore run, under mpirun for several ranks, each rank under
// numactl/taskset when the row binds at launch.
std::vector<std::string> row_command(const SuiteOptions &o, const SuiteRow &row, const std::string &base,
                                     const std::vector<std::string> &overrides) {
  std::vector<std::string> zfcore{executable(), "run", base};
  for (const std::string &item : overrides) {
    zfcore.push_back("--set");
    zfcore.push_back(item);
  }
  std::vector<std::string> shares = row.bind_at_launch ? core_shares(o.ranks) : std::vector<std::string>{};
  std::vector<std::string> argv;
  if (o.ranks == 1) {
    if (row.bind_at_launch) argv = bind_command(shares[0]);
    argv.insert(argv.end(), zfcore.begin(), zfcore.end());
    return argv;
  }
  const char *mpiexec = std::getenv("MPIEXEC");
  argv = {mpiexec && *mpiexec ? mpiexec : "mpirun"};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), {"--oversubscribe", "--bind-to", "none"});
  if (!row.bind_at_launch) {
    argv.insert(argv.end(), {"-np", std::to_string(o.ranks)});
    argv.insert(argv.end(), zfcore.begin(), zfcore.end());
    return argv;
  }
  for (int r = 0; r < o.ranks; ++r) {  // one application context per rank, each on its own cores
    if (r > 0) argv.push_back(":");
    argv.insert(argv.end(), {"-np", "1"});
    for (const std::string &word : bind_command(shares[size_t(r)])) argv.push_back(word);
    argv.insert(argv.end(), zfcore.begin(), zfcore.end());
  }
  return argv;
}

Exit spawn(const std::vector<std::string> &argv, const std::string &log_path, double timeout_s) {
  std::vector<char *> args;
  for (const std::string &a : argv) args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  const std::filesystem::path where(log_path);
  int log = Directory::open(where.parent_path().string(), false).create_new(where.filename().string());
  std::fflush(nullptr);
  pid_t pid = fork();
  ZF_REQUIRE(pid >= 0, "cannot start a process: %s", std::strerror(errno));
  if (pid == 0) {
    int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    dup2(log, 1);
    dup2(log, 2);
    signal(SIGPIPE, SIG_DFL);  // zfcore ignores it (cli/main.cpp); what it starts gets the default
    execvp(args[0], args.data());
    dprintf(2, "[zfcore] error: cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(log);
  Exit exit;
  auto started = std::chrono::steady_clock::now();
  int status = 0;
  rusage usage{};
  bool terminated = false;
  while (wait4(pid, &status, WNOHANG, &usage) == 0) {
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (elapsed > timeout_s && !terminated) {
      exit.timed_out = terminated = true;
      kill(pid, SIGTERM);
    } else if (terminated && elapsed > timeout_s + 10) {
      kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  exit.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  exit.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  exit.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  exit.max_rss = uint64_t(usage.ru_maxrss) * 1024;  // kilobytes; the largest of the process and its waited children
  return exit;
}


}  // namespace zf::bench
