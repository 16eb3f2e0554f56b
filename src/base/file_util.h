// Opening files and directories that a user named (flags, checkpoint
// directories, files listed by an index).  Two hazards motivate this file:
//
//  - open(2) of a FIFO for reading blocks until a writer appears, and an
//    std::ifstream of one does the same: a FIFO in place of config.json or a
//    shard would hang start-up.  Every opener here uses O_NONBLOCK (which
//    never blocks on a FIFO and is harmless for regular files), checks the
//    type of what it opened with fstat, and only then clears O_NONBLOCK.
//  - a symlink loop makes open/stat fail with ELOOP, and the throwing
//    std::filesystem overloads turn that into an uncaught exception (abort).
//    The checks here use stat/open and name the loop in one line.
//
// Every error message names the path and says what is wrong with it.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace dsv4 {

// strerror(err), plus a hint for ELOOP ("a symlink loop?").
std::string DescribeErrno(int err);

// Opens `path` read-only and returns the descriptor (the caller closes it).
// Errors: NotFound when it does not exist, InvalidArgument when it is not a
// regular file (a directory, FIFO, socket or device), IoError otherwise (the
// message names ELOOP).  Never blocks.
Result<int> OpenRegularFile(const std::string& path);

// OK when `path` is a regular file (symlinks followed); the same errors as
// OpenRegularFile, without opening it.
Status CheckRegularFile(const std::string& path);

// OK when `path` is a directory (symlinks followed).  `what` starts the
// message, e.g. "model directory".
Status CheckDirectory(const std::string& path, const std::string& what);

// Whether something exists at `path` (symlinks followed): false for ENOENT
// and ENOTDIR, an error for anything else stat(2) reports (a symlink loop,
// permission denied), so that "absent" is never a guess.
Result<bool> PathExists(const std::string& path);

// The whole regular file at `path`; files above `max_bytes` are refused
// (this reads configs, indexes and tokenizers, a few MB at most).
Result<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes = 1ull << 30);

// The whole text of a kernel pseudo-file (/proc, /sys: stat() reports size
// 0 or one page whatever they hold, so it is read to the end); "" when it
// cannot be opened.
std::string ReadPseudoFile(const std::string& path);

// The value of the "Key:   N kB" line in /proc-style text (meminfo, status,
// smaps_rollup), in bytes; 0 when no line starts with `key`.
int64_t KibFieldBytes(const std::string& text, const std::string& key);

// Whether `a` and `b` name the same file (same device and inode after
// following symlinks).  False when either does not exist.
bool SameFile(const std::string& a, const std::string& b);

}  // namespace dsv4
