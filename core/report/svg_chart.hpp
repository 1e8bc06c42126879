// svg_chart.hpp: the charts of zfcore's HTML reports (a run's report.html, the bench suites'
// reports), as inline SVG text (no script, no library): horizontal bars stacked or grouped per
// configuration, and lines over steps or seconds; and the self-contained page around them.
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

// One line per configuration: its values over steps 1..N, or over `x` where given (held-out loss
// at its evaluation steps, or against seconds of training). Points listed in `marked` get a dot
// with its note as tooltip (ZenFlow's boundary steps; the evaluation points).
struct Line {
  std::string label;
  std::vector<double> values;
  std::vector<size_t> marked;  // 0-based indices into values
  std::vector<std::string> marked_notes;  // tooltip text per marked point
  std::vector<double> x;       // one per value, from 0 up; empty: steps 1..N
};
struct LineAxes {
  Axis y;
  std::string x_unit = "step";
  size_t shaded = 0;               // the first steps on a grey band (warm-up); lines without x only
  bool y_from_zero = true;         // false: the y axis spans the values only (loss curves)
  double reference = -1;           // >= 0: a dashed horizontal line there (a target), in y's unit
  std::string reference_label;
  std::string marker = "boundary"; // class of the dots: "boundary" (steps), "point" (evaluations)
};
std::string lines(const std::string &id, const std::vector<Line> &series, const LineAxes &axes);

// A whole HTML page around `body` (markup), self-contained: inline CSS, nothing fetched. A few lines
// of script at its end check that every chart drew something with an area and that no script
// failed, and say so on <body data-report="ok" (or "broken: ...") data-charts="N"> (the report
// tests read that in headless Chromium).
std::string html_page(const std::string &title, const std::string &body);

}  // namespace zf::svg
