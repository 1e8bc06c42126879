// `zfcore estimate`'s GPU peak per rank (the plan's device buffers plus the activations of
// model/activation_estimate.hpp) against the caching allocator's peak of the same config run on a
// GPU: within 10%, with and without activation checkpointing.
#include "gpu_skip.hpp"

#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace zf;

namespace {

// The Qwen2-1.5B shape cut to 4 layers: its 151936-token head weighs like the real model's.
const std::string kShape =
    " --set model.layers=4 --set train.micro_batch=8 --set data.seq_len=512 --set train.steps=3 "
    "--set stage.plugin=zero0 --set optimizer.plugin=gpu_adam";

uint64_t estimated_peak(const std::string &extra) {
  test::Outcome e = test::run_command(test::zfcore() + " estimate --bytes " + test::source_dir() +
                                      "/examples/gpu/qwen2-1.5b-bench.toml" + kShape + extra);
  INFO(e.output);
  REQUIRE(e.exit_code == 0);
  const size_t line = e.output.find("GPU peak per rank");
  REQUIRE(line != std::string::npos);
  const size_t open = e.output.find(" (", e.output.find(" = ", line));
  return std::stoull(e.output.substr(open + 2));
}

uint64_t measured_peak(const std::string &name, const std::string &extra) {
  const std::string dir = test::scratch_dir(name);
  test::Outcome r = test::run_command(test::zfcore() + " run " + test::source_dir() +
                                      "/examples/gpu/qwen2-1.5b-bench.toml" + kShape + extra +
                                      " --set run.output_dir=" + dir);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::string summary = test::read_text(dir + "/summary.json");
  const size_t at = summary.find("\"allocated_peak\"");
  REQUIRE(at != std::string::npos);
  return std::stoull(summary.substr(summary.find(':', at) + 1));
}

}  // namespace

TEST_CASE("zfcore estimate's GPU peak is within 10% of the measured peak with checkpointing off, on and partial",
          "[gpu][memory]") {
  test::require_gpus(1);
  // Off, on for every layer, and on for the first 2 of the 4 (the last 2 keep their activations).
  for (const std::string checkpointing : {"false", "true", "2"}) {
    const std::string extra = " --set model.activation_checkpointing=" + std::string(checkpointing == "false" ? "false" : "true") +
                              (checkpointing == "2" ? " --set model.checkpoint_layers=2" : "");
    const double estimate = double(estimated_peak(extra));
    const double measured = double(measured_peak("gpu_estimate_" + checkpointing, extra));
    INFO("activation checkpointing " << checkpointing << ": estimate " << estimate / (1 << 30) << " GiB, measured "
                                     << measured / (1 << 30) << " GiB");
    CHECK(estimate > 0.9 * measured);
    CHECK(estimate < 1.1 * measured);
  }
}
