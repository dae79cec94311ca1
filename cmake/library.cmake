# The library (included by the top-level CMakeLists.txt): one top-level folder
# per layer of an op call (core <- kernels, dispatch <- ops <- autograd <- amp <- nn,
# train, data <- optim, distributed; tests/layers/check_includes.cmake), device code (*/cuda/) next to the host code it serves.
# Included as <halfgrad/core/tensor.h> inside and outside the library, so a
# user's own core/tensor.h can never shadow ours: in the build tree through
# ${HALFGRAD_INCLUDE_ROOT}/halfgrad, a link to the source root; installed, from
# include/halfgrad/.
set(HALFGRAD_INCLUDE_ROOT ${PROJECT_BINARY_DIR}/include-root)
file(MAKE_DIRECTORY ${HALFGRAD_INCLUDE_ROOT})
file(CREATE_LINK ${PROJECT_SOURCE_DIR} ${HALFGRAD_INCLUDE_ROOT}/halfgrad SYMBOLIC)
add_library(halfgrad SHARED
  core/allocator.cpp core/host_cache.cpp core/atomic_file.cpp core/device.cpp core/file_input.cpp core/json_input.cpp core/pinned.cpp
  core/random.cpp core/generator.cpp core/tensor.cpp core/layout.cpp
  dispatch/dispatch.cpp dispatch/layers.cpp dispatch/node.cpp dispatch/grad_mode.cpp
  autograd/engine.cpp autograd/record.cpp autograd/function.cpp
  amp/autocast.cpp amp/policy.cpp amp/scaler_kernels.cpp amp/grad_scaler.cpp amp/grad_norm.cpp amp/numerics.cpp amp/monitor.cpp
  amp/anomaly.cpp amp/fp8.cpp
  kernels/router.cpp kernels/common.cpp kernels/numeric_settings.cpp kernels/cpu/threads.cpp
  kernels/cpu/elementwise.cpp kernels/cpu/reduce.cpp kernels/cpu/softmax.cpp kernels/cpu/random.cpp kernels/cpu/matmul.cpp
  kernels/cpu/linear_chain.cpp kernels/cpu/gemm.cpp kernels/cpu/sort.cpp kernels/cpu/index.cpp kernels/cpu/conv_direct.cpp
  kernels/cpu/batch_norm.cpp kernels/cpu/pool.cpp kernels/cpu/fp8.cpp kernels/cpu/multinomial.cpp kernels/cpu/layer_norm.cpp
  ops/util.cpp ops/factory.cpp ops/shape.cpp ops/elementwise.cpp ops/grad_ops.cpp
  ops/reduce.cpp ops/norms.cpp ops/logical.cpp ops/linalg.cpp ops/linear_chain.cpp ops/loss.cpp ops/print.cpp
  ops/tensor_methods.cpp ops/sort.cpp ops/indexing.cpp ops/index_expr.cpp ops/norm_pool.cpp ops/conv.cpp
  ops/layer_norm.cpp ops/embedding.cpp ops/attention.cpp ops/fp8.cpp ops/multinomial.cpp
  nn/module.cpp nn/state_dict.cpp nn/init.cpp nn/linear.cpp nn/sequential.cpp nn/clip_grad.cpp
  nn/conv.cpp nn/batchnorm.cpp nn/pooling.cpp nn/models/mobilenet_v3.cpp
  nn/normalization.cpp nn/sparse.cpp nn/attention.cpp nn/module_list.cpp
  nn/safetensors.cpp nn/safetensors_format.cpp
  optim/optimizer.cpp optim/sgd.cpp optim/adam.cpp optim/fused_cpu.cpp optim/low_precision.cpp optim/low_precision_cpu.cpp optim/lr_scheduler.cpp optim/checkpoint.cpp
  data/dataset.cpp data/loader.cpp data/idx.cpp data/transforms.cpp
  train/progress.cpp train/metrics_csv.cpp train/loss_monitor.cpp train/overflow_warning.cpp train/memory.cpp
)
add_library(halfgrad::halfgrad ALIAS halfgrad)
# The loops over kernels/cpu/vec_math.h's exp, and the elementwise loops over
# kernels/math.h's piecewise functions (hardswish's and hardsigmoid's gradients),
# vectorise only without trapping math: GCC will not compute a float operation
# a branch may skip, or turn a float compare into a blend, when it could raise
# an FP exception. We never read FP exception flags, and the results do not change.
set_source_files_properties(kernels/cpu/softmax.cpp kernels/cpu/elementwise.cpp PROPERTIES COMPILE_OPTIONS -fno-trapping-math)

