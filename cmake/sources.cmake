# Library sources outside core/ops/autograd/amp, listed per folder.
set(HALFGRAD_EXTRA_SOURCES)
