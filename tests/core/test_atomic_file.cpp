// atomic_write_file: the target is the old file or the whole new one; a
// failure anywhere (the writer throws, the rename fails) leaves the old bytes
// and no temp file behind.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <halfgrad.h>

#include "temp_dir.h"
#include "test_util.h"

namespace hg = halfgrad;
namespace fs = std::filesystem;
using hgtest::TempDir;

namespace {
size_t entries(const fs::path& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}
}  // namespace

TEST_CASE("atomic_write_file creates and replaces files", "[core][atomic_file]") {
  TempDir dir;
  const std::string p = dir / "f.bin";
  hg::atomic_write_file(p, "first version");
  CHECK(hgtest::read_bytes(p) == "first version");
  // Many chunks, several MB: every byte arrives.
  std::string big;
  for (int i = 0; i < 3'000'000; ++i) big.push_back(static_cast<char>(i * 7 + i / 256));
  hg::atomic_write_file(p, [&](hg::AtomicFile& f) {
    for (size_t at = 0; at < big.size(); at += 100'000) f.write(big.data() + at, std::min<size_t>(100'000, big.size() - at));
  });
  CHECK(hgtest::read_bytes(p) == big);
  CHECK(entries(dir.path) == 1);  // no temp file left
}

TEST_CASE("atomic_write_file gives new files the usual mode (0666 less the umask)", "[core][atomic_file]") {
  TempDir dir;
  { std::ofstream(dir / "plain") << "x"; }
  hg::atomic_write_file(dir / "atomic", "x");
  struct stat a {}, b {};
  REQUIRE(::stat((dir / "plain").c_str(), &a) == 0);
  REQUIRE(::stat((dir / "atomic").c_str(), &b) == 0);
  CHECK((a.st_mode & 0777) == (b.st_mode & 0777));
}

TEST_CASE("atomic_write_file: a writer that throws midway leaves the old file", "[core][atomic_file]") {
  TempDir dir;
  const std::string p = dir / "f.bin";
  hg::atomic_write_file(p, "the old bytes");
  std::string temp;
  CHECK_THROWS_WITH(hg::atomic_write_file(p,
                                          [&](hg::AtomicFile& f) {
                                            temp = f.temp_path();
                                            f.write("half of the new");
                                            throw std::runtime_error("disk on fire");
                                          }),
                    "disk on fire");
  CHECK(hgtest::read_bytes(p) == "the old bytes");
  CHECK(!temp.empty());
  CHECK(temp.rfind(p, 0) == 0);  // the temp file was in the same folder...
  CHECK(!fs::exists(temp));      // ...and is gone
  CHECK(entries(dir.path) == 1);
  // A halfgrad::Error from inside (e.g. a failed save) too.
  CHECK_THROWS_AS(hg::atomic_write_file(p, [](hg::AtomicFile& f) { f.write("x"); hg::fail("inner {}", 1); }), hg::Error);
  CHECK(hgtest::read_bytes(p) == "the old bytes");
  CHECK(entries(dir.path) == 1);
}

TEST_CASE("atomic_write_file: failures are Errors naming the path, leaving nothing behind", "[core][atomic_file]") {
  TempDir dir;
  // The target is a non-empty folder: the rename fails after the data is written.
  fs::create_directory(dir.path / "taken");
  hgtest::write_bytes(dir / "taken/inside", "keep");
  hgtest::expect_errors({
      {"rename over a folder", [&] { hg::atomic_write_file(dir / "taken", "data"); }, {"renaming", "taken"}},
      {"missing folder", [&] { hg::atomic_write_file(dir / "missing/f", "data"); }, {"cannot create", "missing/f"}},
      {"empty path", [&] { hg::atomic_write_file("", "data"); }, {"the path is empty"}},
      {"fsync a missing folder", [&] { hg::fsync_directory(dir / "nope"); }, {"cannot open the folder", "nope"}},
  });
  CHECK(entries(dir.path) == 1);  // only "taken"
  CHECK(hgtest::read_bytes(dir / "taken/inside") == "keep");
}

namespace {
// The pid of a process that has exited (and been reaped).
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return pid;
}
}  // namespace

TEST_CASE("atomic_write_file: temp files of killed writers are removed by the next write in the folder, a failed "
          "write leaves none",
          "[core][atomic_file]") {
  hgtest::TempDir dir;
  const pid_t gone = dead_pid();
  const std::string stale = dir / fmt::format("other.bin.tmp-{}-7", gone);
  const std::string live = dir / fmt::format("other.bin.tmp-{}-8", ::getppid());  // a process that exists
  const std::string unrelated = dir / "notes.tmp-x-1";
  for (const auto& p : {stale, live, unrelated}) hgtest::write_bytes(p, "partial");
  hg::atomic_write_file(dir / "a.bin", "new");
  CHECK(hgtest::read_bytes(dir / "a.bin") == "new");
  CHECK(!std::filesystem::exists(stale));
  CHECK(std::filesystem::exists(live));
  CHECK(std::filesystem::exists(unrelated));
  // A writer that throws: the old file stays, no temp file is left.
  CHECK_THROWS_AS(hg::atomic_write_file(dir / "a.bin", [](hg::AtomicFile& f) {
                    f.write("half");
                    throw hg::Error("stop");
                  }),
                  hg::Error);
  CHECK(hgtest::read_bytes(dir / "a.bin") == "new");
  CHECK(hgtest::entries_named(dir.path, "a.bin.tmp-").empty());
}
