#pragma once
// train/: the instruments of a training loop, small pieces any loop
// can use on its own: a tqdm-like progress bar (progress.h), the metrics CSV
// (metrics_csv.h; scripts/plot-metrics draws it), a loss monitor that finds
// non-finite losses without a host sync per step (loss_monitor.h), a warning
// when the GradScaler keeps skipping steps (overflow_warning.h), and peak
// memory (memory.h). Depends on core, ops and amp only.
#include <halfgrad/train/loss_monitor.h>
#include <halfgrad/train/memory.h>
#include <halfgrad/train/metrics_csv.h>
#include <halfgrad/train/overflow_warning.h>
#include <halfgrad/train/progress.h>
