#pragma once
// Files that are either the old version or the complete new one, never a torn
// mix, even if the process dies or the machine loses power mid-write: the
// bytes go to a temp file in the same folder, which is fsync'ed and renamed
// over the target, and then the folder is fsync'ed so the rename itself is
// durable. Any failure (an exception from the caller's writer, a full disk, a
// failed rename) removes the temp file and leaves the old file untouched. Both
// checkpoint writers (nn/safetensors.h, optim/checkpoint.h) write through it.
#include <functional>
#include <string>
#include <string_view>

namespace halfgrad {

// The sink handed to atomic_write_file's writer; every write is checked.
class AtomicFile {
 public:
  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  const std::string& temp_path() const { return temp_path_; }

 private:
  friend void atomic_write_file(const std::string&, const std::function<void(AtomicFile&)>&);
  AtomicFile(int fd, std::string temp_path) : fd_(fd), temp_path_(std::move(temp_path)) {}
  int fd_;
  std::string temp_path_;
};

// Temp files are named "<path>.tmp-<pid>-<n>". One left by a writer that
// was killed (its pid no longer names a process on this machine) is removed
// by the next atomic_write_file into the same folder.
// Replaces (or creates) `path` with what `writer` writes. The new file has
// mode 0666 less the umask, like any new file. An Error names the path and
// the failing call.
void atomic_write_file(const std::string& path, const std::function<void(AtomicFile&)>& writer);
void atomic_write_file(const std::string& path, std::string_view contents);

// Whether `name` is one of our temp names, "<...><marker><pid>-<n>", whose
// writer `pid` is gone (not this process, and no such process exists).
bool writer_is_gone(const std::string& name, const std::string& marker);
// Removes the temp files ("<file>.tmp-<pid>-<n>") of writers that are gone
// from the folder `dir`; errors are ignored (the next save tries again).
void remove_stale_temp_files(const std::string& dir);

// fsync a folder, so that renames and new entries in it survive a crash.
void fsync_directory(const std::string& dir);

}  // namespace halfgrad
