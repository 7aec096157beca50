#include "day0/model/op_list.h"

namespace day0 {

double OpList::total_flops_per_token() const {
  double total = 0;
  for (const auto& op : ops) total += op.flops_per_token;
  return total;
}

double OpList::total_bytes_per_token() const {
  double total = 0;
  for (const auto& op : ops) total += op.bytes_per_token;
  return total;
}

}  // namespace day0
