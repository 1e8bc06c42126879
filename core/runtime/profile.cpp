#include "runtime/profile.hpp"

#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstdlib>

namespace zf {

StepProfile::StepProfile() {
  const char *value = std::getenv("ZF_PROFILE");
  if (value == nullptr || *value == '\0') return;
  std::string text = value;
  // FILE.json[:FIRST[:COUNT]]: the numbers after the last colons that follow ".json".
  const size_t json = text.rfind(".json");
  ZF_REQUIRE(json != std::string::npos, "ZF_PROFILE=%s: give FILE.json[:FIRST[:COUNT]]", value);
  path_ = text.substr(0, json + 5);
  std::string rest = text.substr(json + 5);
  char *end = nullptr;
  if (!rest.empty() && rest[0] == ':') first_ = std::strtoll(rest.c_str() + 1, &end, 10), rest = end;
  if (!rest.empty() && rest[0] == ':') count_ = std::strtoll(rest.c_str() + 1, &end, 10), rest = end;
  ZF_REQUIRE(rest.empty() && first_ >= 1 && count_ >= 1, "ZF_PROFILE=%s: give FILE.json[:FIRST[:COUNT]], FIRST and "
             "COUNT at least 1", value);
}

StepProfile::~StepProfile() {
  if (!running_) return;
  try {
    torch::autograd::profiler::disableProfiler()->save(path_);
  } catch (const std::exception &) {  // a trace is not worth a second error at the end of a run
  }
}

void StepProfile::at_step(int64_t step) {
  if (running_ && step == first_ + count_) {
    running_ = false;
    torch::autograd::profiler::disableProfiler()->save(path_);
    log_info(format("ZF_PROFILE: steps %lld to %lld traced in %s", (long long)first_, (long long)step - 1, path_.c_str()));
  }
  if (path_.empty() || step != first_) return;
  namespace profiler = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  std::set<ActivityType> activities{ActivityType::CPU};
#if ZF_WITH_CUDA
  activities.insert(ActivityType::CUDA);
#endif
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  running_ = true;
}

}  // namespace zf
