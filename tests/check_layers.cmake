# check_layers.cmake: the include rules between the folders (DESIGN.md, "Layers").
#
#   cmake -DROOT=<source dir> -P tests/check_layers.cmake
#
# Every quoted #include in base/, conf/, ring/, ctrl/, trainer/, cluster/, cli/ and bench/
# (subfolders count as their folder) must name a header by its path from the one include root,
# the project root ("ring/ring.h"), in a layer the including folder may use; a header named
# *_internal.h serves only the files of its own folder. A file's layer is its top folder, with
# no exception. Exits with an error that names each file,
# header and rule broken. The build runs it (target check_layers) and so does
# ctest (layers.includes), so the structure cannot drift without a failure.

cmake_minimum_required(VERSION 3.16)
set(LAYERS base conf ring ctrl trainer cluster cli bench)
set(ALLOW_base base)
set(ALLOW_conf base conf)
set(ALLOW_ring base ring)
set(ALLOW_ctrl base ctrl)
set(ALLOW_trainer base trainer)
set(ALLOW_cluster base conf ring ctrl trainer cluster)
set(ALLOW_cli base conf ring ctrl trainer cluster cli)
set(ALLOW_bench base conf ring ctrl trainer cluster cli bench)

if(NOT ROOT)
  message(FATAL_ERROR "check_layers: pass -DROOT=<source dir>")
endif()

# The layer a file belongs to, from its path relative to ROOT ("" when it is in none).
function(layer_of rel out)
  string(REGEX MATCH "^[^/]+" top "${rel}")
  if(top IN_LIST LAYERS)
    set(${out} ${top} PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

set(dirs ${LAYERS})
set(sglobs)
foreach(d ${dirs})
  list(APPEND sglobs ${ROOT}/${d}/*.c ${ROOT}/${d}/*.h ${ROOT}/${d}/*.cu ${ROOT}/${d}/*.cuh)
endforeach()
file(GLOB_RECURSE sources RELATIVE ${ROOT} ${sglobs})
set(broken "")
set(checked 0)
foreach(f ${sources})
  layer_of(${f} from)
  file(STRINGS ${ROOT}/${f} incs REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line ${incs})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" inc "${line}")
    math(EXPR checked "${checked} + 1")
    layer_of(${inc} to)
    if(NOT EXISTS ${ROOT}/${inc} OR to STREQUAL "")
      string(APPEND broken "\n  ${f}: includes \"${inc}\", which names no header of the project "
                           "by its folder (one include root: \"ring/ring.h\")")
      continue()
    endif()
    if(NOT to IN_LIST ALLOW_${from})
      string(REPLACE ";" ", " may "${ALLOW_${from}}")
      string(APPEND broken "\n  ${f}: includes ${inc} (${to}); ${from} may use only ${may}")
    endif()
    # an internal header (NAME_internal.h) serves its own folder only
    get_filename_component(inc_dir ${inc} DIRECTORY)
    get_filename_component(f_dir ${f} DIRECTORY)
    if(inc MATCHES "_internal\\.h$" AND NOT f_dir STREQUAL inc_dir)
      string(APPEND broken "\n  ${f}: includes ${inc}, internal to ${inc_dir}/")
    endif()
  endforeach()
endforeach()

if(checked LESS 50)
  message(FATAL_ERROR "check_layers: found only ${checked} includes under ${ROOT}; wrong ROOT?")
endif()
if(broken)
  message(FATAL_ERROR "check_layers: includes that break the layer rules (DESIGN.md, "
                      "\"Layers\"):${broken}")
endif()
message(STATUS "check_layers: ${checked} includes follow the layer rules")
