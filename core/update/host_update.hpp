// host_update.hpp: the CPU side of an offloaded update. The offload plugin copies the shard's
// gradients down bucket by bucket on its own streams; the optimizer updates each bucket on the
// host (on one update thread when there is one, in the order of update_queue.hpp) and the plugin
// uploads its new parameters. The first failure on the update thread is rethrown on the training
// thread, which stops the thread taking work.
#pragma once

#include "update/update_buffers.hpp"
#include "update/update_queue.hpp"

#include <memory>
#include <utility>
#include <vector>

namespace zf {

// What the update thread works on: written by the training thread only while no job runs.
struct HostJob {
  std::vector<zf_optimizer_range> ranges;  // shard elements the CPU optimizer updates
  std::vector<zf_optimizer_group> groups;
  int64_t step = 0;                        // the optimizer's step count (bias correction)
  float scale = 1;                         // gradient scale (known once the thread may start)
  torch::Tensor grads;                     // shard gradients on the model's tier (copied down)
  torch::Tensor upload_to;                 // where the updated parameters go (model's tier)
  uint64_t upload_base = 0;                // upload_to's element 0 is shard element upload_base (ZenFlow's
                                           // staging holds one group; a job that writes in place keeps 0)
  void *upload_after = nullptr;            // event the first upload waits for (NULL: none)
  void *grads_ready = nullptr;             // a job: the copies down wait for it (NULL on CPU runs)
  uint64_t begin = 0, end = 0;             // the shard elements copied down and up
};

class HostUpdate {
 public:
  // threaded: buckets go to an update thread (overlap, ZenFlow); else each is updated when handed over.
  HostUpdate(UpdateBuffers &buffers, bool threaded);
  ~HostUpdate();
  HostUpdate(const HostUpdate &) = delete;
  HostUpdate &operator=(const HostUpdate &) = delete;

  // A step's update of job.ranges inside [job.begin, job.end): begin with the job, then hand_over
  // ranges of the shard (shard elements) whose gradients are final, ordered after `stream`; after
  // the backward, hand_over_rest(scale) hands over the rest of [job.begin, job.end) with the
  // gradient scale (scale_known = false holds the update thread until then).
  void start_step(HostJob job, bool scale_known);
  void hand_over(uint64_t begin, uint64_t end, void *stream);
  void hand_over_rest(float scale);
  // A job over [job.begin, job.end) that runs across steps (ZenFlow): the update thread issues
  // its copies down after job.grads_ready; at most one is in flight. Its updates wait for
  // release() (or a drain): the training thread launches the next forward first, which the
  // update thread's memory traffic and CUDA calls slowed by up to 40% (docs/zenflow.md).
  void start_job(HostJob job);
  void release();
  void *job_copies_done();  // an event after the job's copies down (waits until they are issued)

  bool threaded() const { return thread_ != nullptr; }
  bool job_pending() const { return pending_ && job_; }
  // Layout elements [begin, end) are about to be read by the compute stream: while a step's
  // update is pending, wait until their upload started and order the compute stream after it.
  void ready_for(uint64_t begin, uint64_t end);
  void drain();        // until everything handed over is updated and uploaded (stream order)
  void finish_step();  // drain, unless what is pending is a job
  void *transfers_done(int32_t direction);  // an event after the transfers of ZF_TRANSFER_*
  uint64_t bytes_down() const { return bytes_down_; }
  uint64_t bytes_up() const { return bytes_up_; }
  // Host memory the CPU optimizer streamed: per element updated, the fp32 master and each state
  // tensor read and written, the gradient read, the compute-precision parameter written.
  uint64_t bytes_streamed() const { return bytes_streamed_; }

 private:
  class UpdateThread;
  using Bucket = UpdateBucket;
  void issue_copies();                   // on the update thread, for a job
  void update_bucket(const Bucket &bucket);  // on the update thread
  void step_on_host(std::vector<zf_optimizer_range> ranges, uint64_t base, uint64_t end);
  uint64_t bucket_end(uint64_t lo, uint64_t end) const;  // the grid of bucket_numel
  void wait_for_uploads();  // the compute stream waits for every upload started so far

  UpdateBuffers &buffers_;
  std::unique_ptr<UpdateThread> thread_;
  HostJob host_job_;
  bool job_ = false;                          // host_job_ is a job (start_job), not a step's
  bool scale_known_ = true;                   // a step's: the scale came with start_step
  bool pending_ = false;                      // handed over and not drained
  void *copy_order_ = nullptr;                // a job: the stream the update thread orders its copies on
  std::vector<void *> landed_;                // a job: per bucket, an event after its copy down
  std::vector<std::pair<uint64_t, uint64_t>> handed_;  // shard ranges handed over this step
  std::vector<Bucket> buckets_;                       // handed over this step, in order
  uint64_t bytes_down_ = 0, bytes_up_ = 0;  // gradients copied down, parameters copied up
  uint64_t bytes_streamed_ = 0;             // bytes_streamed(), on the update thread
};

}  // namespace zf
