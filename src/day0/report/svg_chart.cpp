#include "day0/report/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "day0/core/html_escape.h"

namespace day0::report {

namespace {
constexpr double kWidth = 640, kHeight = 300, kLeft = 70, kRight = 20, kTop = 30, kBottom = 45;
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"};

std::string tick_label(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e4 || a < 1e-2) return fmt::format("{:.1e}", v);
  return fmt::format("{:.3g}", v);
}
}  // namespace

std::string svg_line_chart(const std::string& title, const std::vector<Series>& series,
                           const std::string& x_label, const std::string& y_label, bool log_y) {
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min;
  double y_min = x_min, y_max = -x_min, smallest_positive = x_min;
  for (const auto& s : series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      x_min = std::min(x_min, s.x[i]);
      x_max = std::max(x_max, s.x[i]);
      if (std::isfinite(s.y[i]) && s.y[i] > 0) smallest_positive = std::min(smallest_positive, s.y[i]);
    }
  }
  if (!std::isfinite(smallest_positive)) smallest_positive = 1e-12;
  auto transform = [&](double y) {
    if (!std::isfinite(y)) y = 0;
    return log_y ? std::log10(std::max(y, smallest_positive)) : y;
  };
  for (const auto& s : series) {
    for (double y : s.y) {
      y_min = std::min(y_min, transform(y));
      y_max = std::max(y_max, transform(y));
    }
  }
  if (!std::isfinite(x_min)) x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  if (x_max == x_min) x_max = x_min + 1;
  if (y_max == y_min) y_max = y_min + 1;
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x_min) / (x_max - x_min) * plot_w; };
  auto py = [&](double y) { return kTop + plot_h - (transform(y) - y_min) / (y_max - y_min) * plot_h; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" role=\"img\" "
      "aria-label=\"{}\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"18\" font-size=\"14\" font-family=\"sans-serif\">{}</text>\n",
      kWidth, kHeight, html_escape(title), kLeft, html_escape(title));
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n", kLeft, kTop,
                     kTop + plot_h);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n", kLeft,
                     kTop + plot_h, kLeft + plot_w);
  for (int t = 0; t <= 4; ++t) {
    const double yv = y_min + (y_max - y_min) * t / 4.0;
    const double y = kTop + plot_h - plot_h * t / 4.0;
    const double label = log_y ? std::pow(10.0, yv) : yv;
    svg += fmt::format(
        "<text x=\"{}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"end\" "
        "font-family=\"sans-serif\">{}</text>\n",
        kLeft - 4, y + 3, tick_label(label));
    const double xv = x_min + (x_max - x_min) * t / 4.0;
    svg += fmt::format(
        "<text x=\"{:.1f}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\" "
        "font-family=\"sans-serif\">{}</text>\n",
        px(xv), kTop + plot_h + 14, tick_label(xv));
  }
  svg += fmt::format(
      "<text x=\"{:.1f}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\" "
      "font-family=\"sans-serif\">{}</text>\n",
      kLeft + plot_w / 2, kHeight - 8, html_escape(x_label));
  svg += fmt::format(
      "<text x=\"12\" y=\"{:.1f}\" font-size=\"11\" font-family=\"sans-serif\" transform=\"rotate(-90 12 "
      "{:.1f})\" "
      "text-anchor=\"middle\">{}{}</text>\n",
      kTop + plot_h / 2, kTop + plot_h / 2, html_escape(y_label), log_y ? " (log)" : "");
  for (size_t s = 0; s < series.size(); ++s) {
    const char* color = kColors[s % 5];
    std::string points;
    for (size_t i = 0; i < series[s].x.size() && i < series[s].y.size(); ++i) {
      points += fmt::format("{:.1f},{:.1f} ", px(series[s].x[i]), py(series[s].y[i]));
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>\n", px(series[s].x[i]),
                         py(series[s].y[i]), color);
    }
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", color,
                       points);
    svg += fmt::format(
        "<text x=\"{:.1f}\" y=\"{}\" font-size=\"11\" fill=\"{}\" font-family=\"sans-serif\">{}</text>\n",
        kLeft + 10, kTop + 12 + 14 * static_cast<double>(s), color, html_escape(series[s].name));
  }
  svg += "</svg>\n";
  return svg;
}

std::string svg_bar_chart(const std::string& title, const std::vector<Bar>& bars, const std::string& unit,
                          double limit, const std::string& limit_label) {
  const double bar_h = 22, gap = 8, label_w = 170, value_w = 110;
  const double height = kTop + static_cast<double>(bars.size()) * (bar_h + gap) + 30;
  double max_value = limit;
  for (const auto& b : bars) max_value = std::max(max_value, b.value);
  if (max_value <= 0) max_value = 1;
  const double plot_w = kWidth - label_w - value_w;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{:.0f}\" role=\"img\" "
      "aria-label=\"{}\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"18\" font-size=\"14\" font-family=\"sans-serif\">{}</text>\n",
      kWidth, height, html_escape(title), html_escape(title));
  for (size_t i = 0; i < bars.size(); ++i) {
    const double y = kTop + static_cast<double>(i) * (bar_h + gap);
    const double w = std::max(0.0, bars[i].value) / max_value * plot_w;
    svg += fmt::format(
        "<text x=\"{}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\" "
        "font-family=\"sans-serif\">{}</text>\n",
        label_w - 6, y + 15, html_escape(bars[i].label));
    svg += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"/>\n", label_w,
                       y, w, bar_h, kColors[i % 5]);
    svg += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" font-family=\"sans-serif\">{} {}</text>\n",
        label_w + w + 4, y + 15, tick_label(bars[i].value), html_escape(unit));
  }
  if (limit > 0) {
    const double x = label_w + limit / max_value * plot_w;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"black\" stroke-dasharray=\"4 "
        "3\"/>\n",
        x, kTop - 4, height - 20);
    svg += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"middle\" "
        "font-family=\"sans-serif\">{}</text>\n",
        x, height - 8, html_escape(limit_label));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace day0::report
