#pragma once
// The audit's stages (audit.h lists them in order). Each fills verdict, summary, reason and evidence;
// the runner sets id, title and seconds. docs/audit.md says what each sends and how it judges.
#include "day0/report/report.h"

namespace day0::audit {

struct AuditSession;

void run_tokens_stage(AuditSession& s, report::StageResult& out);
void run_logprobs_stage(AuditSession& s, report::StageResult& out);
void run_target_generation_stage(AuditSession& s, report::StageResult& out);
void run_tools_stage(AuditSession& s, report::StageResult& out);
void run_limits_stage(AuditSession& s, report::StageResult& out);
void run_speed_stage(AuditSession& s, report::StageResult& out);

}  // namespace day0::audit
