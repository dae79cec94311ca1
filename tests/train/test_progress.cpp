// The progress bar on a fake clock: tqdm's formats, the exact text of both
// modes, the plain mode's cadence, the terminal line's width, the range wrapper.
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

#include <halfgrad/train/progress.h>

using namespace halfgrad::train;

namespace {

struct FakeClock {
  double t = 0;
  std::function<double()> fn() {
    return [this] { return t; };
  }
};

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

size_t cols(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The frames a terminal bar drew: the text between '\r's (newline dropped).
std::vector<std::string> frames_of(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = s.find('\r', pos)) != std::string::npos) {
    const size_t next = s.find_first_of("\r\n", pos + 1);
    out.push_back(s.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1));
    pos += 1;
  }
  return out;
}

}  // namespace

TEST_CASE("tqdm's formats: intervals, SI-scaled sizes, postfix numbers", "[train][progress]") {
  CHECK(format_interval(0) == "00:00");
  CHECK(format_interval(59.9) == "00:59");  // truncated, as tqdm
  CHECK(format_interval(61) == "01:01");
  CHECK(format_interval(3599) == "59:59");
  CHECK(format_interval(3600) == "1:00:00");
  CHECK(format_interval(3725) == "1:02:05");
  CHECK(format_interval(360000) == "100:00:00");

  CHECK(format_sizeof(0) == "0.00");
  CHECK(format_sizeof(9.994) == "9.99");
  CHECK(format_sizeof(12.34) == "12.3");
  CHECK(format_sizeof(123.4) == "123");
  CHECK(format_sizeof(999.4) == "999");
  CHECK(format_sizeof(999.5) == "1.00k");
  CHECK(format_sizeof(1234) == "1.23k");
  CHECK(format_sizeof(51234.5) == "51.2k");
  CHECK(format_sizeof(45.6e6) == "45.6M");
  CHECK(format_sizeof(2.5e9) == "2.50G");

  CHECK(format_num(0.001) == "0.001");
  CHECK(format_num(1.5e-5) == "1.5e-5");   // "{:.3g}" with the exponent's zero stripped is shorter
  CHECK(format_num(0.41234567) == "0.412");
  CHECK(format_num(65536.0) == "65536");  // the shortest form wins (Python's str would add ".0")
  CHECK(format_num(3) == "3");
  CHECK(format_num(-2.5e10) == "-2.5e+10");
}

TEST_CASE("plain mode: one line every N steps, exact text, rates and remaining time", "[train][progress]") {
  FakeClock clock;
  std::ostringstream out;
  {
    ProgressBar bar(1000, {.desc = "epoch 1", .out = &out, .clock = clock.fn(), .log_every_steps = 100,
                           .log_every_seconds = 1000, .smoothing = 0, .samples_per_step = 64});
    CHECK_FALSE(bar.is_terminal());  // an ostringstream is never a terminal
    CHECK(out.str().empty());        // plain mode prints nothing before the first step
    for (int i = 1; i <= 1000; ++i) {
      clock.t = i / 40.0;  // 40 steps a second, 2560 samples a second
      if (i == 450) bar.set_postfix({{"lr", "1.0e-03"}});
      if (i == 450) bar.set_postfix("loss", 0.41234567);
      if (i == 450) bar.set_postfix("lr", "5.0e-04");  // keeps its place
      if (i == 450) bar.set_postfix("skipped", 0);
      if (i == 460) bar.set_postfix("skipped", int64_t{3});
      bar.update();
    }
    clock.t = 30;
  }  // the destructor closes: the last line already showed 1000/1000, so no extra line
  const auto lines = lines_of(out.str());
  REQUIRE(lines.size() == 10);
  CHECK(lines[0] == "epoch 1:  10% 100/1000 [00:02<00:22, 40.00it/s, 2.56k samples/s]");
  CHECK(lines[2] == "epoch 1:  30% 300/1000 [00:07<00:17, 40.00it/s, 2.56k samples/s]");
  CHECK(lines[3] == "epoch 1:  40% 400/1000 [00:10<00:15, 40.00it/s, 2.56k samples/s]");
  CHECK(lines[4] == "epoch 1:  50% 500/1000 [00:12<00:12, 40.00it/s, 2.56k samples/s, lr=5.0e-04, loss=0.412, skipped=3]");
  CHECK(lines[9] ==
        "epoch 1: 100% 1000/1000 [00:25<00:00, 40.00it/s, 2.56k samples/s, lr=5.0e-04, loss=0.412, skipped=3]");
  CHECK(out.str().back() == '\n');
  CHECK(out.str().find('\r') == std::string::npos);
}