# The public headers: what <halfgrad.h> reaches, and all that `cmake --install`
# copies (to include/halfgrad/<folder>/, the umbrella to include/). The backend
# interface (kernels/kernels.h: no argument checks), the dispatcher and its nodes
# (dispatch/, but for grad mode), raw views (core/alias.h) and the CPU/CUDA kernel headers stay inside.
set(HALFGRAD_PUBLIC_HEADERS
    core/allocator.h core/host_cache.h core/atomic_file.h core/device.h core/dtype.h core/error.h core/format.h core/half.h core/float8.h core/macros.h
    core/generator.h core/indexing.h core/pinned.h core/random.h core/shape.h core/tensor.h
    dispatch/grad_mode.h
    autograd/function.h autograd/grad.h autograd/grad_mode.h autograd/gradcheck.h autograd/hooks.h
    amp/anomaly.h amp/autocast.h amp/custom_function.h amp/fp8.h amp/grad_scaler.h amp/monitor.h amp/policy.h amp/numerics.h
    kernels/activation.h kernels/numeric_settings.h kernels/threads.h ops/activation.h ops/size_arg.h ops/indexing_ops.h ops/loss_options.h ops/operators.h ops/ops.h ops/sort_ops.h
    ops/conv_ops.h ops/norm_pool_ops.h ops/transformer_ops.h ops/fp8_ops.h
    nn/activation.h nn/batchnorm.h nn/conv.h nn/dropout.h nn/flatten.h nn/functional.h nn/init.h nn/linear.h nn/loss.h
    nn/module.h nn/nn.h nn/pooling.h nn/models/mobilenet_v3.h nn/normalization.h nn/sparse.h nn/attention.h
    nn/module_list.h nn/safetensors.h nn/sequential.h nn/state_dict.h nn/utils.h
    optim/adam.h optim/checkpoint.h optim/low_precision.h optim/lr_scheduler.h optim/optim.h optim/optimizer.h optim/sgd.h
    data/data.h data/dataset.h data/idx.h data/loader.h data/sampler.h data/transforms.h
    train/loss_monitor.h train/memory.h train/metrics_csv.h train/overflow_warning.h train/progress.h train/train.h)
target_sources(halfgrad PRIVATE ${HALFGRAD_PUBLIC_HEADERS})
target_include_directories(halfgrad PUBLIC $<BUILD_INTERFACE:${HALFGRAD_INCLUDE_ROOT}>
                                           $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>)

# Private dependencies (no public header includes them, so an installed
# halfgrad's users do not need them): nlohmann-json (header only) parses
# safetensors headers and checkpoint metadata; zlib reads gzip'd IDX files
# (data/idx.cpp); threads run the data loader's prefetching.
find_package(nlohmann_json 3 REQUIRED)
find_package(ZLIB REQUIRED)
find_package(Threads REQUIRED)
target_link_libraries(halfgrad PUBLIC fmt::fmt PRIVATE OpenMP::OpenMP_CXX $<BUILD_INTERFACE:nlohmann_json::nlohmann_json>
                      ZLIB::ZLIB Threads::Threads)
# -ffp-contract=off: no a * b + c contracted into one fused multiply-add (g++
# does it by default wherever FMA exists, e.g. in the AVX-512 target clones),
# so every CPU result is rounded as written, on every host, and as on CUDA
# (--fmad=false below).
# -Werror=switch: an op enum value missing from a switch (kernels/math.h's op
# switches) is a compile error, not a silent fall-through.
target_compile_options(halfgrad PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -ffp-contract=off -Werror=switch>)
# The CPU convolution entries: oneDNN's primitives (falling back on the
# direct loops), or the direct loops alone.
if(HALFGRAD_ONEDNN)
  target_sources(halfgrad PRIVATE kernels/cpu/conv_onednn.cpp)
  target_link_libraries(halfgrad PRIVATE DNNL::dnnl)
  target_compile_definitions(halfgrad PRIVATE HALFGRAD_WITH_ONEDNN=1)
else()
  target_sources(halfgrad PRIVATE kernels/cpu/conv_no_onednn.cpp)
endif()
if(NOT HALFGRAD_TARGET_CLONES)
  target_compile_definitions(halfgrad PRIVATE HALFGRAD_NO_TARGET_CLONES=1)
endif()

