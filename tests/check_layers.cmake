# check_layers.cmake: the layer rules of DESIGN.md ("Layers").
#
#   cmake -DROOT=<source dir> -DLINKS=<build dir>/layer_links.txt -P tests/check_layers.cmake
#
# The layers are the folders base/, conf/, ring/, ctrl/, trainer/, cluster/, cli/ and bench/
# (subfolders count as their folder): a file's layer is its top folder, with no exception.
#  1. Includes. Every quoted #include in a layer's .c, .h, .cu and .cuh names a header by its
#     path from the one include root, the project root ("ring/ring.h"), in a layer the
#     including folder may use (ALLOW_*); a header named *_internal.h serves only the files
#     of its own folder.
#  2. Declarations. A layer's .c or .cu declares no function or variable of another file: no
#     extern declaration (but of the C library's own names, EXTERN_LIBC) and no prototype at
#     file scope but of a static function (a line at column 0 that names a function and ends,
#     after its parameters, with ";"). What a file uses of another it takes from that file's
#     header, so every reach out of a file is an include, which rule 1 checks.
#  3. Links. Each target a layer's folder defines links only targets of the layers its folder
#     may use (ALLOW_*) and, of the libraries outside the project, the C library (libm, libdl,
#     pthreads) and those USES_<layer> and USES_<folder> name (EXT_* tells a library by its
#     link item): NCCL is ring/nccl/'s alone, the CUDA runtime trainer/cuda/'s and
#     ring/nccl/'s, OpenBLAS and zlib the trainer's, libsodium ring's, inih conf's. A library
#     the table does not know fails too, so a new dependency is given its layer first. The
#     link facts come from the configure step (LINKS, the root CMakeLists.txt's hr_link_facts):
#     one line per target, "FOLDER TARGET: ITEM ...", what target_link_libraries gave it.
#  4. The public API. python/ loads libhetring through ctypes and examples/ use it as a user
#     does, so the functions they name are its public API: declared with HETRING_API in
#     cluster/hetring.h and exported by cluster/hetring.map. In python/ that is each name of
#     _lib.py's signature table ("NAME": (...)), each name getattr or hasattr looks up on the
#     library, and each attribute read off the library handle (lib., L., self._L.,
#     _lib_handle().) but those _lib.py sets itself (lib.NAME = ...). In examples/ it is each
#     hetring_* call of the C files and each .hetring_* or "hetring_* of the Python ones; the
#     C files include of the project's headers hetring.h alone, by that name (as installed),
#     and the Python ones no private module or name of the package (hetring._lib, ._x).
# Exits with an error that names each file or target, the header, symbol or library, and the
# rule broken. The build runs it (target check_layers) and so does ctest (layers.includes),
# so the structure cannot drift without a failure.

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

# the libraries outside the project, each with the link items that name it
set(EXTERNALS libc NCCL CUDA libsodium inih OpenBLAS zlib)
set(EXT_libc "^(Threads::Threads|dl|m|pthread|rt)$|/lib(m|dl|pthread|rt)[.](so|a)$")
set(EXT_NCCL "^hr_nccl$|nccl[.](so|a)") # hr_nccl: the root CMakeLists.txt's target of its headers
set(EXT_CUDA "^CUDA::|/libcuda[a-z_]*[.](so|a)")
set(EXT_libsodium "^PkgConfig::SODIUM$|sodium[.](so|a)")
set(EXT_inih "^PkgConfig::INIH$|inih[.](so|a)")
set(EXT_OpenBLAS "^PkgConfig::OPENBLAS$|openblas[.](so|a)")
set(EXT_zlib "^ZLIB::ZLIB$|/libz[.](so|a)")
# which folders use which of them (besides the C library, which every folder may use)
set(USERS conf ring ring/nccl trainer trainer/cuda)
set(USES_conf inih)
set(USES_ring libsodium)
set(USES_ring/nccl NCCL CUDA)
set(USES_trainer OpenBLAS zlib)
set(USES_trainer/cuda CUDA)
# the names a file may declare extern itself: the C library's (unistd.h declares environ only
# under _GNU_SOURCE)
set(EXTERN_LIBC environ)