TEST_CASE("plain mode: every N steps or every S seconds, whichever first, and a final line", "[train][progress]") {
  FakeClock clock;
  std::ostringstream out;
  ProgressBar bar(60, {.out = &out, .clock = clock.fn(), .log_every_steps = 20, .log_every_seconds = 3,
                       .smoothing = 0});
  auto step = [&](double dt) {
    clock.t += dt;
    bar.update();
  };
  // Binary-exact time steps, so the printed seconds are exact.
  for (int i = 0; i < 10; ++i) step(0.125);  // n = 10 at t = 1.25
  step(3.0);                                 // n = 11 at t = 4.25: 4.25 s since the start: a line
  for (int i = 0; i < 20; ++i) step(0.125);  // n = 31 at t = 6.75: 20 steps since the last line
  for (int i = 0; i < 24; ++i) step(0.125);  // a line at n = 51 (t = 9.25); n = 55 at t = 9.75
  clock.t = 11;
  bar.close();                               // a final line at 55/60
  bar.close();                               // once only
  bar.update();                              // after close: ignored
  const auto lines = lines_of(out.str());
  REQUIRE(lines.size() == 4);
  CHECK_THAT(lines[0], Catch::Matchers::StartsWith(" 18% 11/60 [00:04<"));
  CHECK_THAT(lines[1], Catch::Matchers::StartsWith(" 52% 31/60 [00:06<"));
  CHECK_THAT(lines[2], Catch::Matchers::StartsWith(" 85% 51/60 [00:09<"));
  CHECK(lines[3] == " 92% 55/60 [00:11<00:01,  5.00it/s]");  // 55 steps in 11 s
  CHECK(bar.n() == 55);
}

TEST_CASE("the default cadence is a twentieth of the total, and a short run still gets its final line",
          "[train][progress]") {
  FakeClock clock;
  std::ostringstream out;
  {
    ProgressBar bar(100, {.out = &out, .clock = clock.fn()});
    for (int i = 0; i < 12; ++i) {
      clock.t += 0.01;
      bar.update();
    }
  }
  const auto lines = lines_of(out.str());
  REQUIRE(lines.size() == 3);  // at 5, 10 and the final line at 12
  CHECK_THAT(lines[0], Catch::Matchers::StartsWith("  5% 5/100 "));
  CHECK_THAT(lines[2], Catch::Matchers::StartsWith(" 12% 12/100 "));
}

TEST_CASE("the rate is tqdm's bias-corrected moving average of the intervals between lines", "[train][progress]") {
  FakeClock clock;
  std::ostringstream out;
  ProgressBar bar(0, {.desc = "train", .out = &out, .clock = clock.fn(), .log_every_steps = 8,
                      .log_every_seconds = 100});
  for (int i = 0; i < 8; ++i) clock.t += 0.125, bar.update();  // 8 steps in 1 s
  for (int i = 0; i < 8; ++i) clock.t += 0.25, bar.update();   // 8 steps in 2 s
  const auto lines = lines_of(out.str());
  REQUIRE(lines.size() == 2);
  // No total: no percent, no remaining time.
  CHECK(lines[0] == "train: 8 [00:01,  8.00it/s]");
  // (0.3 * 8 + 0.7 * 2.4) / (0.3 * 2 + 0.7 * 0.3) = 4.08 / 0.81 = 5.037... (the average would be 5.33)
  CHECK(lines[1] == "train: 16 [00:03,  5.04it/s]");
  // Below one step a second tqdm shows seconds per step.
  std::ostringstream slow;
  ProgressBar s(4, {.out = &slow, .clock = clock.fn(), .log_every_steps = 1, .smoothing = 0});
  clock.t += 2.5;
  s.update();
  CHECK(lines_of(slow.str()).at(0) == " 25% 1/4 [00:02<00:07,  2.50s/it]");
}

TEST_CASE("terminal mode: one line redrawn with \\r, the bar filling the width less one column",
          "[train][progress]") {
  FakeClock clock;
  std::ostringstream out;
  ProgressBar bar(10, {.desc = "ep", .out = &out, .terminal = true, .width = 80, .clock = clock.fn(),
                       .smoothing = 0, .ascii = true});
  CHECK(bar.is_terminal());
  // Drawn at once, at 0%: 79 columns, the bar takes the 47 the text leaves.
  CHECK(out.str() == "\rep:   0%|" + std::string(47, ' ') + "| 0/10 [00:00<?, ?it/s]");
  clock.t = 0.05;
  bar.update(2);  // within min_interval (0.1 s) of the last draw: not drawn
  CHECK(frames_of(out.str()).size() == 1);
  clock.t = 0.5;
  bar.update(3);  // 5 steps in 0.5 s
  const auto frames = frames_of(out.str());
  REQUIRE(frames.size() == 2);
  // 39 cells at 50%: int(0.5 * 39 * 10) = 195 ticks: 19 full cells, a "5", 19 blanks.
  CHECK(frames[1] == "ep:  50%|" + std::string(19, '#') + "5" + std::string(19, ' ') +
                         "| 5/10 [00:00<00:00, 10.00it/s]");
  bar.set_postfix("loss", 0.25);
  clock.t = 1.0;
  bar.close();
  const std::string s = out.str();
  CHECK(s.back() == '\n');
  CHECK(s.find('\n') == s.size() - 1);  // one newline, at the very end
  const auto last = frames_of(s).back();
  // The longer text leaves 28 cells: 140 ticks, 14 full cells and no partial one.
  CHECK(last == "ep:  50%|" + std::string(14, '#') + std::string(14, ' ') +
                    "| 5/10 [00:01<00:01,  5.00it/s, loss=0.25]");
  for (const auto& f : frames_of(s)) CHECK(cols(f) == 79);
}

