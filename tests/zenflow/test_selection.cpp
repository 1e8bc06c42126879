// The pieces of ZenFlow that are pure functions: which shard elements a column mask sends to the
// device and to the CPU, and when zen-auto calls the CPU update.
#include "update/column_selection.hpp"

#include <catch2/catch.hpp>

using namespace zf;

namespace {

// Two column-contiguous 4 x 3 weights (12 elements each), a bias of 4 between them, padded to 8.
struct TinyLayout {
  zf_segment segments[3] = {
      {"w0", 0, 12, 4, 3, 0, ZF_SEGMENT_MATRIX | ZF_SEGMENT_COLUMN_CONTIGUOUS},
      {"b0", 16, 4, 4, 1, 0, ZF_SEGMENT_NO_DECAY},
      {"w1", 24, 12, 4, 3, 1, ZF_SEGMENT_MATRIX | ZF_SEGMENT_COLUMN_CONTIGUOUS},
  };
  zf_layout layout{};
  TinyLayout() {
    layout.struct_size = sizeof layout;
    layout.segment_count = 3;
    layout.segments = segments;
    layout.numel = 36;
  }
};

// Element i of the shard -> 'd' (device), 'h' (host), '.' (neither).
std::string owners(const Selection &s, uint64_t numel) {
  std::string out(numel, '.');
  for (const auto &r : s.device)
    for (uint64_t i = r.begin; i < r.end; ++i) out[i] = out[i] == '.' ? 'd' : '!';
  for (const auto &r : s.host)
    for (uint64_t i = r.begin; i < r.end; ++i) out[i] = out[i] == '.' ? 'h' : '!';
  return out;
}

}  // namespace

TEST_CASE("a column mask sends whole columns and every 1-D parameter to the device, the rest to the CPU",
          "[zenflow]") {
  TinyLayout t;
  REQUIRE(column_count(t.layout) == 6);
  // w0 column 1 and w1 column 2 selected.
  Selection s = make_selection(t.layout, 0, 36, {0, 1, 0, 0, 0, 1});
  //                     w0: c0  c1  c2  pad b0 + pad   w1: c0 c1  c2
  CHECK(owners(s, 36) == "hhhh" "dddd" "hhhh" "hhhh" "dddddddd" "hhhhhhhh" "dddd");
  CHECK(s.device_numel == 16);
  CHECK(s.device.back().group == 0);
  // A shard [6, 30) cuts w0's column 1 and w1's column 1: each part goes where its column goes.
  Selection cut = make_selection(t.layout, 6, 30, {0, 1, 0, 0, 0, 1});
  CHECK(owners(cut, 24) == "dd" "hhhh" "hhhh" "dddddddd" "hhhh" "hh");
}

TEST_CASE("zen-auto calls the CPU update when most weights' accumulated other columns outweigh the selected",
          "[zenflow]") {
  TinyLayout t;
  std::vector<uint8_t> mask = {0, 1, 0, 0, 0, 1};
  std::vector<float> step = {0, 10, 0, 0, 0, 10};
  // Accumulated mass of the other columns: 1 + 1 < 10 in both weights: not yet.
  CHECK_FALSE(auto_update_due(t.layout, mask, step, {1, 99, 1, 1, 1, 99}, 0.99));
  // One weight over, one under: half the weights, below 0.99 but enough for 0.5.
  CHECK_FALSE(auto_update_due(t.layout, mask, step, {6, 0, 6, 1, 1, 0}, 0.99));
  CHECK(auto_update_due(t.layout, mask, step, {6, 0, 6, 1, 1, 0}, 0.5));
  // Both over.
  CHECK(auto_update_due(t.layout, mask, step, {6, 0, 6, 9, 2, 0}, 0.99));
}
