#pragma once
// Renders a Report as Markdown and as one self-contained HTML page (inline CSS and SVG, no scripts,
// no network), and writes report.json / report.md / report.html into a folder atomically.
//
// Charts read these evidence keys when a stage provides them (docs/report-schema.md):
//   <alignment|miniature>.evidence.layers        [{layer, cosine, max_abs_err}]
//   plan.evidence.memory_per_device               {item: bytes}, plan.evidence.device_memory_bytes
//   performance.evidence                          prefill_tok_s, decode_tok_s, decode_roofline_tok_s,
//                                                 prefill_roofline_tok_s
//   target-speed.evidence                         levels [{concurrency, output_tok_s, ttft_p50_s, ...}],
//                                                 soak.samples [{t_s, e2e_p50_s, e2e_p99_s}]
//   target-generation.evidence.prompts            [{id, target, reference, prefix_agreement}]
#include <string>

#include "day0/core/status.h"
#include "day0/report/report.h"

namespace day0::report {

std::string render_markdown(const Report& report);
std::string render_html(const Report& report);

// The three report files, the only entries a report folder may hold.
inline constexpr const char* kReportFiles[] = {"report.json", "report.md", "report.html"};

// Holds the advisory lock on an --out folder (flock on "<parent>/.<name>.lock", kept as a
// zero-byte file so that every writer locks the same inode); released when destroyed.
class ReportDirLock {
 public:
  ReportDirLock() = default;
  explicit ReportDirLock(int fd) : fd_(fd) {}
  ReportDirLock(ReportDirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  ReportDirLock& operator=(ReportDirLock&& other) noexcept;
  ReportDirLock(const ReportDirLock&) = delete;
  ReportDirLock& operator=(const ReportDirLock&) = delete;
  ~ReportDirLock();

 private:
  int fd_ = -1;
};

// Checks --out before any work: absent with an existing parent folder, or a folder that holds only
// a report set; takes the lock (another run writing there is bad input); removes temporaries that
// killed runs left beside it.
Result<ReportDirLock> prepare_report_dir(const std::string& out_dir);

// The report set is one atomic unit: the three files are written into a fresh mkdtemp folder beside
// out_dir, which then replaces out_dir in one step (renameat2 RENAME_EXCHANGE where the file system
// has it, else two renames with the old set moved aside first). A reader never sees a new
// report.json beside an old report.html; an interruption leaves the old set or the new one.
Status write_report_files(const Report& report, const std::string& out_dir);

}  // namespace day0::report
