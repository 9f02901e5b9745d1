# Bundled models kept compressed in the tree (models/<name>/*.xz: weights that compress
# well and would not fit the repository's size budget as they are) are unpacked into
# <build>/models/<name>/ with their other files, by the target tachyon_models (built by
# default; the tests use the unpacked copy).
find_program(XZ_EXECUTABLE xz REQUIRED)
set(tachyon_packed_models tiny-kjv-draft)
set(tachyon_model_outputs)
foreach(name IN LISTS tachyon_packed_models)
  set(src ${CMAKE_SOURCE_DIR}/models/${name})
  set(dst ${CMAKE_BINARY_DIR}/models/${name})
  file(GLOB files CONFIGURE_DEPENDS RELATIVE ${src} ${src}/*)
  foreach(f IN LISTS files)
    if(f MATCHES "\\.xz$")
      string(REGEX REPLACE "\\.xz$" "" out ${f})
      add_custom_command(OUTPUT ${dst}/${out}
        COMMAND ${CMAKE_COMMAND} -E make_directory ${dst}
        COMMAND ${XZ_EXECUTABLE} -dc ${src}/${f} > ${dst}/${out}.tmp
        COMMAND ${CMAKE_COMMAND} -E rename ${dst}/${out}.tmp ${dst}/${out}
        DEPENDS ${src}/${f} VERBATIM)
    else()
      set(out ${f})
      # Symbolic links (a tokenizer shared with another model) are copied as files.
      add_custom_command(OUTPUT ${dst}/${out}
        COMMAND ${CMAKE_COMMAND} -E make_directory ${dst}
        COMMAND ${CMAKE_COMMAND} -E copy ${src}/${f} ${dst}/${out}
        DEPENDS ${src}/${f} VERBATIM)
    endif()
    list(APPEND tachyon_model_outputs ${dst}/${out})
  endforeach()
endforeach()
add_custom_target(tachyon_models ALL DEPENDS ${tachyon_model_outputs})
