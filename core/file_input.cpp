// open_regular_file, read_regular_file (core/file_input.h).
#include <halfgrad/core/file_input.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <halfgrad/core/error.h>

namespace halfgrad {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

}  // namespace

int open_regular_file(const std::string& path, const char* who, uint64_t* size) {
  // O_NONBLOCK: open() of a FIFO returns at once instead of waiting for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  HG_CHECK(fd >= 0, "{}: cannot open '{}': {}", who, path, errno == ENOENT ? "no such file" : std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("{}: cannot stat '{}': {}", who, path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: '{}' is {}, not a regular file; pass the path of a file", who, path, kind_of(st.st_mode));
  }
  // Back to blocking reads (O_NONBLOCK means nothing for a regular file's
  // reads today, but a reader should not depend on that).
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int e = errno;
    ::close(fd);
    fail("{}: cannot set up reading '{}': {}", who, path, std::strerror(e));
  }
  if (size != nullptr) *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

std::string read_regular_file(const std::string& path, const char* who, uint64_t max_bytes) {
  uint64_t size = 0;
  const int fd = open_regular_file(path, who, &size);
  if (size > max_bytes) {
    ::close(fd);
    fail("{}: '{}' has {} bytes, above the limit of {} for this file", who, path, size, max_bytes);
  }
  std::string text;
  text.resize(static_cast<size_t>(size));
  size_t have = 0;
  while (have < text.size()) {
    const ssize_t n = ::read(fd, text.data() + have, text.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      fail("{}: reading '{}' failed after {} of {} bytes: {}", who, path, have, size,
           n < 0 ? std::strerror(e) : "the file ended early (changed while reading?)");
    }
    have += static_cast<size_t>(n);
  }
  ::close(fd);
  return text;
}

}  // namespace halfgrad
