// libFuzzer target for the reader's resynchronisation: any bytes as the body
// of a trace whose frames do not check out, so that the scan looks for a
// frame at every offset. Checks, besides the sanitizers' findings and
// libFuzzer's time limit on every input (the scan is linear in the bytes):
// - every checksum the scan's RangeCrc gives for a frame-like range equals
//   the checksum of those bytes computed directly;
// - a file with a good header is accepted, whatever follows it.
// Built by tests/trace/fuzz/run_fuzzer.sh; fuzz_regression_test replays the
// kept inputs through it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "analyzer/report/range_crc.h"
#include "analyzer/report/trace_reader.h"
#include "shim/trace/crc32c.h"
#include "shim/trace/trace_format.h"

namespace {

using namespace pinshim::report;
namespace trace = pinshim::trace;

// The ranges a scan asks for, in its order: at every offset, the type byte
// and the payload its length field names (cut to what is there; a direct
// checksum of it costs at most 1 KiB per offset).
void CompareChecksums(const uint8_t* data, size_t size) {
  RangeCrc crc(data, size);
  for (size_t pos = 0; pos + trace::kFrameHeaderBytes <= size; ++pos) {
    const uint64_t room = size - pos - 8;
    const uint64_t len = std::min<uint64_t>(trace::LoadU32(data + pos + 4) % 1024, room);
    if (crc.Crc(pos + 8, pos + 8 + len) != trace::Crc32c(data + pos + 8, len)) abort();
  }
}

// A file header, the input, then one good end frame, through the reader.
void ScanDamage(const uint8_t* data, size_t size) {
  std::string file(trace::kFileHeaderBytes, '\0');
  memcpy(&file[0], trace::kTraceMagic, sizeof(trace::kTraceMagic));
  trace::StoreU16(reinterpret_cast<uint8_t*>(&file[8]), trace::kTraceVersion);
  trace::StoreU16(reinterpret_cast<uint8_t*>(&file[10]), trace::kFileHeaderBytes);
  trace::StoreU32(reinterpret_cast<uint8_t*>(&file[28]),
                  trace::MaskCrc(trace::Crc32c(file.data(), 28)));
  file.append(reinterpret_cast<const char*>(data), size);
  const uint8_t end_payload[3] = {0, 0, 1};  // nothing dropped or lost, time 1
  uint8_t header[trace::kFrameHeaderBytes];
  const uint8_t type = static_cast<uint8_t>(trace::FrameType::kEnd);
  uint32_t crc = trace::Crc32cExtend(0, &type, 1);
  crc = trace::Crc32cExtend(crc, end_payload, sizeof(end_payload));
  trace::StoreU32(header, trace::MaskCrc(crc));
  trace::StoreU32(header + 4, sizeof(end_payload));
  header[8] = type;
  file.append(reinterpret_cast<const char*>(header), sizeof(header));
  file.append(reinterpret_cast<const char*>(end_payload), sizeof(end_payload));

  TraceReader reader;
  std::string error;
  if (!reader.OpenBuffer(reinterpret_cast<const uint8_t*>(file.data()), file.size(), &error)) {
    abort();  // the header is good: the reader must accept the file
  }
  if (reader.damage().skipped_bytes > size) abort();  // only the input can be damaged
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CompareChecksums(data, size);
  ScanDamage(data, size);
  return 0;
}
