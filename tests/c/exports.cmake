# libdsm.so exports exactly the functions that include/dsm/*.h mark DSM_API:
# nothing internal leaks (the library is built with -fvisibility=hidden) and
# nothing public is missing. And the apps plugin, libdsm-apps.so, is a
# plugin like any other: every dsm_ symbol it needs is one libdsm.so exports
# (what a plugin built against the public headers can call), and it exports
# only dsm_plugin_init. Run by ctest as `cmake -P`.
#   -DLIB=path of libdsm.so -DSRC=source tree -DPLUGIN=path of libdsm-apps.so
file(GLOB headers ${SRC}/csrc/include/dsm/*.h)
set(declared "")
foreach(h ${headers})
  file(READ ${h} text)
  string(REGEX MATCHALL "DSM_API [^(;]*[ *]dsm_[a-z0-9_]+\\(" decls "${text}")
  foreach(d ${decls})
    string(REGEX REPLACE ".*[ *](dsm_[a-z0-9_]+)\\($" "\\1" name "${d}")
    list(APPEND declared ${name})
  endforeach()
endforeach()
list(LENGTH declared ndeclared)
if(ndeclared LESS 50)
  message(FATAL_ERROR "found only ${ndeclared} DSM_API declarations in ${SRC}/csrc/include/dsm")
endif()

# The dsm_ (or, with any_name, all) symbols `nm -D flags` lists for file.
function(dynamic_symbols file flags any_name out)
  execute_process(COMMAND nm -D ${flags} ${file} RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nm -D ${flags} ${file} failed: ${err}")
  endif()
  string(REPLACE "\n" ";" lines "${text}")
  set(names "")
  foreach(line ${lines})
    if(line MATCHES "^[0-9a-fA-F ]* [A-Za-z] (.+)$")
      set(name ${CMAKE_MATCH_1})
      if(any_name OR name MATCHES "^dsm_")
        list(APPEND names ${name})
      endif()
    endif()
  endforeach()
  set(${out} ${names} PARENT_SCOPE)
endfunction()

dynamic_symbols(${LIB} --defined-only 1 exported)

set(extra ${exported})
list(REMOVE_ITEM extra ${declared})
set(missing ${declared})
list(REMOVE_ITEM missing ${exported})
if(extra OR missing)
  message(FATAL_ERROR "libdsm.so's exports differ from include/dsm's DSM_API functions\n"
          "  exported but not public: ${extra}\n  public but not exported: ${missing}")
endif()
list(LENGTH exported n)
message(STATUS "libdsm.so exports exactly the ${n} DSM_API functions of include/dsm")

dynamic_symbols(${PLUGIN} --undefined-only 0 needed)
dynamic_symbols(${PLUGIN} --defined-only 0 defined)
list(LENGTH needed nneeded)
if(nneeded LESS 20)
  message(FATAL_ERROR "${PLUGIN} needs only ${nneeded} dsm_ symbols: is it the apps plugin?")
endif()
set(missing ${needed})
list(REMOVE_ITEM missing ${exported})
if(missing)
  message(FATAL_ERROR "${PLUGIN} calls what libdsm.so does not export: ${missing}")
endif()
if(NOT defined STREQUAL "dsm_plugin_init")
  message(FATAL_ERROR "${PLUGIN} should export only dsm_plugin_init, not: ${defined}")
endif()
message(STATUS "libdsm-apps.so needs ${nneeded} dsm_ functions, all exported by libdsm.so")
