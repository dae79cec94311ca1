// halfgrad-policy: prints the autocast cast-policy table as Markdown
// (docs/amp.md includes this output).
#include <halfgrad.h>

int main() { fmt::print("{}", halfgrad::amp::policy_markdown()); }
