#pragma once
// Inline SVG charts for the self-contained HTML report (no scripts, no external assets).
#include <string>
#include <vector>

namespace day0::report {

struct Series {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;
};

// A line chart; with log_y, non-positive values are clamped to the smallest positive one.
std::string svg_line_chart(const std::string& title, const std::vector<Series>& series,
                           const std::string& x_label, const std::string& y_label, bool log_y);

struct Bar {
  std::string label;
  double value = 0.0;
};

// Horizontal bars with values printed; `limit` > 0 draws a dashed limit line labelled limit_label.
std::string svg_bar_chart(const std::string& title, const std::vector<Bar>& bars, const std::string& unit,
                          double limit = 0.0, const std::string& limit_label = "");

}  // namespace day0::report