TEST_CASE("terminal mode: Unicode eighth blocks, and the line never exceeds the width", "[train][progress]") {
  FakeClock clock;
  for (int width : {1, 2, 10, 30, 41, 60, 79, 80, 100, 200}) {
    std::ostringstream out;
    ProgressBar bar(1000, {.desc = "a long description", .out = &out, .terminal = true, .width = width,
                           .clock = clock.fn(), .samples_per_step = 128});
    for (int i = 0; i < 1000; i += 37) {
      clock.t += 0.5;
      bar.set_postfix("loss", 1.0 / (i + 1));
      bar.set_postfix("scale", 65536.0);
      bar.update(37);
    }
    bar.close();
    for (const auto& f : frames_of(out.str())) {
      INFO("width " << width << ": '" << f << "'");
      CHECK(cols(f) <= static_cast<size_t>(std::max(width - 1, 0)));
    }
  }
  // The partial cell: 45/80 = 56.25% of 20 cells = 90 eighths: 11 full blocks and a quarter block.
  // 58 columns: 57 for the line, 37 of them text (" 56%", "|", "| ", "45/80 [00:01<00:00, 45.00it/s]").
  std::ostringstream out;
  ProgressBar bar(80, {.out = &out, .terminal = true, .width = 58, .clock = clock.fn(), .smoothing = 0});
  clock.t += 1;
  bar.update(45);
  const std::string f = frames_of(out.str()).back();
  const std::string full = "\u2588", quarter = "\u258E";
  std::string expect_bar;
  for (int i = 0; i < 11; ++i) expect_bar += full;
  expect_bar += quarter + std::string(8, ' ');
  CHECK(f == " 56%|" + expect_bar + "| 45/80 [00:01<00:00, 45.00it/s]");
}

TEST_CASE("write(): a message above a terminal bar, or a plain line", "[train][progress]") {
  FakeClock clock;
  std::ostringstream out;
  ProgressBar bar(4, {.out = &out, .terminal = true, .width = 40, .clock = clock.fn(), .ascii = true});
  bar.write("warning: x");
  const std::string s = out.str();
  // The bar is wiped (spaces over its 39 columns), the message printed, the bar drawn again.
  const std::string frame = frames_of(s).front();
  CHECK(s == "\r" + frame + "\r" + std::string(39, ' ') + "\rwarning: x\n\r" + frame);
  std::ostringstream plain;
  ProgressBar p(4, {.out = &plain, .clock = clock.fn()});
  p.write("hello");
  CHECK(plain.str() == "hello\n");
}

TEST_CASE("progress(range): one step per item, closed when the loop ends", "[train][progress]") {
  FakeClock clock;
  std::ostringstream out;
  std::vector<int> data = {1, 2, 3, 4, 5};
  int sum = 0;
  auto wrapped = progress(data, {.desc = "data", .out = &out, .clock = clock.fn(), .log_every_steps = 100,
                                 .smoothing = 0, .samples_per_step = 10});
  for (int& x : wrapped) {  // a reference into `data`: no copy
    clock.t += 0.5;
    sum += x;
    x *= 2;
    CHECK_FALSE(wrapped.bar().closed());
  }
  CHECK(sum == 15);
  CHECK(data[4] == 10);
  CHECK(wrapped.bar().closed());
  CHECK(out.str() == "data: 100% 5/5 [00:02<00:00,  2.00it/s, 20.0 samples/s]\n");
  // A temporary range is kept alive by the wrapper.
  std::ostringstream out2;
  int n = 0;
  for (auto v : progress(std::vector<double>(7, 1.5), {.out = &out2, .clock = clock.fn()})) n += v > 1;
  CHECK(n == 7);
  CHECK_THAT(out2.str(), Catch::Matchers::Contains("7/7"));
}

TEST_CASE("ProgressBar errors", "[train][progress]") {
  hgtest::expect_errors({
      {"negative smoothing", [] { ProgressBar b(3, {.smoothing = -1}); }, {"smoothing"}},
      {"negative cadence", [] { ProgressBar b(3, {.log_every_steps = -2}); }, {"log_every_steps"}},
  });
}
