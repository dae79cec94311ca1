#pragma once
// data: data sets, the DataLoader, the IDX reader (Fashion-MNIST)
// and batch transforms. Depends on core and ops only.
#include <halfgrad/data/dataset.h>
#include <halfgrad/data/idx.h>
#include <halfgrad/data/loader.h>
#include <halfgrad/data/transforms.h>
