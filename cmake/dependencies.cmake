# Finds every dependency once and exposes it as a target:
#   zf::torch (libtorch, CPU or CUDA), MPI::MPI_C, tomlplusplus::tomlplusplus, Boost::headers,
#   nlohmann_json::nlohmann_json, PkgConfig::SENTENCEPIECE, PkgConfig::URING (found here, required
#   by core/CMakeLists.txt), protobuf::libprotobuf with protoc (TensorBoard's event files), and, when
#   ZF_CUDA resolves ON, CUDA::cudart and zf::nccl.
find_package(Threads REQUIRED)
find_package(MPI REQUIRED COMPONENTS C)
find_package(tomlplusplus REQUIRED)
find_package(Boost 1.74 REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(URING IMPORTED_TARGET liburing)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
find_package(Protobuf REQUIRED)  # Debian: libprotobuf-dev and protobuf-compiler (tools/setup.sh installs them)

# libtorch comes from the PyPI torch wheel (torch==2.11.0); ZF_TORCH_DIR overrides the lookup.
set(ZF_TORCH_DIR "" CACHE PATH "torch package directory (contains include/ and lib/)")
if(NOT ZF_TORCH_DIR)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
      "import importlib.util as u; s = u.find_spec('torch'); print(s.submodule_search_locations[0] if s else '')"
    OUTPUT_VARIABLE _torch_dir OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _torch_dir)
    message(FATAL_ERROR "libtorch not found: install it with `python3 -m pip install torch==2.11.0` "
                        "(tools/setup.sh does) or pass -DZF_TORCH_DIR=/path/to/site-packages/torch")
  endif()
  set(ZF_TORCH_DIR "${_torch_dir}" CACHE PATH "torch package directory" FORCE)
endif()
message(STATUS "zfcore: libtorch from ${ZF_TORCH_DIR}")

# The CUDA path: AUTO turns it on when libtorch was built with CUDA and the toolkit is present.
set(ZF_CUDA "AUTO" CACHE STRING "Build the CUDA/NCCL path: AUTO, ON or OFF")
set_property(CACHE ZF_CUDA PROPERTY STRINGS AUTO ON OFF)
set(ZF_WITH_CUDA OFF)
if(NOT ZF_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(EXISTS "${ZF_TORCH_DIR}/lib/libtorch_cuda.so" AND CUDAToolkit_FOUND)
    set(ZF_WITH_CUDA ON)
  elseif(ZF_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ZF_CUDA=ON needs a CUDA-enabled libtorch and the CUDA toolkit")
  endif()
endif()
message(STATUS "zfcore: CUDA path ${ZF_WITH_CUDA} (ZF_CUDA=${ZF_CUDA})")

add_library(zf_torch INTERFACE)
add_library(zf::torch ALIAS zf_torch)
# libtorch is linked by hand in both builds: the wheel's own CMake config probes for GPUs at
# configure time, which fails on a build machine without one.
target_include_directories(zf_torch SYSTEM INTERFACE
  ${ZF_TORCH_DIR}/include ${ZF_TORCH_DIR}/include/torch/csrc/api/include)
target_compile_definitions(zf_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
if(ZF_WITH_CUDA)
  set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures (sm_90: H100/H200)")
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  enable_language(CUDA)
  # --no-as-needed keeps libtorch_cuda loaded: it registers the CUDA backend at load time.
  target_link_libraries(zf_torch INTERFACE
    ${ZF_TORCH_DIR}/lib/libtorch_cpu.so ${ZF_TORCH_DIR}/lib/libc10.so
    "-Wl,--no-as-needed" ${ZF_TORCH_DIR}/lib/libtorch_cuda.so "-Wl,--as-needed"
    ${ZF_TORCH_DIR}/lib/libc10_cuda.so CUDA::cudart)
  target_compile_definitions(zf_torch INTERFACE ZF_WITH_CUDA=1)
  find_library(ZF_NCCL_LIBRARY nccl REQUIRED HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_path(ZF_NCCL_INCLUDE nccl.h REQUIRED HINTS ${CUDAToolkit_INCLUDE_DIRS})
  add_library(zf_nccl INTERFACE)
  add_library(zf::nccl ALIAS zf_nccl)
  target_link_libraries(zf_nccl INTERFACE ${ZF_NCCL_LIBRARY} CUDA::cudart)
  target_include_directories(zf_nccl SYSTEM INTERFACE ${ZF_NCCL_INCLUDE})
  message(STATUS "zfcore: NCCL ${ZF_NCCL_LIBRARY}")
else()
  # CPU build: torch_cpu and c10 only.
  target_link_libraries(zf_torch INTERFACE
    ${ZF_TORCH_DIR}/lib/libtorch_cpu.so ${ZF_TORCH_DIR}/lib/libc10.so)
endif()
set(CMAKE_INSTALL_RPATH "$ORIGIN/../lib;${ZF_TORCH_DIR}/lib")
