# The public-header test (CTest: public/headers_self_contained): every include/troupe/*.hpp
# must compile on its own, and all of them together, with only include/ and CAF's
# include directories on the path, so that a header of runtime/, actors/, net/ or
# kernels/ (found only through the repository root) fails it.
# Run by CTest as: cmake -DCXX=... -DSTD_FLAG=... -DPUBLIC_DIR=... -DCAF_DIRS=... -DWORK_DIR=... -P this file
foreach(var CXX STD_FLAG PUBLIC_DIR CAF_DIRS WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_public_headers: ${var} is not set")
  endif()
endforeach()

file(GLOB headers RELATIVE "${PUBLIC_DIR}" "${PUBLIC_DIR}/troupe/*.hpp")
list(SORT headers)
list(LENGTH headers count)
if(count EQUAL 0)
  message(FATAL_ERROR "check_public_headers: no headers under ${PUBLIC_DIR}/troupe")
endif()

set(include_flags "-I${PUBLIC_DIR}")
foreach(dir ${CAF_DIRS})
  list(APPEND include_flags "-I${dir}")
endforeach()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(all_includes "")
set(failures 0)
# One translation unit per header (it must be self-contained), then one with all of them.
foreach(header ${headers} "all")
  if(header STREQUAL "all")
    set(text "${all_includes}")
    set(name "all_headers")
  else()
    set(text "#include \"${header}\"\n")
    string(APPEND all_includes "${text}")
    string(REPLACE "/" "_" name "${header}")
  endif()
  set(tu "${WORK_DIR}/${name}.cpp")
  file(WRITE "${tu}" "${text}int main() { return 0; }\n")
  execute_process(COMMAND "${CXX}" ${STD_FLAG} -fsyntax-only ${include_flags} "${tu}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(STATUS "ok   ${header}")
  else()
    message(STATUS "FAIL ${header}:\n${out}${err}")
    math(EXPR failures "${failures} + 1")
  endif()
endforeach()
if(failures GREATER 0)
  message(FATAL_ERROR "${failures} public-header translation unit(s) did not compile with only include/ and CAF on the path")
endif()
message(STATUS "${count} public headers compile alone and together with only include/ and CAF on the path")