if(NOT ROOT)
  message(FATAL_ERROR "check_layers: pass -DROOT=<source dir>")
endif()
if(NOT LINKS OR NOT EXISTS "${LINKS}")
  message(FATAL_ERROR "check_layers: pass -DLINKS=<build dir>/layer_links.txt, the link facts "
                      "the configure step writes (LINKS='${LINKS}')")
endif()

# Records one broken rule: its message is the arguments, end to end.
function(broke)
  set(msg "")
  math(EXPR last "${ARGC} - 1")
  foreach(i RANGE ${last}) # ARGVn keeps the argument's ";", ARGV would cut there
    string(APPEND msg "${ARGV${i}}")
  endforeach()
  set_property(GLOBAL APPEND_STRING PROPERTY HR_BROKEN "\n  ${msg}")
endfunction()

# Stops the check where it found fewer than `min` things of a kind (`what`): a wrong ROOT or
# LINKS, or a rule that no longer sees what it checks.
function(at_least n min what)
  if(n LESS min)
    message(FATAL_ERROR "check_layers: found only ${n} ${what}")
  endif()
endfunction()

# The layer a file belongs to, from its path relative to ROOT ("" when it is in none).
function(layer_of rel out)
  string(REGEX MATCH "^[^/]+" top "${rel}")
  if(top IN_LIST LAYERS)
    set(${out} ${top} PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

# The text of a file with its ";" as SEMI and its brackets as "<" and ">", out of the way of
# CMake's lists; and its lines as a list.
string(ASCII 1 SEMI)
function(read_text path out)
  file(READ ${path} text)
  string(REPLACE ";" "${SEMI}" text "${text}")
  string(REPLACE "[" "<" text "${text}")
  string(REPLACE "]" ">" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
function(read_lines path out)
  read_text(${path} text)
  string(REPLACE "\n" ";" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# Checks that layer `from` may use layer `to`; `where` and `what` name the file or target and
# the use.
function(may_use where from to what)
  if(NOT to IN_LIST ALLOW_${from})
    string(REPLACE ";" ", " may "${ALLOW_${from}}")
    broke("${where}: ${what} (${to}); ${from} may use only ${may}")
  endif()
endfunction()

# ---------------------------------------------------------------- 1. includes
function(check_includes sources)
  set(checked 0)
  foreach(f ${sources})
    layer_of(${f} from)
    file(STRINGS ${ROOT}/${f} incs REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line ${incs})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" inc "${line}")
      math(EXPR checked "${checked} + 1")
      layer_of(${inc} to)
      if(NOT EXISTS ${ROOT}/${inc} OR to STREQUAL "")
        broke("${f}: includes \"${inc}\", which names no header of the project by its folder "
              "(one include root: \"ring/ring.h\")")
        continue()
      endif()
      may_use(${f} ${from} ${to} "includes ${inc}")
      # an internal header (NAME_internal.h) serves its own folder only
      get_filename_component(inc_dir ${inc} DIRECTORY)
      get_filename_component(f_dir ${f} DIRECTORY)
      if(inc MATCHES "_internal\\.h$" AND NOT f_dir STREQUAL inc_dir)
        broke("${f}: includes ${inc}, internal to ${inc_dir}/")
      endif()
    endforeach()
  endforeach()
  at_least(${checked} 50 "includes under ${ROOT}; wrong ROOT?")
  set(n_includes ${checked} PARENT_SCOPE)
endfunction()

# ---------------------------------------------------------------- 2. declarations
string(CONCAT DECL_RULE "a .c or .cu file takes another file's functions and variables from "
                       "that file's header, whose include the layer rules check")
function(check_externs f)
  read_lines(${ROOT}/${f} lines)
  foreach(line ${lines})
    if(NOT line MATCHES "^[ \t]*extern[ \t]" OR line MATCHES "^[ \t]*extern[ \t]+\"C\"")
      continue()
    endif()
    string(REGEX MATCH "([A-Za-z_][A-Za-z_0-9]*)[ \t]*[<(=,${SEMI}]" m "${line}")
    if(NOT CMAKE_MATCH_1 IN_LIST EXTERN_LIBC)
      broke("${f}: declares extern ${CMAKE_MATCH_1} itself; ${DECL_RULE}")
    endif()
  endforeach()
endfunction()

function(check_prototypes f)
  read_text(${ROOT}/${f} text)
  # a line at column 0: what precedes the name, the name, the parameters (one level of
  # parentheses inside them: a function pointer), ";"
  set(pre "[A-Za-z_][^\n{}()=#${SEMI}]*[^A-Za-z_0-9\n{}()=#${SEMI}]")
  set(params "\\(([^{}()${SEMI}]|\\([^{}()${SEMI}]*\\))*\\)")
  string(REGEX MATCHALL "\n(${pre})?[A-Za-z_][A-Za-z_0-9]*${params}[ \t]*${SEMI}" decls
         "\n${text}")
  foreach(d ${decls})
    string(REGEX MATCH "^\n([^(]*[^A-Za-z_0-9(])?([A-Za-z_][A-Za-z_0-9]*)\\(" m "${d}")
    set(name ${CMAKE_MATCH_2})
    if(d MATCHES "^\n(static|typedef|extern)[ \t]") # extern: check_externs names it
      continue()
    elseif(name MATCHES "^(_Static_assert|static_assert|[A-Z0-9_]+)$") # or a macro
      continue()
    endif()
    broke("${f}: declares ${name}() itself, no static function of its own; ${DECL_RULE}")
  endforeach()
endfunction()

# ---------------------------------------------------------------- 3. links
# The library outside the project a link item names ("" for none).
function(external_of item out)
  foreach(name ${EXTERNALS})
    if(item MATCHES "${EXT_${name}}")
      set(${out} ${name} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

# Checks that `target` of `folder` may link the outside library `name` (link item `item`).
function(check_external folder target item name)
  layer_of(${folder} layer)
  set(may libc ${USES_${layer}})
  if(NOT folder STREQUAL layer)
    list(APPEND may ${USES_${folder}})
  endif()
  if(name IN_LIST may)
    return()
  endif()
  set(owners "")
  foreach(u ${USERS})
    if(name IN_LIST USES_${u})
      list(APPEND owners ${u}/)
    endif()
  endforeach()
  string(REPLACE ";" ", " may "${may}")
  string(REPLACE ";" " and " owners "${owners}")
  broke("${folder}/CMakeLists.txt: ${target} links ${name} (${item}), which is ${owners}'s; "
        "of the libraries outside the project ${folder}/ may link only ${may}")
endfunction()

# Checks one link item of `target`, which `folder` defines (folder_of_* known).
function(check_link folder target item)
  if(item MATCHES "^\\$<INSTALL_INTERFACE:")
    return()
  endif()
  string(REGEX REPLACE "^\\$<(BUILD_INTERFACE|LINK_ONLY):(.*)>$" "\\2" item "${item}")
  layer_of(${folder} from)
  external_of("${item}" name)
  if(name)
    check_external(${folder} ${target} "${item}" ${name})
  elseif(DEFINED folder_of_${item})
    layer_of(${folder_of_${item}} to)
    may_use(${folder}/CMakeLists.txt ${from} ${to} "${target} links ${item}")
  else()
    broke("${folder}/CMakeLists.txt: ${target} links ${item}, no target of the project and no "
          "library the layer table knows (EXT_* in tests/check_layers.cmake)")
  endif()
endfunction()

function(check_links)
  file(STRINGS ${LINKS} facts)
  foreach(line ${facts}) # first the folder of every target
    if(line MATCHES "^([^ ]+) ([^ :]+):")
      set(folder_of_${CMAKE_MATCH_2} ${CMAKE_MATCH_1})
    endif()
  endforeach()
  set(checked 0)
  foreach(line ${facts})
    if(NOT line MATCHES "^([^ ]+) ([^ :]+):(.*)$")
      continue()
    endif()
    set(folder ${CMAKE_MATCH_1})
    set(target ${CMAKE_MATCH_2})
    string(REGEX MATCHALL "[^ ]+" items "${CMAKE_MATCH_3}")
    layer_of(${folder} from)
    if(from STREQUAL "") # the root's and the tests' targets
      continue()
    endif()
    foreach(item ${items})
      math(EXPR checked "${checked} + 1")
      check_link(${folder} ${target} "${item}")
    endforeach()
  endforeach()
  at_least(${checked} 20 "link items in ${LINKS}")
  set(n_links ${checked} PARENT_SCOPE)
endfunction()

# ---------------------------------------------------------------- 4. the public API
# The functions of the public API: declared with HETRING_API in hetring.h and exported by
# hetring.map (its global: patterns).
function(public_api out)
  file(STRINGS ${ROOT}/cluster/hetring.h decls REGEX "^HETRING_API ")
  file(STRINGS ${ROOT}/cluster/hetring.map globals REGEX "global:")
  string(REGEX REPLACE ".*global:" "" globals "${globals}")
  string(REGEX MATCHALL "[A-Za-z_0-9*?]+" globals "${globals}") # the glob patterns
  set(api "")
  foreach(d ${decls})
    string(REGEX MATCH "([A-Za-z_][A-Za-z_0-9]*)\\(" m "${d}")
    set(name ${CMAKE_MATCH_1})
    foreach(g ${globals})
      string(REPLACE "*" ".*" g "${g}")
      string(REPLACE "?" "." g "${g}")
      if(name MATCHES "^${g}$")
        list(APPEND api ${name})
        break()
      endif()
    endforeach()
  endforeach()
  list(LENGTH api n)
  at_least(${n} 10 "public functions in hetring.h and hetring.map (${api})")
  set(${out} ${api} PARENT_SCOPE)
endfunction()

# Checks that the names `file` uses of libhetring are public; `how` says how it uses them.
function(check_public file how)
  foreach(name ${ARGN})
    if(NOT name IN_LIST API)
      broke("${file}: ${how} ${name}, which is no function of libhetring's public API "
            "(declared with HETRING_API in cluster/hetring.h, exported by hetring.map)")
    endif()
  endforeach()
endfunction()

# The C names a Python file takes from the library handle (rule 4), and in NAME_own the
# attributes it sets on the handle itself.
function(python_bindings f out)
  read_lines(${ROOT}/${f} lines)
  set(names "")
  set(own "")
  foreach(line ${lines})
    if(f MATCHES "_lib[.]py$")
      if(line MATCHES "^[ \t]*\"([A-Za-z_][A-Za-z_0-9]*)\": \\(")
        list(APPEND names ${CMAKE_MATCH_1}) # the signature table
      endif()
    endif()
    if(line MATCHES "^[ \t]*lib[.]([A-Za-z_][A-Za-z_0-9]*)[ \t]*=[^=]")
      list(APPEND own ${CMAKE_MATCH_1})
    endif()
    string(REGEX MATCHALL "(getattr|hasattr)\\((lib|L|self[.]_L), \"[A-Za-z_0-9]+\"" looks
           "${line}")
    set(handle "(^|[^A-Za-z_0-9.])(lib|L|self[.]_L|_lib_handle\\(\\))")
    string(REGEX MATCHALL "${handle}[.][A-Za-z_][A-Za-z_0-9]*" reads "${line}")
    foreach(m ${looks} ${reads})
      string(REGEX MATCH "([A-Za-z_][A-Za-z_0-9]*)\"?$" n "${m}")
      list(APPEND names ${CMAKE_MATCH_1})
    endforeach()
  endforeach()
  set(${out} ${names} PARENT_SCOPE)
  set(${out}_own ${own} PARENT_SCOPE)
endfunction()

function(check_python)
  file(GLOB_RECURSE files RELATIVE ${ROOT} ${ROOT}/python/*.py)
  set(own "")
  foreach(f ${files})
    python_bindings(${f} names)
    list(APPEND own ${names_own})
  endforeach()
  set(n 0)
  foreach(f ${files})
    python_bindings(${f} names)
    list(REMOVE_ITEM names ${own})
    list(LENGTH names k)
    math(EXPR n "${n} + ${k}")
    check_public(${f} "binds" ${names})
  endforeach()
  at_least(${n} 10 "bindings of libhetring in python/")
endfunction()

# The names an example's Python line takes from the package that are private to it.
function(python_private line out)
  set(${out} "" PARENT_SCOPE)
  if(line MATCHES "hetring([.][A-Za-z_0-9]+)*[.](_[A-Za-z_0-9]*)")
    set(${out} ${CMAKE_MATCH_2} PARENT_SCOPE)
  elseif(line MATCHES "^[ \t]*from hetring[.A-Za-z_0-9]* import (.*[ ,(])?(_[A-Za-z_0-9]*)")
    set(${out} ${CMAKE_MATCH_2} PARENT_SCOPE)
  endif()
endfunction()

function(check_examples headers)
  file(GLOB_RECURSE files RELATIVE ${ROOT} ${ROOT}/examples/*.c ${ROOT}/examples/*.h
       ${ROOT}/examples/*.py)
  foreach(f ${files})
    read_lines(${ROOT}/${f} lines)
    foreach(line ${lines})
      if(f MATCHES "[.]py$")
        python_private("${line}" private)
        if(private)
          broke("${f}: uses ${private}, private to the hetring package; examples use only "
                "its public API")
        endif()
        string(REGEX MATCHALL "[.\"]hetring_[A-Za-z_0-9]*" calls "${line}")
      else()
        if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"]")
          set(inc ${CMAKE_MATCH_1})
          if(NOT inc STREQUAL "hetring.h" AND inc IN_LIST headers)
            broke("${f}: includes ${inc}, a header of the project; examples include only "
                  "the public hetring.h, by that name (as installed)")
          endif()
        endif()
        string(REGEX MATCHALL "hetring_[A-Za-z_0-9]*[ \t]*\\(" calls "${line}")
      endif()
      string(REGEX MATCHALL "hetring_[A-Za-z_0-9]*" calls "${calls}")
      check_public(${f} "calls" ${calls})
    endforeach()
  endforeach()
endfunction()

# ---------------------------------------------------------------- run
set(sglobs)
foreach(d ${LAYERS})
  list(APPEND sglobs ${ROOT}/${d}/*.c ${ROOT}/${d}/*.h ${ROOT}/${d}/*.cu ${ROOT}/${d}/*.cuh)
endforeach()
file(GLOB_RECURSE sources RELATIVE ${ROOT} ${sglobs})
check_includes("${sources}")
set(headers "") # the project's headers, by path and by file name (how an -I reaches them)
foreach(f ${sources})
  if(f MATCHES "[.]c(u)?$")
    check_externs(${f})
    check_prototypes(${f})
  elseif(f MATCHES "[.]h$")
    get_filename_component(name ${f} NAME)
    list(APPEND headers ${f} ${name})
  endif()
endforeach()
check_links()
public_api(API)
check_python()
check_examples("${headers}")

get_property(broken GLOBAL PROPERTY HR_BROKEN)
if(broken)
  message(FATAL_ERROR "check_layers: files and targets that break the layer rules (DESIGN.md, "
                      "\"Layers\"):${broken}")
endif()
message(STATUS "check_layers: ${n_includes} includes, ${n_links} link items, the extern "
               "declarations and what python/ and examples/ use of libhetring follow the layer "
               "rules")
