// Writing a trace file: naming and creating it, its header, and whole frames.
// Every function here is allocation-free; WriteFrame is async-signal-safe.
#ifndef PINSHIM_SHIM_TRACE_FRAME_WRITER_H_
#define PINSHIM_SHIM_TRACE_FRAME_WRITER_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "shim/trace/trace_format.h"

namespace pinshim {
namespace trace {

// Creates "<dir>/<basename of program>.<pid>.pstrace" (or ".<pid>.<n>" when
// taken), creating `dir` itself if missing, and writes the file header.
// Returns the descriptor (O_APPEND, close-on-exec) and the path in
// `path[0, path_len)`, or -1 with a one-line reason in `err`.
int CreateTraceFile(const char* dir, const char* program, long pid, char* path, size_t path_len,
                    char* err, size_t err_len);

// Fills the 32-byte file header.
void EncodeFileHeader(uint8_t out[kFileHeaderBytes]);

// Appends one frame made of `parts` with a single writev, so frames written
// concurrently by several threads never interleave (O_APPEND). Returns false
// when the kernel did not take all of it, with the reason in *error when
// given (ENOSPC for a short write).
bool WriteFrame(int fd, FrameType type, const struct iovec* parts, int n_parts,
                int* error = nullptr);

// Fills the 9-byte frame header for a payload given as `parts`.
void EncodeFrameHeader(FrameType type, const struct iovec* parts, int n_parts,
                       uint8_t out[kFrameHeaderBytes]);

}  // namespace trace
}  // namespace pinshim

#endif  // PINSHIM_SHIM_TRACE_FRAME_WRITER_H_
