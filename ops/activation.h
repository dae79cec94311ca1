#pragma once
// Activation moved to the kernel layer (kernels/activation.h); this name stays for
// code that includes it directly.
#include <halfgrad/kernels/activation.h>
