// The metrics CSV: the fixed header, empty cells for missing values, numbers
// that round-trip, appending to a resumed run's file (and dropping a line a
// crash cut short), and the reader's checks.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

#include <halfgrad/train/metrics_csv.h>

using namespace halfgrad::train;

namespace {

std::string temp_path(const char* name) {
  return fmt::format("/tmp/halfgrad_test_{}_{}.csv", name, static_cast<long>(getpid()));
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("MetricsCsv writes the header and one whole line per row, flushed at once", "[train][csv]") {
  const std::string path = temp_path("write");
  MetricsCsv csv(path);
  CHECK(slurp(path) == std::string(MetricsCsv::kHeader) + "\n");
  const float loss32 = 0.1f;  // a float32 value: 9 significant digits give it back exactly
  csv.write({.kind = RowKind::Step, .step = 100, .epoch = 0, .loss = loss32, .lr = 1e-3, .loss_scale = 65536,
             .skipped = 2, .samples_per_s = 51234.5, .seconds = 12.25});
  // Visible to a reader before close (no buffering in the writer).
  CHECK(slurp(path) == std::string(MetricsCsv::kHeader) + "\n" +
                           "step,100,0,0.100000001,0.001,65536,2,51234.5,,,12.25\n");
  csv.write({.kind = RowKind::Epoch, .step = 938, .epoch = 0, .loss = 1.0 / 3.0, .test_loss = 0.398,
             .accuracy = 0.8712, .seconds = 110.5});
  csv.write({.kind = RowKind::Step, .step = 939, .epoch = 1, .loss = std::numeric_limits<double>::quiet_NaN(),
             .loss_scale = std::numeric_limits<double>::infinity()});
  csv.close();
  const auto rows = read_metrics_csv(path);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].kind == RowKind::Step);
  CHECK(rows[0].step == 100);
  CHECK(static_cast<float>(*rows[0].loss) == loss32);  // round-trips as float32
  CHECK(*rows[0].lr == 1e-3);
  CHECK(*rows[0].skipped == 2);
  CHECK_FALSE(rows[0].test_loss.has_value());
  CHECK(rows[1].kind == RowKind::Epoch);
  CHECK(std::abs(*rows[1].loss - 1.0 / 3.0) < 1e-9);  // 9 significant digits
  CHECK(*rows[1].accuracy == 0.8712);
  CHECK_FALSE(rows[1].lr.has_value());
  CHECK(std::isnan(*rows[2].loss));
  CHECK(std::isinf(*rows[2].loss_scale));
  CHECK(MetricsCsv::format_row(rows[2]) == "step,939,1,nan,,inf,,,,,");
  hgtest::expect_errors({{"write after close", [&] { csv.write({}); }, {"closed"}}});
  std::remove(path.c_str());
}

TEST_CASE("MetricsCsv appends to a resumed run's file and drops a line cut short", "[train][csv]") {
  const std::string path = temp_path("append");
  {
    MetricsCsv csv(path);
    csv.write({.step = 1, .loss = 2.5});
  }
  {  // a crash in the middle of a row
    std::ofstream out(path, std::ios::app);
    out << "step,2,0,2.4";
  }
  {
    MetricsCsv csv(path, /*append=*/true);
    csv.write({.step = 2, .loss = 2.25});
  }
  CHECK(slurp(path) == std::string(MetricsCsv::kHeader) + "\nstep,1,0,2.5,,,,,,,\nstep,2,0,2.25,,,,,,,\n");
  {
    MetricsCsv fresh(path);  // append = false: afresh
  }
  CHECK(slurp(path) == std::string(MetricsCsv::kHeader) + "\n");
  {  // appending to a missing or empty file writes the header
    std::remove(path.c_str());
    MetricsCsv csv(path, true);
    csv.write({.kind = RowKind::Epoch, .step = 5, .epoch = 2});
  }
  REQUIRE(read_metrics_csv(path).size() == 1);
  CHECK(read_metrics_csv(path)[0].epoch == 2);
  std::remove(path.c_str());
}

TEST_CASE("MetricsCsv and read_metrics_csv errors", "[train][csv]") {
  const std::string other = temp_path("other");
  {
    std::ofstream out(other);
    out << "a,b,c\n1,2,3\n";
  }
  const std::string bad = temp_path("bad");
  {
    std::ofstream out(bad);
    out << MetricsCsv::kHeader << "\nstep,1,0,x,,,,,,,\n";
  }
  const std::string short_row = temp_path("short");
  {
    std::ofstream out(short_row);
    out << MetricsCsv::kHeader << "\nstep,1,0\n";
  }
  // hostile paths: a FIFO (open() would block forever), a folder; and a first
  // line of 1 MB, which the message must not quote whole
  const std::string fifo = temp_path("fifo");
  std::remove(fifo.c_str());
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const std::string long_line = temp_path("long");
  {
    std::ofstream out(long_line);
    out << std::string(1 << 20, 'x') << "\n";
  }
  hgtest::expect_errors({
      {"read a FIFO", [&] { read_metrics_csv(fifo); }, {"read_metrics_csv", "FIFO"}},
      {"write to a FIFO", [&] { MetricsCsv csv(fifo); }, {"MetricsCsv", fifo.c_str()}},
      {"append to a FIFO", [&] { MetricsCsv csv(fifo, true); }, {"MetricsCsv", "not a regular file"}},
      {"read a folder", [] { read_metrics_csv("/tmp"); }, {"read_metrics_csv", "folder"}},
  });
  const auto r = hgtest::run_in_child([&] { read_metrics_csv(long_line); });
  CHECK(r.threw_error);
  CHECK(r.message.size() < 1000);
  hgtest::expect_errors({
      {"no such folder", [] { MetricsCsv csv("/nonexistent-folder/m.csv"); }, {"cannot open", "folder"}},
      {"append to another format", [&] { MetricsCsv csv(other, true); }, {"header", "append = false"}},
      {"read another format", [&] { read_metrics_csv(other); }, {"line 1", "header"}},
      {"read a bad number", [&] { read_metrics_csv(bad); }, {"line 2", "'x' is not a number"}},
      {"read a short row", [&] { read_metrics_csv(short_row); }, {"line 2", "3 fields"}},
  });
  // The failed append left the other file alone.
  CHECK(slurp(other) == "a,b,c\n1,2,3\n");
  for (const auto& p : {other, bad, short_row, fifo, long_line}) std::remove(p.c_str());
}
