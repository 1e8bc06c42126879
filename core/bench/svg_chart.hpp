// svg_chart.hpp: the three kinds of chart the suite's HTML report draws, as inline SVG text (no
// script, no library): horizontal bars stacked or grouped per configuration, and lines over steps.
// Every drawn datum has class "mark" and a <title> (the browser's tooltip); every configuration's
// name is a <text class="label">. A configuration without data (OOM, error) is a label with its
// status where its bars would be.
#pragma once

#include <string>
#include <vector>

namespace zf::svg {

// Text safe inside HTML and SVG elements and attributes.
std::string escape(const std::string &text);

// One configuration's bars: a value per series, or a note (its status) instead.
struct Bars {
  std::string label;
  std::vector<double> values;  // one per series
  std::string note;            // shown instead of bars when not empty
};

struct Axis {
  std::string unit;            // "ms", "MiB", ...
  double scale = 1;            // values are divided by this for the ticks and tooltips
};

// Horizontal bars, the series of a configuration end to end (a time breakdown).
std::string stacked_bars(const std::string &id, const std::vector<std::string> &series, const std::vector<Bars> &bars,
                         const Axis &axis);

// Horizontal bars, the series of a configuration one under the other (memory per tier); a zero
// value is no bar ("-" in its tooltip).
std::string grouped_bars(const std::string &id, const std::vector<std::string> &series, const std::vector<Bars> &bars,
                         const Axis &axis);

// One line per configuration over steps 1..N; the first `shaded` steps on a grey band (warm-up);
// steps listed in `marked` get a dot (ZenFlow's boundary steps).
struct Line {
  std::string label;
  std::vector<double> values;
  std::vector<size_t> marked;  // 0-based step indices
  std::vector<std::string> marked_notes;  // tooltip text per marked step
};
std::string lines(const std::string &id, const std::vector<Line> &series, size_t shaded, const Axis &axis);

}  // namespace zf::svg
