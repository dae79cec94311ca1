# The library's folders are layers, and includes run only downward: a file in
# one folder may include <halfgrad/X/...> only from a folder of a lower rank
# (docs/architecture.md, "Folders"). Files use only <halfgrad/...> includes
# across folders (and "name.h" within their own). Run as a test:
#   cmake -DROOT=<repository> -P tests/layers/check_includes.cmake
# It fails on an upward (or sideways) include not in `known` below, and on an
# entry of `known` that is gone, so that the list only shrinks (splitting ops/
# into kernels/ and dispatch/, with autocast registering into the dispatcher,
# removes the rest).
cmake_policy(VERSION 3.24)
set(ranks core=0 kernels=1 dispatch=1 ops=2 autograd=3 amp=4 nn=5 train=5 data=5 optim=6 distributed=6)
set(known
  "autograd/engine.cpp -> amp"
  "ops/dispatch.cpp -> amp"
  "ops/dispatch.cpp -> autograd"
  "ops/dispatch.h -> autograd"
  "ops/indexing.cpp -> autograd"
  "ops/loss.cpp -> autograd"
  "ops/print.cpp -> autograd"
  "ops/sort.cpp -> amp")

if(NOT ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<repository> -P check_includes.cmake")
endif()
set(folders "")
foreach(r IN LISTS ranks)
  string(REPLACE "=" ";" pair "${r}")
  list(GET pair 0 name)
  list(GET pair 1 value)
  set(rank_${name} ${value})
  list(APPEND folders ${name})
endforeach()

set(found "")
set(bad "")
foreach(from IN LISTS folders)
  if(NOT IS_DIRECTORY ${ROOT}/${from})
    continue()
  endif()
  file(GLOB_RECURSE files RELATIVE ${ROOT} ${ROOT}/${from}/*.h ${ROOT}/${from}/*.cpp ${ROOT}/${from}/*.cu
       ${ROOT}/${from}/*.cuh)
  foreach(file IN LISTS files)
    file(STRINGS ${ROOT}/${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*<halfgrad/[a-z_]+/")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*<halfgrad/([a-z_]+)/.*" "\\1" to "${line}")
      if(to STREQUAL from OR NOT DEFINED rank_${to})
        continue()
      endif()
      if(rank_${to} LESS rank_${from})
        continue()
      endif()
      set(edge "${file} -> ${to}")
      if(edge IN_LIST found)
        continue()
      endif()
      list(APPEND found "${edge}")
      if(NOT edge IN_LIST known)
        list(APPEND bad "${edge} (${from} is rank ${rank_${from}}, ${to} rank ${rank_${to}})")
      endif()
    endforeach()
  endforeach()
endforeach()

set(gone "")
foreach(edge IN LISTS known)
  if(NOT edge IN_LIST found)
    list(APPEND gone "${edge}")
  endif()
endforeach()
list(LENGTH found n_found)
if(bad)
  list(JOIN bad "\n  " text)
  message(FATAL_ERROR "includes that run upward or sideways between the library's layers:\n  ${text}\n"
                      "A lower layer must not know a higher one: move the code down, or let the higher layer "
                      "register into the lower one (as autocast registers into the dispatcher).")
endif()
if(gone)
  list(JOIN gone "\n  " text)
  message(FATAL_ERROR "no longer found (remove them from `known` in tests/layers/check_includes.cmake):\n  ${text}")
endif()
message(STATUS "layers: every include runs downward but the ${n_found} known ones (to go with the split of ops/)")
