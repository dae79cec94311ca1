// The metrics CSV (see metrics_csv.h): one write(2) per row on an O_APPEND
// file, and a reader that checks what it reads.
#include <halfgrad/train/metrics_csv.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include <halfgrad/core/error.h>
#include <halfgrad/core/file_input.h>

namespace halfgrad::train {

namespace {

std::string cell(const std::optional<double>& v) { return v ? fmt::format("{:.9g}", *v) : std::string(); }
std::string cell(const std::optional<int64_t>& v) { return v ? fmt::format("{}", *v) : std::string(); }

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

// The length of the file up to and including its last newline.
off_t complete_length(int fd) {
  const off_t size = lseek(fd, 0, SEEK_END);
  off_t end = size;
  char c = 0;
  while (end > 0) {  // (O_RDWR in append mode, for this read)
    if (pread(fd, &c, 1, end - 1) != 1) return -1;
    if (c == '\n') break;
    --end;
  }
  return end;
}

}  // namespace

MetricsCsv::MetricsCsv(std::string path, bool append) : path_(std::move(path)) {
  // O_NONBLOCK: a FIFO at `path` must not block the open (a reader-less FIFO
  // fails it with ENXIO); anything but a regular file is then refused.
  const int flags =
      (append ? O_RDWR : O_WRONLY) | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK | (append ? 0 : O_TRUNC);
  fd_ = ::open(path_.c_str(), flags, 0644);
  HG_CHECK(fd_ >= 0, "MetricsCsv: cannot open '{}' for writing: {}; check that the folder exists and is writable",
           path_, std::strerror(errno));
  struct stat st{};
  if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    fail("MetricsCsv: '{}' is not a regular file (a FIFO, a device or a folder); give the path of a file", path_);
  }
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  if (append && st.st_size > 0) {
    std::ifstream in(path_);
    std::string header;
    std::getline(in, header);
    if (header != kHeader) {
      ::close(fd_);
      fd_ = -1;
      fail("MetricsCsv: '{}' starts with '{}', not this format's header '{}'; append only to a metrics file "
           "written by MetricsCsv, or open it with append = false to start afresh",
           path_, header.size() <= 200 ? header : header.substr(0, 200) + "...", kHeader);
    }
    // Drop a last line cut short by a crash (everything after the last newline).
    const off_t keep = complete_length(fd_);
    if (keep >= 0 && keep < st.st_size) HG_CHECK(ftruncate(fd_, keep) == 0, "MetricsCsv: cannot truncate '{}'", path_);
  } else {
    write_all(std::string(kHeader) + "\n");
  }
}

MetricsCsv::~MetricsCsv() { close(); }

void MetricsCsv::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string MetricsCsv::format_row(const MetricsRow& r) {
  return fmt::format("{},{},{},{},{},{},{},{},{},{},{}", r.kind == RowKind::Step ? "step" : "epoch", r.step, r.epoch,
                     cell(r.loss), cell(r.lr), cell(r.loss_scale), cell(r.skipped), cell(r.samples_per_s),
                     cell(r.test_loss), cell(r.accuracy), cell(r.seconds));
}

void MetricsCsv::write(const MetricsRow& row) { write_all(format_row(row) + "\n"); }

void MetricsCsv::write_all(const std::string& text) {
  HG_CHECK(fd_ >= 0, "MetricsCsv::write: '{}' is closed", path_);
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {  // one write(2) in practice; the loop covers a short write
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    HG_CHECK(n > 0, "MetricsCsv::write: writing '{}' failed: {} (disk full?)", path_, std::strerror(errno));
    p += n;
    left -= static_cast<size_t>(n);
  }
}

std::vector<MetricsRow> read_metrics_csv(const std::string& path) {
  // A regular file only (a FIFO would block forever), of at most 1 GiB (a
  // row per step is ~100 bytes: ten million steps); lines quoted in errors
  // are clipped, since the file may hold anything.
  std::istringstream in(read_regular_file(path, "read_metrics_csv", uint64_t{1} << 30));
  auto clip = [](const std::string& t) { return t.size() <= 200 ? t : t.substr(0, 200) + "..."; };
  std::string line;
  std::getline(in, line);
  HG_CHECK(line == MetricsCsv::kHeader, "read_metrics_csv: '{}' line 1 is '{}', not the header '{}'", path, clip(line),
           MetricsCsv::kHeader);
  std::vector<MetricsRow> rows;
  for (int lineno = 2; std::getline(in, line); ++lineno) {
    const auto f = split(line);
    HG_CHECK(f.size() == 11, "read_metrics_csv: '{}' line {} has {} fields, not 11: '{}'", path, lineno, f.size(),
             clip(line));
    auto number = [&](const std::string& s) -> std::optional<double> {
      if (s.empty()) return std::nullopt;
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      HG_CHECK(end && *end == '\0', "read_metrics_csv: '{}' line {}: '{}' is not a number", path, lineno, clip(s));
      return v;
    };
    auto integer = [&](const std::string& s) -> std::optional<int64_t> {
      if (s.empty()) return std::nullopt;
      char* end = nullptr;
      const long long v = std::strtoll(s.c_str(), &end, 10);
      HG_CHECK(end && *end == '\0', "read_metrics_csv: '{}' line {}: '{}' is not an integer", path, lineno, clip(s));
      return static_cast<int64_t>(v);
    };
    MetricsRow r;
    HG_CHECK(f[0] == "step" || f[0] == "epoch", "read_metrics_csv: '{}' line {}: kind '{}' is neither step nor epoch",
             path, lineno, f[0]);
    r.kind = f[0] == "step" ? RowKind::Step : RowKind::Epoch;
    const auto step = integer(f[1]), epoch = integer(f[2]);
    HG_CHECK(step && epoch, "read_metrics_csv: '{}' line {}: step and epoch must be given", path, lineno);
    r.step = *step;
    r.epoch = *epoch;
    r.loss = number(f[3]);
    r.lr = number(f[4]);
    r.loss_scale = number(f[5]);
    r.skipped = integer(f[6]);
    r.samples_per_s = number(f[7]);
    r.test_loss = number(f[8]);
    r.accuracy = number(f[9]);
    r.seconds = number(f[10]);
    rows.push_back(r);
  }
  return rows;
}

}  // namespace halfgrad::train
