#pragma once
// Renders a Report as Markdown and as one self-contained HTML page (inline CSS and SVG, no scripts,
// no network), and writes report.json / report.md / report.html into a folder atomically.
//
// Charts read these evidence keys when a stage provides them (docs/report-schema.md):
//   <alignment|miniature>.evidence.layers        [{layer, cosine, max_abs_err}]
//   plan.evidence.memory_per_device               {item: bytes}, plan.evidence.device_memory_bytes
//   performance.evidence                          prefill_tok_s, decode_tok_s, decode_roofline_tok_s,
//                                                 prefill_roofline_tok_s
#include <string>

#include "day0/core/status.h"
#include "day0/report/report.h"

namespace day0::report {

std::string render_markdown(const Report& report);
std::string render_html(const Report& report);

// Creates out_dir if needed; each file is written to a temporary name and renamed into place.
Status write_report_files(const Report& report, const std::string& out_dir);

}  // namespace day0::report
