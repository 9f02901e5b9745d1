# `cmake --build build --target package`: a Debian package and a tarball (CPack) of the
# tachyon binary. The binary reads nothing at run time but the model directory (chat
# templates come from the model's tokenizer files); without --model it looks for the
# demo model in <prefix>/share/tachyon/models/tiny-kjv-chat (cli/model_dir.cc), so the
# packages hold the binary, the demo model there and the README. The .deb's dependencies are the Debian packages of the shared
# libraries it links (dpkg-shlibdeps); libraries outside Debian's packages (the CUDA
# toolkit's cuBLAS) are left to the machine and found through the run path they were
# linked from.
include(GNUInstallDirs)

install(TARGETS tachyon RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/models/tiny-kjv-chat
        DESTINATION ${CMAKE_INSTALL_DATADIR}/tachyon/models)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
set_target_properties(tachyon PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

set(CPACK_PACKAGE_NAME tachyon)
set(CPACK_PACKAGE_VERSION 0.1.0)  # as `tachyon version` prints it
set(CPACK_PACKAGE_VENDOR "tachyon")
set(CPACK_PACKAGE_CONTACT "tachyon maintainers <tachyon@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "LLM inference engine and OpenAI / RTP-LLM compatible server")
set(CPACK_GENERATOR "DEB;TGZ")
set(CPACK_PACKAGE_FILE_NAME "tachyon-${CPACK_PACKAGE_VERSION}-${CMAKE_SYSTEM_PROCESSOR}")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_THREADS 0)
include(CPack)
