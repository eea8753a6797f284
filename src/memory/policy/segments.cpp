#include "memory/policy/segments.h"

#include "core/utf8.h"

namespace kvmem::memory {

Status ValidateSegmentName(std::string_view name) {
  if (name.empty() || name.size() > kMaxSegmentNameBytes) {
    return InvalidArgument("a segment name is 1.." + std::to_string(kMaxSegmentNameBytes) +
                           " bytes, got " + std::to_string(name.size()));
  }
  if (!IsValidUtf8(name)) return InvalidArgument("a segment name must be valid UTF-8");
  for (size_t i = 0; i < name.size(); i += Utf8CharLen(name, i)) {
    const auto c = static_cast<unsigned char>(name[i]);
    // C1 controls are U+0080..U+009F: 0xC2 0x80..0x9F in UTF-8.
    const bool c1 =
        c == 0xC2 && i + 1 < name.size() && static_cast<unsigned char>(name[i + 1]) <= 0x9F;
    if (c < 0x20 || c == 0x7F || c1) {
      return InvalidArgument("a segment name must not hold control characters (byte " +
                             std::to_string(i) + ")");
    }
    if (c == '/') return InvalidArgument("a segment name must not hold '/'");
  }
  return Status::Ok();
}

Status ValidateSegmentText(std::string_view text) {
  if (text.size() > kMaxSegmentTextBytes) {
    return InvalidArgument("a segment text is at most " + std::to_string(kMaxSegmentTextBytes) +
                           " bytes, got " + std::to_string(text.size()));
  }
  if (!IsValidUtf8(text)) return InvalidArgument("a segment text must be valid UTF-8");
  return Status::Ok();
}

Status ValidateSegmentRequest(const SegmentRequest& request) {
  if (request.op == SegmentRequest::Op::kList) return Status::Ok();
  KVMEM_RETURN_IF_ERROR(ValidateSegmentName(request.name));
  if (request.op == SegmentRequest::Op::kPut) return ValidateSegmentText(request.text);
  return Status::Ok();
}

}  // namespace kvmem::memory
