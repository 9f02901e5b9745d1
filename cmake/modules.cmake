# One static library per source folder. Sources are collected by glob so that adding
# a file never needs a build-file edit; CONFIGURE_DEPENDS re-globs on every build.
function(tachyon_module name dir)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${dir}/*.cc ${dir}/*.cu)
  list(FILTER srcs EXCLUDE REGEX ".*_fuzz\\.cc$")
  if(srcs)
    add_library(${name} STATIC ${srcs})
    target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  else()
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(${name} INTERFACE ${ARG_DEPS})
  endif()
endfunction()

# One GoogleTest binary per test folder (less the subfolders named by EXCLUDE, which
# have binaries of their own); every TEST becomes a CTest test.
function(tachyon_test_module name dir)
  cmake_parse_arguments(ARG "" "" "DEPS;EXCLUDE" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${dir}/*_test.cc ${dir}/*_test.cu)
  foreach(sub ${ARG_EXCLUDE})
    list(FILTER srcs EXCLUDE REGEX "/${dir}/${sub}/")
  endforeach()
  if(NOT srcs)
    return()
  endif()
  add_executable(${name} ${srcs})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  target_compile_definitions(${name} PRIVATE
    TACHYON_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    TACHYON_BINARY_DIR="${CMAKE_BINARY_DIR}")
  # A test that runs on the default device (a GPU when one is present, or
  # TACHYON_DEVICE=cuda) reaches the CUDA backend as `tachyon` does: the module
  # libtachyon_cuda.so, found through the build folder (or beside the binary where
  # scripts/gpu_build.sh stages them), resolving its references to tachyon against the
  # test's exported symbols.
  set_target_properties(${name} PROPERTIES ENABLE_EXPORTS ON)
  if(TARGET tachyon_cuda)
    add_dependencies(${name} tachyon_cuda)
    set_property(TARGET ${name} APPEND PROPERTY BUILD_RPATH ${CMAKE_BINARY_DIR})
    target_compile_definitions(${name} PRIVATE TACHYON_WITH_CUDA=1)
  endif()
  gtest_discover_tests(${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
    DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 900)
endfunction()
