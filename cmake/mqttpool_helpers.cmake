# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# mqttpool_add_cmocka_test(NAME <name> SOURCES <files...> [LIBS <targets...>]
#                          [LABELS unit|integration] [TIMEOUT <s>])
#
# One cmocka executable per module, registered with ctest under a label and a timeout.
function(mqttpool_add_cmocka_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 60)
  endif()
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} PkgConfig::CMOCKA mqttpool_warnings)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  # 77: skipped, said in the output (tb_test_skip; MQTTPOOL_NO_SKIP=1 makes it a failure).
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}"
                       SKIP_RETURN_CODE 77)
endfunction()

# mqttpool_add_script_test(NAME <name> COMMAND <cmd...> [LABELS ...] [TIMEOUT <s>])
function(mqttpool_add_script_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "COMMAND;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_COMMAND})
  # 77: skipped, said in the output (scripts/lib.sh's skip_test; MQTTPOOL_NO_SKIP=1 makes it a
  # failure).
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}"
                       SKIP_RETURN_CODE 77)
endfunction()

# mqttpool_add_fuzz_target(NAME <name> SOURCES <files...> [LIBS <targets...>]
#                          [INCLUDES <dirs...>] CORPUS <dir>)
#
# A libFuzzer target (LLVMFuzzerTestOneInput in SOURCES). Every test build replays its corpus
# (the seeds and every input that once crashed it) through the same function as a test named
# <name>_corpus; with MQTTPOOL_FUZZ=ON (the fuzz preset, clang) it is also built as the fuzzer
# <name>, which scripts/fuzz runs.
function(mqttpool_add_fuzz_target)
  cmake_parse_arguments(F "" "NAME;CORPUS" "SOURCES;LIBS;INCLUDES" ${ARGN})
  if(MQTTPOOL_FUZZ)
    add_executable(${F_NAME} ${F_SOURCES})
    target_link_libraries(${F_NAME} PRIVATE ${F_LIBS} mqttpool_warnings)
    target_link_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
    target_include_directories(${F_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/common/tests/fuzz ${F_INCLUDES})
    set_property(GLOBAL APPEND PROPERTY MQTTPOOL_FUZZ_TARGETS ${F_NAME})
  elseif(MQTTPOOL_BUILD_TESTS)
    add_executable(${F_NAME}_replay ${F_SOURCES} ${PROJECT_SOURCE_DIR}/common/tests/fuzz/replay_main.c)
    target_link_libraries(${F_NAME}_replay PRIVATE ${F_LIBS} mqttpool_warnings)
    target_include_directories(${F_NAME}_replay PRIVATE ${PROJECT_SOURCE_DIR}/common/tests/fuzz
                               ${F_INCLUDES})
    add_test(NAME ${F_NAME}_corpus COMMAND ${F_NAME}_replay ${F_CORPUS})
    set_tests_properties(${F_NAME}_corpus PROPERTIES TIMEOUT 60 LABELS unit)
  endif()
endfunction()

# mqttpool_find_header(<var> <header> <debian package>): find_path that stops with the package to
# install (find_path's REQUIRED needs CMake 3.18; the minimum is 3.16).
function(mqttpool_find_header var header package)
  find_path(${var} ${header})
  if(NOT ${var})
    message(FATAL_ERROR "${header} not found: install ${package} (scripts/setup installs everything)")
  endif()
endfunction()

# mqttpool_install_program(<target> <name>): build and install the program as <name> (names that
# cannot collide with other packages' programs in bin/), with an RPATH to the installed
# libmqttpool relative to itself, so an install in any prefix runs without LD_LIBRARY_PATH.
function(mqttpool_install_program target name)
  set_target_properties(${target} PROPERTIES OUTPUT_NAME ${name}
    INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
  install(TARGETS ${target} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endfunction()
