#include "day0/io/safetensors_file.h"

#include "day0/core/checked_math.h"

namespace day0 {

uint64_t TensorView::numel() const {
  return checked_product(shape).value_or(0);
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  D0_ASSIGN_OR_RETURN(MappedFile map, MappedFile::open(path));
  auto header = parse_safetensors_header(map.bytes(), map.size());
  if (!header.is_ok()) return header.status().with_context(path);
  SafetensorsFile file;
  file.map_ = std::move(map);
  file.header_ = std::move(header).value();
  return file;
}

TensorView SafetensorsFile::view(const SafetensorsEntry& entry) const {
  TensorView v;
  v.name = entry.name;
  v.dtype = entry.dtype;
  v.shape = entry.shape;
  v.data = map_.bytes().subspan(header_.data_start + entry.begin, entry.byte_size());
  return v;
}

Result<TensorView> SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry* entry = header_.find(name);
  if (entry == nullptr) return not_found(path() + ": no tensor '" + name + "'");
  return view(*entry);
}

std::vector<TensorView> SafetensorsFile::tensors() const {
  std::vector<TensorView> out;
  out.reserve(header_.tensors.size());
  for (const auto& entry : header_.tensors) out.push_back(view(entry));
  return out;
}

}  // namespace day0
