// Build-time tool: turns every ```cpp block of a Markdown page into a function
// of one C++ file, so the page's snippets are compiled and run by CTest
// (tests/docs/CMakeLists.txt). `#line` points compiler errors back into the page.
//
//   extract_snippets <page.md> <out.cpp> [--marked]
//
// --marked takes only the blocks right after a line `<!-- test -->` (a page
// whose other blocks are fragments, like docs/amp.md); without it, every block.
// A block is the body of a function; lines of a block before a line
// `// --- body` are put at namespace scope instead (structs, helper functions).
// The generated main(N) runs snippet N (1-based) and reports an exception as a failure.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {
struct Block {
  int first_line = 0;  // line of the first code line in the page
  std::vector<std::string> lines;
};
}  // namespace

int main(int argc, char** argv) {
  const bool marked = argc == 4 && std::string(argv[3]) == "--marked";
  if (argc != 3 && !marked) {
    std::cerr << "usage: extract_snippets <page.md> <out.cpp> [--marked]\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::cerr << "extract_snippets: cannot read " << argv[1] << "\n";
    return 1;
  }
  std::vector<Block> blocks;
  std::string line;
  bool inside = false, taken = false;
  std::string before;  // the line before this one
  for (int n = 1; std::getline(in, line); before = line, ++n) {
    if (!inside && line.rfind("```cpp", 0) == 0) {
      inside = true;
      taken = !marked || before == "<!-- test -->";
      if (taken) blocks.push_back({n + 1, {}});
    } else if (inside && line.rfind("```", 0) == 0) {
      inside = false;
    } else if (inside && taken) {
      blocks.back().lines.push_back(line);
    }
  }
  if (inside) {
    std::cerr << argv[1] << ": a ```cpp block is not closed\n";
    return 1;
  }
  std::ostringstream out;
  out << "// Generated from " << argv[1] << " by extract_snippets: edit the page, not this file.\n"
      << "#include \"snippet_prelude.h\"\n\n";
  for (size_t b = 0; b < blocks.size(); ++b) {
    const Block& blk = blocks[b];
    size_t split = 0;  // lines before `// --- body` go to namespace scope
    for (size_t i = 0; i < blk.lines.size(); ++i)
      if (blk.lines[i].rfind("// --- body", 0) == 0) split = i + 1;
    out << "namespace snippet_" << b + 1 << " {\n";
    if (split > 0) {
      out << "#line " << blk.first_line << " \"" << argv[1] << "\"\n";
      for (size_t i = 0; i + 1 < split; ++i) out << blk.lines[i] << "\n";
    }
    out << "void run() {\n#line " << blk.first_line + static_cast<int>(split) << " \"" << argv[1] << "\"\n";
    for (size_t i = split; i < blk.lines.size(); ++i) out << blk.lines[i] << "\n";
    out << "}\n}  // namespace snippet_" << b + 1 << "\n\n";
  }
  out << "int main(int argc, char** argv) {\n"
      << "  const int n = argc > 1 ? std::atoi(argv[1]) : 0;\n"
      << "  void (*const snippets[])() = {";
  for (size_t b = 0; b < blocks.size(); ++b) out << (b ? ", " : "") << "snippet_" << b + 1 << "::run";
  out << "};\n"
      << "  const int count = " << blocks.size() << ";\n"
      << "  return snippet_prelude::run_one(n, count, snippets);\n}\n";
  // Write only when changed, so an unchanged page does not rebuild the snippets.
  std::ifstream old(argv[2]);
  std::stringstream previous;
  previous << old.rdbuf();
  if (old && previous.str() == out.str()) return 0;
  std::ofstream file(argv[2]);
  file << out.str();
  return file ? 0 : 1;
}
