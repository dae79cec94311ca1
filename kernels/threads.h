#pragma once
// PyTorch's torch.set_num_threads / torch.get_num_threads: how many threads the
// CPU kernels (our loops and oneDNN's) may use for one op. <halfgrad.h>
// exports them as hg::set_num_threads / hg::get_num_threads.
//
// The default is OpenMP's: OMP_NUM_THREADS if set, else one thread per CPU
// this process may run on (what PyTorch does too, counting physical cores).
// We do not guess the machine's load: on a machine shared with other busy
// processes a team waits for its slowest, preempted thread, and one thread can
// be several times faster (a small CNN step on a busy 2-core machine: 3-5x);
// there, set_num_threads(1) or OMP_NUM_THREADS=1. See docs/performance.md,
// "Threads".
namespace halfgrad {

// Process-wide, as PyTorch's: every thread that runs a CPU op afterwards (the
// DataLoader's, a user's std::thread) uses n threads for it. n >= 1.
void set_num_threads(int n);
// What set_num_threads set, else the default above.
int get_num_threads();

}  // namespace halfgrad
