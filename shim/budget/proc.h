// What the node ledger needs to know about processes, read from /proc with
// open/read/close only: no allocation, no stdio, usable inside the preloaded
// library and from the pinshim tool alike.
//
// A process is named by its pid *and* its start time (field 22 of
// /proc/PID/stat, clock ticks since boot), so a pid the kernel hands to a new
// process after the old one died is never mistaken for the old one.
#ifndef PINSHIM_SHIM_BUDGET_PROC_H_
#define PINSHIM_SHIM_BUDGET_PROC_H_

#include <sys/types.h>

#include <cstdint>

namespace pinshim {
namespace budget {

constexpr int kCommBytes = 16;  // TASK_COMM_LEN, including the NUL

// Who a process is, as the ledger stores it.
struct ProcessIdentity {
  uint32_t pid;
  uint64_t start_time;  // clock ticks since boot; 0 when /proc is unavailable
  uint64_t pid_ns;      // inode of /proc/self/ns/pid; 0 when unavailable
  char comm[kCommBytes];
};

// Fills *out for the calling process.
void ReadSelfIdentity(ProcessIdentity* out);

// The calling process's pid namespace id (see ProcessIdentity::pid_ns).
uint64_t SelfPidNamespace();

enum class Liveness : uint8_t {
  kAlive = 0,  // running, or not provably gone (hidden /proc, read error)
  kDead = 1,   // no such pid, a different process under that pid, or a zombie
};

// Whether the process (pid, start_time) still exists. Errs towards kAlive:
// reclaiming a live process's share would let the node exceed its budget.
Liveness CheckProcess(uint32_t pid, uint64_t start_time);

// Copies /proc/PID/comm (without newline) into out; false if unreadable.
bool ReadComm(uint32_t pid, char (&out)[kCommBytes]);

// Fields of /proc/PID/stat that liveness needs.
struct ProcStat {
  char state;            // field 3: R, S, D, Z, X, ...
  uint64_t num_threads;  // field 20
  uint64_t start_time;   // field 22
};

// Parses one /proc/PID/stat line (the comm may hold spaces and parentheses).
// Returns false on a malformed line.
bool ParseProcStat(const char* line, ProcStat* out);

}  // namespace budget
}  // namespace pinshim

#endif  // PINSHIM_SHIM_BUDGET_PROC_H_
