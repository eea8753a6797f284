# kvmem_layer(name [DEPS libs...]): a static library kvmem_<name> from src/<name>/**.cpp.
# Files named *_avx2.cpp are compiled with AVX2/FMA/F16C enabled, *_avx512.cpp also with AVX-512
# (F, BW, VL, DQ, VNNI); everything else targets the
# baseline ISA, and kernels pick a variant at start-up (kernels/cpu_features.h).
function(kvmem_layer name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${name}/*.cpp)
  if(NOT srcs)  # a layer with headers only (or not yet written)
    add_library(kvmem_${name} INTERFACE)
    target_include_directories(kvmem_${name} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(kvmem_${name} INTERFACE ${ARG_DEPS})
    return()
  endif()
  add_library(kvmem_${name} STATIC ${srcs})
  target_include_directories(kvmem_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(kvmem_${name} PUBLIC ${ARG_DEPS})
  foreach(src ${srcs})
    if(src MATCHES "_avx2\\.cpp$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
    elseif(src MATCHES "_avx512\\.cpp$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS
        "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni")
    endif()
  endforeach()
endfunction()
