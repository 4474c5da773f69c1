# check_layers.cmake: the include rules between the folders (README, "Architecture").
#
#   cmake -DROOT=<source dir> -P tests/check_layers.cmake
#
# Every quoted #include in base/, conf/, ring/, ctrl/, trainer/, cluster/, cli/ and bench/
# (subfolders count as their folder) must name a header of a layer the including folder may use.
# A file's layer is its top folder, with no exception. Exits with an error that names each file,
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

# Which layer owns each header name (names are unique across the layers).
set(dirs ${LAYERS})
set(globs)
foreach(d ${dirs})
  list(APPEND globs ${ROOT}/${d}/*.h ${ROOT}/${d}/*.cuh)
endforeach()
file(GLOB_RECURSE headers RELATIVE ${ROOT} ${globs})
foreach(h ${headers})
  get_filename_component(name ${h} NAME)
  layer_of(${h} layer)
  if(DEFINED OWNER_${name} AND NOT OWNER_${name} STREQUAL layer)
    message(FATAL_ERROR "check_layers: header name ${name} is used in two layers")
  endif()
  set(OWNER_${name} ${layer})
endforeach()

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
    get_filename_component(name ${inc} NAME)
    math(EXPR checked "${checked} + 1")
    if(NOT DEFINED OWNER_${name})
      string(APPEND broken "\n  ${f}: includes \"${inc}\", which is no header of the project")
      continue()
    endif()
    set(to ${OWNER_${name}})
    if(NOT to IN_LIST ALLOW_${from})
      string(REPLACE ";" ", " may "${ALLOW_${from}}")
      string(APPEND broken "\n  ${f}: includes ${name} (${to}); ${from} may use only ${may}")
    endif()
  endforeach()
endforeach()

if(checked LESS 50)
  message(FATAL_ERROR "check_layers: found only ${checked} includes under ${ROOT}; wrong ROOT?")
endif()
if(broken)
  message(FATAL_ERROR "check_layers: includes that break the layer rules (README, "
                      "\"Architecture\"):${broken}")
endif()
message(STATUS "check_layers: ${checked} includes follow the layer rules")
