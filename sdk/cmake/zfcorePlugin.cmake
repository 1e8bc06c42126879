# zfcore_add_plugin(KIND NAME SOURCES...): a zfcore plugin module named zf-KIND-NAME.so, the file
# name the host expects (KIND: stage, offload, optimizer or selector; NAME as in the descriptor).
# Returns the target name in ZFCORE_PLUGIN_TARGET. The plugin links only the SDK headers, and a
# linker version script (zfcore_plugin.map) exports zf_plugin_negotiate and zf_plugin_describe
# alone, so the plugin's other symbols (its C++ runtime's included) never clash with the host's.
set(_ZFCORE_PLUGIN_MAP "${CMAKE_CURRENT_LIST_DIR}/zfcore_plugin.map")
function(zfcore_add_plugin kind name)
  if(NOT kind MATCHES "^(stage|offload|optimizer|selector)$")
    message(FATAL_ERROR "zfcore_add_plugin: kind '${kind}' must be stage, offload, optimizer or selector")
  endif()
  set(target zf-${kind}-${name})
  add_library(${target} MODULE ${ARGN})
  target_link_libraries(${target} PRIVATE zfcore::sdk)
  set_target_properties(${target} PROPERTIES PREFIX "" OUTPUT_NAME ${target}
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden LINK_DEPENDS "${_ZFCORE_PLUGIN_MAP}")
  target_link_options(${target} PRIVATE -Wl,--no-undefined "LINKER:--version-script=${_ZFCORE_PLUGIN_MAP}")
  set(ZFCORE_PLUGIN_TARGET ${target} PARENT_SCOPE)
endfunction()
