// svg_chart.cpp: bar and line charts as SVG text (see svg_chart.hpp). Fixed width, a label column
// sized to the longest configuration name, axis ticks at 1, 2 or 5 times a power of ten.
#include "report/svg_chart.hpp"

#include "runtime/error.hpp"

#include <algorithm>
#include <cmath>

namespace zf::svg {
namespace {

const double kWidth = 900, kRight = 24, kLegend = 28, kAxis = 30;
const char *kColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                         "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

std::string color(size_t i) { return kColors[i % (sizeof kColors / sizeof kColors[0])]; }

// Text width in pixels at the charts' 12px sans-serif, roughly.
double text_width(const std::string &text) { return 7.0 * double(text.size()); }

// Tick spacing for an axis from 0 to max: 1, 2 or 5 times a power of ten, about 5 ticks.
double tick_step(double max) {
  if (max <= 0) return 1;
  double raw = max / 5, power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

std::string label_number(double value) {
  std::string text = format("%.3g", value);
  return std::fabs(value) >= 1000 ? format("%.0f", value) : text;
}

std::string open_svg(const std::string &id, double height, const std::string &title) {
  return format("<svg class=\"chart\" data-chart=\"%s\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
                "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" role=\"img\"><title>%s</title>\n",
                id.c_str(), kWidth, height, kWidth, height, escape(title).c_str());
}

// Coloured squares and names along the top.
std::string legend(const std::vector<std::string> &series) {
  std::string out;
  double x = 8;
  for (size_t i = 0; i < series.size(); ++i) {
    out += format("<rect x=\"%.1f\" y=\"8\" width=\"12\" height=\"12\" fill=\"%s\"/>", x, color(i).c_str());
    out += format("<text x=\"%.1f\" y=\"18\" class=\"legend\">%s</text>\n", x + 16, escape(series[i]).c_str());
    x += 16 + text_width(series[i]) + 18;
  }
  return out;
}

// Vertical grid lines and their values under the plot, [left, right] mapped from [0, max].
std::string x_axis(double left, double right, double top, double bottom, double max, const Axis &axis) {
  std::string out;
  double step = tick_step(max);
  for (double v = 0; v <= max * (1 + 1e-9); v += step) {
    double x = left + (right - left) * v / max;
    out += format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>", x, top, x, bottom);
    out += format("<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">%s</text>\n", x, bottom + 14,
                  label_number(v).c_str());
  }
  out += format("<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%s</text>\n", right, bottom + 27,
                escape(axis.unit).c_str());
  return out;
}

double label_column(const std::vector<Bars> &bars) {
  double widest = 40;
  for (const Bars &b : bars) widest = std::max(widest, text_width(b.label));
  return std::min(widest + 16, 340.0);
}

// The largest value to draw, in the axis's unit.
double axis_max(const std::vector<Bars> &bars, const Axis &axis, bool stacked) {
  double max = 0;
  for (const Bars &b : bars) {
    double total = 0;
    for (double v : b.values) total = stacked ? total + v : std::max(total, v);
    if (b.note.empty()) max = std::max(max, total / axis.scale);
  }
  double step = tick_step(max);
  return max > 0 ? std::ceil(max / step * (1 - 1e-9)) * step : 1;
}

// A bar chart: each configuration a band of `band` pixels, drawn by `draw`.
template <class Draw>
std::string bar_chart(const std::string &id, const std::vector<std::string> &series, const std::vector<Bars> &bars,
                      const Axis &axis, bool stacked, double band, Draw draw) {
  double left = label_column(bars), right = kWidth - kRight, top = kLegend + 8;
  double bottom = top + band * double(std::max<size_t>(bars.size(), 1));
  double max = axis_max(bars, axis, stacked);
  std::string out = open_svg(id, bottom + kAxis, id) + legend(series) + x_axis(left, right, top, bottom, max, axis);
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bars &b = bars[i];
    double y = top + band * double(i);
    out += format("<text x=\"%.1f\" y=\"%.1f\" class=\"label\" text-anchor=\"end\">%s</text>\n", left - 6,
                  y + band / 2 + 4, escape(b.label).c_str());
    if (!b.note.empty()) {
      out += format("<text x=\"%.1f\" y=\"%.1f\" class=\"mark note\">%s</text>\n", left + 6, y + band / 2 + 4,
                    escape(b.note).c_str());
      continue;
    }
    out += draw(b, y, [&](double value) { return (right - left) * value / axis.scale / max; }, left);
  }
  if (bars.empty())
    out += format("<text x=\"%.1f\" y=\"%.1f\" class=\"mark note\">no configuration</text>", left + 6, top + 16);
  return out + "</svg>\n";
}

std::string bar(double x, double y, double width, double height, size_t series, const std::string &tooltip) {
  return format("<rect class=\"mark\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"><title>%s</title>"
                "</rect>\n", x, y, std::max(width, 0.0), height, color(series).c_str(), escape(tooltip).c_str());
}

}  // namespace

std::string escape(const std::string &text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string stacked_bars(const std::string &id, const std::vector<std::string> &series, const std::vector<Bars> &bars,
                         const Axis &axis) {
  return bar_chart(id, series, bars, axis, true, 24, [&](const Bars &b, double y, auto width, double left) {
    std::string out;
    double x = left, total = 0;
    for (size_t s = 0; s < b.values.size(); ++s) {
      double w = width(b.values[s]);
      total += b.values[s];
      out += bar(x, y + 4, w, 16, s,
                 format("%s: %s %s %s", b.label.c_str(), series[s].c_str(),
                        label_number(b.values[s] / axis.scale).c_str(), axis.unit.c_str()));
      x += w;
    }
    return out + format("<text x=\"%.1f\" y=\"%.1f\" class=\"tick\">%s</text>\n", x + 4, y + 16,
                        label_number(total / axis.scale).c_str());
  });
}

std::string grouped_bars(const std::string &id, const std::vector<std::string> &series, const std::vector<Bars> &bars,
                         const Axis &axis) {
  double band = 8 * double(series.size()) + 10;
  return bar_chart(id, series, bars, axis, false, band, [&](const Bars &b, double y, auto width, double left) {
    std::string out;
    for (size_t s = 0; s < b.values.size(); ++s) {
      std::string value = b.values[s] > 0 ? label_number(b.values[s] / axis.scale) + " " + axis.unit : "-";
      out += bar(left, y + 5 + 8 * double(s), width(b.values[s]), 7, s,
                 b.label + ": " + series[s] + " " + value);
    }
    return out;
  });
}

std::string lines(const std::string &id, const std::vector<Line> &series, const LineAxes &axes) {
  const Axis &axis = axes.y;
  // x: step indices 1..steps, or the lines' own x from 0 to x_max.
  size_t steps = 1;
  double x_max = 0, lo = 1e300, hi = -1e300, widest = 0;
  bool with_x = false;
  for (const Line &l : series) {
    steps = std::max(steps, l.values.size());
    with_x = with_x || !l.x.empty();
    for (double x : l.x) x_max = std::max(x_max, x);
    for (double v : l.values) lo = std::min(lo, v / axis.scale), hi = std::max(hi, v / axis.scale);
    widest = std::max(widest, text_width(l.label) + 26);
  }
  if (axes.reference >= 0) lo = std::min(lo, axes.reference), hi = std::max(hi, axes.reference);
  if (hi < lo) lo = hi = 0;  // nothing to draw
  if (axes.y_from_zero) lo = 0;
  double step = tick_step(hi - lo > 0 ? hi - lo : std::max(hi, 1.0));
  lo = std::floor(lo / step * (1 + 1e-9)) * step;
  hi = std::max(std::ceil(hi / step * (1 - 1e-9)) * step, lo + step);
  double x_step = tick_step(x_max);
  x_max = x_max > 0 ? std::ceil(x_max / x_step * (1 - 1e-9)) * x_step : 1;

  size_t per_row = std::max<size_t>(1, size_t(kWidth / std::max(widest, 1.0)));
  double left = 56, right = kWidth - kRight, top = 26, bottom = 306;  // the y unit above the plot
  double legend_top = bottom + kAxis + 8;
  double height = legend_top + 18 * double((series.size() + per_row - 1) / per_row) + 6;
  auto x_at = [&](const Line &l, size_t i) {
    if (with_x) return left + (right - left) * (i < l.x.size() ? l.x[i] : 0) / x_max;
    return left + (right - left) * (steps > 1 ? double(i) / double(steps - 1) : 0.5);
  };
  auto y_of = [&](double v) { return bottom - (bottom - top) * (v - lo) / (hi - lo); };

  std::string out = open_svg(id, height, id);
  if (axes.shaded > 0 && !with_x)
    out += format("<rect class=\"warmup\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"><title>warm-up steps, "
                  "left out of the figures</title></rect>\n", left, top,
                  x_at(Line{}, std::min(axes.shaded, steps) - 1) - left + 1, bottom - top);
  for (double v = lo; v <= hi * (1 + 1e-9) + 1e-12; v += step) {
    out += format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>", left, y_of(v), right, y_of(v));
    out += format("<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%s</text>\n", left - 4, y_of(v) + 4,
                  label_number(v).c_str());
  }
  if (with_x) {
    for (double v = 0; v <= x_max * (1 + 1e-9); v += x_step)
      out += format("<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">%s</text>\n",
                    left + (right - left) * v / x_max, bottom + 14, label_number(v).c_str());
  } else {
    size_t every = std::max<size_t>(1, steps / 10);
    for (size_t i = 0; i < steps; i += every)
      out += format("<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">%zu</text>\n",
                    x_at(Line{}, i), bottom + 14, i + 1);
  }
  out += format("<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%s</text>", right, bottom + 27,
                escape(axes.x_unit).c_str());
  out += format("<text x=\"4\" y=\"%.1f\" class=\"tick\">%s</text>\n", top - 12, escape(axis.unit).c_str());
  if (axes.reference >= 0)
    out += format("<line class=\"reference\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" "
                  "stroke-dasharray=\"5 4\"><title>%s %s</title></line><text x=\"%.1f\" y=\"%.1f\" class=\"tick\" "
                  "text-anchor=\"end\">%s</text>\n", left, y_of(axes.reference), right, y_of(axes.reference),
                  escape(axes.reference_label).c_str(), label_number(axes.reference).c_str(), right - 2,
                  y_of(axes.reference) - 4, escape(axes.reference_label).c_str());
  for (size_t k = 0; k < series.size(); ++k) {
    const Line &l = series[k];
    std::string points;
    for (size_t i = 0; i < l.values.size(); ++i) points += format("%.1f,%.1f ", x_at(l, i), y_of(l.values[i] / axis.scale));
    if (!l.values.empty())
      out += format("<polyline class=\"mark\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"%s\"><title>%s"
                  "</title></polyline>\n", color(k).c_str(), points.c_str(), escape(l.label).c_str());
    for (size_t m = 0; m < l.marked.size() && l.marked[m] < l.values.size(); ++m) {
      size_t i = l.marked[m];
      std::string where =
          with_x ? label_number(i < l.x.size() ? l.x[i] : 0) + " " + axes.x_unit : format("step %zu", i + 1);
      out += format("<circle class=\"mark %s\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s %s: %s %s (%s)"
                    "</title></circle>\n", escape(axes.marker).c_str(), x_at(l, i), y_of(l.values[i] / axis.scale),
                    color(k).c_str(), escape(l.label).c_str(), escape(where).c_str(),
                    label_number(l.values[i] / axis.scale).c_str(), escape(axis.unit).c_str(),
                    escape(m < l.marked_notes.size() ? l.marked_notes[m] : "").c_str());
    }
    double lx = 8 + widest * double(k % per_row), ly = legend_top + 18 * double(k / per_row);
    out += format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>", lx, ly + 6,
                  lx + 16, ly + 6, color(k).c_str());
    out += format("<text x=\"%.1f\" y=\"%.1f\" class=\"label\">%s</text>\n", lx + 20, ly + 10, escape(l.label).c_str());
  }
  if (std::all_of(series.begin(), series.end(), [](const Line &l) { return l.values.empty(); }))
    out += format("<text x=\"%.1f\" y=\"%.1f\" class=\"mark note\">no configuration ran</text>", left + 6, top + 16);
  return out + "</svg>\n";
}

namespace {
const char *kStyle =
    "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}h1{font-size:20px}"
    "h2{font-size:16px;margin-top:28px}table{border-collapse:collapse;font-size:12px}"
    "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
    "td:first-child,th:first-child,td:nth-last-child(-n+2){text-align:left}td:first-child{white-space:nowrap}"
    "tr.chosen{background:#e6f4e6;font-weight:600}tr.within-noise{background:#f3f9f3}tr.status-OOM,tr.status-error{background:#fbe9e9}"
    "svg.chart{font:12px system-ui,sans-serif;display:block}svg .grid{stroke:#e3e3e3}svg .tick{fill:#555}"
    "svg .note{fill:#b22}svg .warmup{fill:#f0f0f0}p.note{color:#555;max-width:900px}\n";

// Runs in the browser after the page is parsed: every chart must have drawn something with an
// area, and no script may have failed; the verdict goes on <body data-report="...">.
const char *kCheck =
    "<script>\n"
    "(function () {\n"
    "  var charts = document.querySelectorAll('svg.chart'), broken = window.reportErrors.slice();\n"
    "  charts.forEach(function (svg) {\n"
    "    var box = svg.getBBox();\n"
    "    if (!svg.querySelector('.mark') || !(box.width > 0 && box.height > 0)) broken.push(svg.dataset.chart);\n"
    "  });\n"
    "  document.body.setAttribute('data-charts', String(charts.length));\n"
    "  document.body.setAttribute('data-report', broken.length ? 'broken: ' + broken.join(', ') : 'ok');\n"
    "})();\n"
    "</script>\n";

}  // namespace

std::string html_page(const std::string &title, const std::string &body) {
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + escape(title) +
         "</title>\n<style>" + kStyle + "</style>\n" +
         "<script>window.reportErrors = []; window.addEventListener('error', function (e) { "
         "window.reportErrors.push('script error: ' + e.message); });</script>\n</head>\n<body>\n" + body + kCheck +
         "</body></html>\n";
}

}  // namespace zf::svg
