// POSIX open/write/fsync/rename, in the order that makes a replacement
// atomic and durable (see core/atomic_file.h).
#include <halfgrad/core/atomic_file.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <halfgrad/core/error.h>

namespace halfgrad {

namespace {

std::string errno_text() { return std::strerror(errno); }

std::string parent_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// "<pid>-<counter>" at the end of one of our temp names: the writer's pid.
bool writer_pid(const std::string& tail, pid_t* pid) {
  const size_t dash = tail.find('-');
  if (dash == 0 || dash == std::string::npos || dash + 1 == tail.size() || dash > 10) return false;
  for (size_t i = 0; i < tail.size(); ++i)
    if (i != dash && (tail[i] < '0' || tail[i] > '9')) return false;
  *pid = static_cast<pid_t>(std::stoll(tail.substr(0, dash)));
  return *pid > 0;
}

}  // namespace

bool writer_is_gone(const std::string& name, const std::string& marker) {
  const size_t at = name.rfind(marker);
  if (at == std::string::npos || at == 0) return false;
  pid_t pid = 0;
  if (!writer_pid(name.substr(at + marker.size()), &pid) || pid == ::getpid()) return false;
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

void remove_stale_temp_files(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::error_code ec2;
    if (entry.is_regular_file(ec2) && writer_is_gone(name, ".tmp-")) std::filesystem::remove(entry.path(), ec2);
  }
}

void AtomicFile::write(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    HG_CHECK(n > 0, "atomic_write_file: writing '{}' failed: {}", temp_path_, n < 0 ? errno_text() : "no progress");
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  HG_CHECK(fd >= 0, "fsync_directory: cannot open the folder '{}': {}", dir, errno_text());
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : "";
  ::close(fd);
  HG_CHECK(rc == 0, "fsync_directory: fsync of the folder '{}' failed: {}", dir, why);
}

void atomic_write_file(const std::string& path, const std::function<void(AtomicFile&)>& writer) {
  HG_CHECK(!path.empty(), "atomic_write_file: the path is empty");
  // A fresh name in the target's folder (a rename across file systems is not
  // atomic): O_EXCL, so two writers never share a temp file.
  // Temp files a killed writer left in this folder go first.
  remove_stale_temp_files(parent_of(path));
  static std::atomic<uint64_t> counter{0};
  std::string temp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    temp = fmt::format("{}.tmp-{}-{}", path, ::getpid(), counter++);
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    HG_CHECK(fd >= 0 || (errno == EEXIST && attempt < 100), "atomic_write_file: cannot create '{}': {}", temp,
             errno_text());
  }
  bool closed = false;
  try {
    AtomicFile file(fd, temp);
    writer(file);
    HG_CHECK(::fsync(fd) == 0, "atomic_write_file: fsync of '{}' failed: {}", temp, errno_text());
    closed = true;
    HG_CHECK(::close(fd) == 0, "atomic_write_file: closing '{}' failed: {}", temp, errno_text());
    HG_CHECK(std::rename(temp.c_str(), path.c_str()) == 0, "atomic_write_file: renaming '{}' to '{}' failed: {}", temp,
             path, errno_text());
  } catch (...) {
    if (!closed) ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  fsync_directory(parent_of(path));
}

void atomic_write_file(const std::string& path, std::string_view contents) {
  atomic_write_file(path, [&](AtomicFile& f) { f.write(contents); });
}

}  // namespace halfgrad
