// Two hosts, tested on one machine. Each host is a network namespace with a hostname of its own, a
// veth pair is the network between them, and mpirun starts the second host's ranks through an rsh
// agent that enters its namespace (netns_rsh.sh), as it would ssh to another machine. A 2 x 2 job
// must train as a 4-rank job on one host does (the oracle: its param_digest), see per-host facts
// (local ranks, core sets, the ranks the memory plan shares a host with), send its collectives
// over the link, and end every rank within 60 s with a message when the second host vanishes
// from the network. Skipped (exit code 4) where network namespaces cannot be made.
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

using namespace zf;

namespace {

const char *const kAddressA = "10.231.7.1", *const kAddressB = "10.231.7.2";

int count_of(const std::string &text, const std::string &what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Two namespaces joined by a veth pair, removed (with whatever still runs in them) at the end.
class TwoHosts {
 public:
  TwoHosts() {
    const std::string id = std::to_string(getpid());
    a_ = "zfhostA" + id, b_ = "zfhostB" + id, link_a_ = "zfa" + id, link_b_ = "zfb" + id;
    test::Outcome made = test::run_command(
        "ip netns add " + a_ + " && ip netns add " + b_ + " && ip link add " + link_a_ + " type veth peer name " +
        link_b_ + " && ip link set " + link_a_ + " netns " + a_ + " && ip link set " + link_b_ + " netns " + b_ +
        " && ip -n " + a_ + " addr add " + kAddressA + "/24 dev " + link_a_ + " && ip -n " + b_ + " addr add " +
        kAddressB + "/24 dev " + link_b_ + " && ip -n " + a_ + " link set " + link_a_ + " up && ip -n " + b_ +
        " link set " + link_b_ + " up && ip -n " + a_ + " link set lo up && ip -n " + b_ + " link set lo up" +
        " && unshare --uts true");
    if (made.exit_code != 0) {
      remove();
      std::printf("skipped: cannot make network namespaces here (needs root and ip netns): %s\n",
                  made.output.c_str());
      std::fflush(stdout);
      std::_Exit(4);
    }
  }
  ~TwoHosts() { remove(); }
  TwoHosts(const TwoHosts &) = delete;
  TwoHosts &operator=(const TwoHosts &) = delete;

  // `zfcore args` as 2 ranks on each host, mpirun started on host A; `mca` is added to its flags.
  std::string launch(const std::string &args, const std::string &mca = "") const {
    const std::string hosts = std::string(kAddressA) + "=" + a_ + " " + kAddressB + "=" + b_;
    const std::string mpirun = std::string(ZF_TEST_MPIEXEC) + " --allow-run-as-root --oversubscribe --bind-to none" +
                               " --host " + kAddressA + ":2," + kAddressB + ":2 -np 4 --mca plm_rsh_agent " +
                               ZF_NETNS_RSH + " --mca oob_tcp_if_include 10.231.7.0/24 --mca btl tcp,vader,self" +
                               " --mca btl_tcp_if_include 10.231.7.0/24 " +
                               (std::getenv("ZF_COMM_TIMEOUT_S") ? "-x ZF_COMM_TIMEOUT_S " : "") + mca + " ";
    return "ZF_NETNS_HOSTS='" + hosts + "' OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ip netns exec " +
           a_ + " unshare --uts sh -c 'hostname " + a_ + " && exec timeout 150 " + mpirun + test::zfcore() + " " +
           args + "'";
  }

  // Bytes through host A's end of the link so far, both directions.
  uint64_t link_bytes() const {
    std::string base = "/sys/class/net/" + link_a_ + "/statistics/";
    test::Outcome read = test::run_command("ip netns exec " + a_ + " sh -c 'cat " + base + "rx_bytes " + base +
                                           "tx_bytes'");
    uint64_t rx = 0, tx = 0;
    std::sscanf(read.output.c_str(), "%lu %lu", &rx, &tx);
    return rx + tx;
  }

  // Host B drops off the network: nothing is closed, nothing answers any more.
  void cut() const { test::run_command("ip -n " + b_ + " link set " + link_b_ + " down"); }

 private:
  void remove() const {
    for (const std::string &ns : {a_, b_})
      test::run_command("ip netns pids " + ns + " 2>/dev/null | xargs -r kill -9; ip netns del " + ns + " 2>/dev/null");
  }

  std::string a_, b_, link_a_, link_b_;
};

std::string train_args(const std::string &dir, int steps) {
  return "run " + test::source_dir() + "/examples/quickstart.toml --set run.output_dir=" + dir +
         " --set train.steps=" + std::to_string(steps) +
         " --set train.eval_every=0 --set sample.tokens=0 --set stage.plugin=zero2 --set run.progress=off" +
         " --set run.threads=1";
}

// A process whose command line starts with `program` (its first word ends so) and names `dir`:
// the ranks (zfcore) or the launcher (mpirun), not the shells around them.
bool running(const std::string &program, const std::string &dir) {
  return test::run_command("pgrep -f -- '^[^ ]*" + program + " .*" + dir + "' >/dev/null").exit_code == 0;
}

// A long run of the two hosts started in the background; once it trains, host B is cut off. The
// seconds until no rank and (with `until_launcher_ends`) no mpirun of it is left, at most 90.
double seconds_to_end_after_cut(const TwoHosts &hosts, const std::string &dir, const std::string &mca,
                                const std::string &log, bool until_launcher_ends) {
  test::run_command("(" + hosts.launch(train_args(dir, 1000000), mca) + ") >" + log + " 2>&1 &");
  for (int i = 0; i < 600; ++i) {  // trains: two steps written
    std::ifstream steps(dir + "/steps.jsonl");
    std::string line;
    int lines = 0;
    while (std::getline(steps, line)) ++lines;
    if (lines >= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  hosts.cut();
  auto cut_at = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - cut_at).count(); };
  while (elapsed() < 90 && (running("zfcore", dir) || (until_launcher_ends && running("mpirun", dir))))
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  return elapsed();
}

}  // namespace

TEST_CASE("a 2 x 2 job on two hosts trains as 4 ranks on one host do, with per-host ranks and memory",
          "[hosts][mpi]") {
  TwoHosts hosts;
  const uint64_t before = hosts.link_bytes();
  const std::string two = test::scratch_dir("hosts_2x2"), one = test::scratch_dir("hosts_1x4");
  test::Outcome across = test::run_command(hosts.launch(train_args(two, 6)));
  const uint64_t crossed = hosts.link_bytes() - before;
  INFO(across.output);
  REQUIRE(across.exit_code == 0);
  test::Outcome alone = test::run_command("timeout 120 " + test::mpirun(4) + test::zfcore() + " " + train_args(one, 6));
  INFO(alone.output);
  REQUIRE(alone.exit_code == 0);

  const std::string digest = test::json_field(test::read_text(two + "/summary.json"), "param_digest");
  CHECK(digest.size() == 16);
  CHECK(digest == test::json_field(test::read_text(one + "/summary.json"), "param_digest"));
  // Ranks 0, 1 on host A and 2, 3 on host B: local ranks and core sets count per host.
  for (int rank = 0; rank < 4; ++rank)
    CHECK_THAT(across.output, Catch::Contains("[zfcore rank " + std::to_string(rank) + "] info: cores: local rank " +
                                              std::to_string(rank % 2) + " of 2: training thread on " +
                                              std::to_string(rank % 2)));
  // The host memory limit is shared by the ranks of one host, not of the job.
  CHECK_THAT(across.output, Catch::Contains("for 2 rank(s)"));
  CHECK_THAT(alone.output, Catch::Contains("for 4 rank(s)"));
  // zero2's gradient reduce-scatter and parameter all-gather cross the link every step: at least
  // a quarter of the fp32 parameters each way per step.
  std::smatch found;
  REQUIRE(std::regex_search(across.output, found, std::regex("model gpt2, ([0-9]+) parameters")));
  const uint64_t parameters = std::stoull(found[1]);
  CHECK(crossed >= 6 * parameters * 4 / 2);
}

TEST_CASE("a host that drops off the network ends every rank within 60 s, with a message", "[hosts][mpi]") {
  SECTION("zfcore's collective timeout (ZF_COMM_TIMEOUT_S) ends the ranks on both hosts") {
    TwoHosts hosts;
    const std::string dir = test::scratch_dir("hosts_cut_timeout"), log = dir + ".log";
    setenv("ZF_COMM_TIMEOUT_S", "10", 1);
    const double seconds = seconds_to_end_after_cut(hosts, dir, "", log, /*until_launcher_ends=*/false);
    unsetenv("ZF_COMM_TIMEOUT_S");
    const std::string output = test::read_text(log);
    INFO(output);
    CHECK(seconds < 60);
    // The first of host A's ranks to give up says why; mpirun then ends the rest (it may do so
    // before the second one's own timeout fires).
    CHECK(count_of(output, "did not finish within 10 s (run.comm_timeout_s)") >= 1);
  }
  SECTION("with the launch flags the README gives for several hosts, mpirun ends the job") {
    TwoHosts hosts;
    const std::string dir = test::scratch_dir("hosts_cut_keepalive"), log = dir + ".log";
    const double seconds = seconds_to_end_after_cut(
        hosts, dir, "--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3",
        log, /*until_launcher_ends=*/true);
    const std::string output = test::read_text(log);
    INFO(output);
    CHECK(seconds < 60);
    CHECK_THAT(output, Catch::Contains("lost communication with a remote daemon"));
  }
}