if(HALFGRAD_WITH_CUDA)
  file(GLOB cuda_sources CONFIGURE_DEPENDS
    core/cuda/*.cu kernels/cuda/*.cu kernels/cuda/*.cpp amp/cuda/*.cu optim/cuda/*.cu)
  target_sources(halfgrad PRIVATE ${cuda_sources})
  set_target_properties(halfgrad PROPERTIES CUDA_STANDARD 20)
  target_link_libraries(halfgrad PRIVATE CUDA::cudart CUDA::cublasLt)
  # cuDNN 9 (kernels/cuda/cudnn_conv.cpp: the convolutions, on its backend graph API):
  # in the toolkit's folders, or where CUDNN_ROOT / CUDNN_PATH / CUDNN_HOME
  # point (scripts/gpu-check sets them for a Python wheel's cuDNN), or on
  # CMAKE_LIBRARY_PATH / CMAKE_INCLUDE_PATH. libcudnn.so loads its
  # sub-libraries (libcudnn_graph, _engines_*, _cnn, ...) from its own folder.
  set(cudnn_hints ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT})
  foreach(v CUDNN_ROOT CUDNN_PATH CUDNN_HOME)
    if(DEFINED ENV{${v}})
      list(APPEND cudnn_hints $ENV{${v}})
    endif()
  endforeach()
  find_library(CUDNN_LIBRARY cudnn HINTS ${cudnn_hints} PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
  find_path(CUDNN_INCLUDE_DIR cudnn_graph.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${cudnn_hints} PATH_SUFFIXES include)
  if(NOT CUDNN_LIBRARY OR NOT CUDNN_INCLUDE_DIR)
    message(FATAL_ERROR "The CUDA backend needs cuDNN 9 (libcudnn.so and cudnn_graph.h) for the convolutions; "
                        "found library '${CUDNN_LIBRARY}', headers '${CUDNN_INCLUDE_DIR}'. Install cuDNN 9 for "
                        "your CUDA toolkit (or the nvidia-cudnn-cu12 wheel) and point CUDNN_ROOT (environment) or "
                        "-DCUDNN_LIBRARY=/path/libcudnn.so -DCUDNN_INCLUDE_DIR=/path/include at it; or build for the CPU only "
                        "with -DHALFGRAD_CUDA=OFF")
  endif()
  file(STRINGS ${CUDNN_INCLUDE_DIR}/cudnn_version.h cudnn_major REGEX "^#define CUDNN_MAJOR [0-9]+")
  string(REGEX REPLACE "^#define CUDNN_MAJOR ([0-9]+).*" "\\1" cudnn_major "${cudnn_major}")
  if(NOT cudnn_major GREATER_EQUAL 9)
    message(FATAL_ERROR "cuDNN at ${CUDNN_INCLUDE_DIR} is version '${cudnn_major}'; halfgrad's convolutions need "
                        "cuDNN 9 (its backend graph API)")
  endif()
  target_include_directories(halfgrad PRIVATE ${CUDNN_INCLUDE_DIR})
  target_link_libraries(halfgrad PRIVATE ${CUDNN_LIBRARY})
  # fmt 9 turns constexpr off under nvcc but keeps format_string consteval.
  target_compile_definitions(halfgrad PUBLIC $<$<COMPILE_LANGUAGE:CUDA>:FMT_USE_CONSTEXPR=1>)
  # --fmad=false: no multiply-add contraction, so the shared per-element math
  # (kernels/math.h, optim/update_math.h) rounds exactly as on the CPU.
  target_compile_options(halfgrad PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr --fmad=false>)
  target_compile_definitions(halfgrad PUBLIC HALFGRAD_WITH_CUDA=1)
else()
  target_sources(halfgrad PRIVATE core/cuda/runtime_stub.cpp)
endif()

set_target_properties(halfgrad PROPERTIES
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  # $ORIGIN, plus the folders it linked from outside the system's (CUDA libraries
  # in the toolkit or a Python wheel), so an installed halfgrad loads without
  # LD_LIBRARY_PATH or an ld.so.conf entry
  INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON)

# distributed/: data parallelism, its own library (halfgrad::distributed) on top
# of halfgrad, built when MPI is found (OpenMPI: Debian libopenmpi-dev +
# openmpi-bin, installed by scripts/setup). CUDA tensors go through NCCL, which
# ships with the CUDA toolkit; without CUDA or libnccl only CPU tensors can be
# communicated (distributed/nccl_stub.cpp says so).
find_package(MPI COMPONENTS CXX QUIET)
if(MPI_CXX_FOUND)
  add_library(halfgrad_distributed distributed/process_group.cpp distributed/mpi_thread.cpp distributed/sampler.cpp
    distributed/ddp.cpp)
  add_library(halfgrad::distributed ALIAS halfgrad_distributed)
  target_link_libraries(halfgrad_distributed PUBLIC halfgrad MPI::MPI_CXX PRIVATE fmt::fmt)
  target_sources(halfgrad_distributed PRIVATE distributed/ddp.h distributed/process_group.h distributed/sampler.h)
  target_compile_options(halfgrad_distributed PRIVATE -Wall -Wextra -Werror=switch)
  set(nccl_found OFF)
  if(HALFGRAD_WITH_CUDA)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT} PATH_SUFFIXES lib lib64)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
      set(nccl_found ON)
    endif()
  endif()
  if(nccl_found)
    target_sources(halfgrad_distributed PRIVATE distributed/nccl.cpp)
    target_include_directories(halfgrad_distributed PRIVATE ${NCCL_INCLUDE_DIR})
    target_link_libraries(halfgrad_distributed PRIVATE ${NCCL_LIBRARY} CUDA::cudart)
    target_compile_definitions(halfgrad_distributed PUBLIC HALFGRAD_WITH_NCCL=1)
  else()
    target_sources(halfgrad_distributed PRIVATE distributed/nccl_stub.cpp)
  endif()
  message(STATUS "halfgrad: distributed/ built (MPI ${MPI_CXX_VERSION}, NCCL ${nccl_found})")
else()
  message(STATUS "halfgrad: distributed/ not built: no MPI (Debian: libopenmpi-dev openmpi-bin; scripts/setup)")
endif()
