# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# mqttpool_add_test(NAME <entry> COMMAND <cmd...> [LABELS unit|integration] [TIMEOUT <s>]
#                   [ENVIRONMENT <VAR=value...>] [RUN_SERIAL])
#
# The one place a ctest entry is made, so that no two entries of one program differ in what a
# skip is, in their timeout or in their labels. Exit status 77 is a skip, said in the output
# (tb_test_skip in C, scripts/lib.sh's skip_test in scripts; MQTTPOOL_NO_SKIP=1 turns every skip
# into a failure). RUN_SERIAL: alone, for a test that loads the machine or measures it.
function(mqttpool_add_test)
  cmake_parse_arguments(T "RUN_SERIAL" "NAME;TIMEOUT" "COMMAND;LABELS;ENVIRONMENT" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 60)
  endif()
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_COMMAND})
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}"
                       SKIP_RETURN_CODE 77)
  if(T_ENVIRONMENT)
    set_tests_properties(${T_NAME} PROPERTIES ENVIRONMENT "${T_ENVIRONMENT}")
  endif()
  if(T_RUN_SERIAL)
    set_tests_properties(${T_NAME} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()

# mqttpool_add_cmocka_test(NAME <name> SOURCES <files...> [LIBS <targets...>]
#                          [LABELS unit|integration] [TIMEOUT <s>] [LOOPS <kind...>]
#                          [CASES_21 <case...>] [CASES_NETNS <case...>])
#
# One cmocka executable per module. Its entries, all made by mqttpool_add_test:
#   <name>                  every case but CASES_21 and CASES_NETNS
#   <name>_<kind>           the same with MQP_TEST_LOOP=<kind> (LOOPS: uv, event: the pool on a
#                           libuv or libevent loop instead of its own thread)
#   <name>[_<kind>]_2.1     CASES_21 alone: the cases that need mosquitto 2.1, so that a machine
#                           without it skips those entries and nothing else
#   <name>_netns            CASES_NETNS alone, inside a network namespace of their own
#                           (scripts/netns-run: root, ip and nft; loopback only), for cases that
#                           blackhole their own traffic
# The cases are chosen by TB_TEST_ONLY / TB_TEST_EXCLUDE (tb_test_run, comma-separated names).
function(mqttpool_add_cmocka_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;LOOPS;CASES_21;CASES_NETNS"
                        ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} PkgConfig::CMOCKA mqttpool_warnings)
  string(REPLACE ";" "," cases21 "${T_CASES_21}")
  string(REPLACE ";" "," netns "${T_CASES_NETNS}")
  set(apart ${T_CASES_21} ${T_CASES_NETNS})
  string(REPLACE ";" "," apart "${apart}")
  set(exclude "")
  if(apart)
    set(exclude "TB_TEST_EXCLUDE=${apart}")
  endif()
  foreach(kind "" ${T_LOOPS})
    set(entry ${T_NAME})
    set(env "")
    if(kind)
      set(entry ${T_NAME}_${kind})
      set(env "MQP_TEST_LOOP=${kind}")
    endif()
    mqttpool_add_test(NAME ${entry} COMMAND ${T_NAME} LABELS ${T_LABELS} TIMEOUT ${T_TIMEOUT}
                      ENVIRONMENT ${env} ${exclude})
    if(T_CASES_21)
      mqttpool_add_test(NAME ${entry}_2.1 COMMAND ${T_NAME} LABELS ${T_LABELS}
                        TIMEOUT ${T_TIMEOUT} ENVIRONMENT ${env} "TB_TEST_ONLY=${cases21}")
    endif()
  endforeach()
  if(T_CASES_NETNS)
    mqttpool_add_test(NAME ${T_NAME}_netns
                      COMMAND ${PROJECT_SOURCE_DIR}/scripts/netns-run $<TARGET_FILE:${T_NAME}>
                      LABELS ${T_LABELS} TIMEOUT ${T_TIMEOUT} ENVIRONMENT "TB_TEST_ONLY=${netns}")
  endif()
endfunction()

# mqttpool_add_script_test(NAME <name> COMMAND <cmd...> [LABELS ...] [TIMEOUT <s>] [RUN_SERIAL])
function(mqttpool_add_script_test)
  cmake_parse_arguments(T "RUN_SERIAL" "NAME;TIMEOUT" "COMMAND;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  set(serial "")
  if(T_RUN_SERIAL)
    set(serial RUN_SERIAL)
  endif()
  mqttpool_add_test(NAME ${T_NAME} COMMAND ${T_COMMAND} LABELS ${T_LABELS} TIMEOUT ${T_TIMEOUT}
                    ${serial})
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
    mqttpool_add_test(NAME ${F_NAME}_corpus COMMAND ${F_NAME}_replay ${F_CORPUS} LABELS unit)
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
