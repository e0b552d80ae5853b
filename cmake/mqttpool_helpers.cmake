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
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}")
endfunction()

# mqttpool_add_script_test(NAME <name> COMMAND <cmd...> [LABELS ...] [TIMEOUT <s>])
function(mqttpool_add_script_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "COMMAND;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_COMMAND})
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}")
endfunction()

# mqttpool_add_fuzz_target(NAME <name> SOURCES <files...> [LIBS <targets...>] CORPUS <dir>)
#
# A libFuzzer target (LLVMFuzzerTestOneInput in SOURCES). Every test build replays its corpus
# (the seeds and every input that once crashed it) through the same function as a test named
# <name>_corpus; with MQTTPOOL_FUZZ=ON (the fuzz preset, clang) it is also built as the fuzzer
# <name>, which scripts/fuzz runs.
function(mqttpool_add_fuzz_target)
  cmake_parse_arguments(F "" "NAME;CORPUS" "SOURCES;LIBS" ${ARGN})
  if(MQTTPOOL_FUZZ)
    add_executable(${F_NAME} ${F_SOURCES})
    target_link_libraries(${F_NAME} PRIVATE ${F_LIBS} mqttpool_warnings)
    target_link_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
    target_include_directories(${F_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/common/tests/fuzz)
    set_property(GLOBAL APPEND PROPERTY MQTTPOOL_FUZZ_TARGETS ${F_NAME})
  elseif(MQTTPOOL_TESTS)
    add_executable(${F_NAME}_replay ${F_SOURCES} ${PROJECT_SOURCE_DIR}/common/tests/fuzz/replay_main.c)
    target_link_libraries(${F_NAME}_replay PRIVATE ${F_LIBS} mqttpool_warnings)
    target_include_directories(${F_NAME}_replay PRIVATE ${PROJECT_SOURCE_DIR}/common/tests/fuzz)
    add_test(NAME ${F_NAME}_corpus COMMAND ${F_NAME}_replay ${F_CORPUS})
    set_tests_properties(${F_NAME}_corpus PROPERTIES TIMEOUT 60 LABELS unit)
  endif()
endfunction()
