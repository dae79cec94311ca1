// halfgrad-report RUN_DIR [--compare OTHER_RUN_DIR]: writes RUN_DIR/report.html
// and RUN_DIR/figures/*.{png,svg} from what `train_classifier --report RUN_DIR`
// left there (report.h lists the files). docs/amp.md shows a page.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>

#include <halfgrad/core/atomic_file.h>

#include "report.h"

int main(int argc, char** argv) try {
  std::string dir, compare_dir;
  CLI::App app{"Write a training run's report page (report.html) with its figures", "halfgrad-report"};
  app.add_option("run_dir", dir, "the folder train_classifier --report wrote")->required()->check(CLI::ExistingDirectory);
  app.add_option("--compare", compare_dir, "another run folder (the same model in float32, say): peak memory side by side")
      ->check(CLI::ExistingDirectory);
  CLI11_PARSE(app, argc, argv);

  const report::Run run = report::load_run(dir);
  std::optional<report::Run> compare;
  if (!compare_dir.empty()) compare = report::load_run(compare_dir);
  const auto figures = report::draw_figures(run, dir);
  halfgrad::atomic_write_file(dir + "/report.html", report::html_page(run, compare, figures));
  fmt::print("halfgrad-report: wrote {}/report.html ({} figures in {}/figures)\n", dir, figures.size(), dir);
  return 0;
} catch (const std::exception& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
