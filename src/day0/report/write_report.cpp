#include <filesystem>
#include <system_error>

#include "day0/core/atomic_file.h"
#include "day0/report/render.h"

namespace day0::report {

Status write_report_files(const Report& report, const std::string& out_dir) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return io_error(out_dir + ": cannot create the output folder: " + ec.message());
  // Render everything before touching the folder, so a failure leaves the old report intact.
  const std::string json = to_json(report).dump(2) + "\n";
  const std::string md = render_markdown(report);
  const std::string html = render_html(report);
  D0_RETURN_IF_ERROR(write_file_atomic(out_dir + "/report.json", json));
  D0_RETURN_IF_ERROR(write_file_atomic(out_dir + "/report.md", md));
  D0_RETURN_IF_ERROR(write_file_atomic(out_dir + "/report.html", html));
  return Status::ok();
}

}  // namespace day0::report
