# zf_add_plugin(KIND NAME SOURCES...): an in-tree plugin, built with the SDK's own
# zfcore_add_plugin into the built-in plugin directory and installed beside zfcore.
include(${CMAKE_SOURCE_DIR}/sdk/cmake/zfcorePlugin.cmake)
function(zf_add_plugin kind name)
  zfcore_add_plugin(${kind} ${name} ${ARGN})
  set_target_properties(${ZFCORE_PLUGIN_TARGET} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ZF_PLUGIN_OUTPUT_DIR})
  # A plugin's API table names the entries it has and leaves the optional others out (NULL): that
  # is the SDK's idiom, not a missing initializer.
  target_compile_options(${ZFCORE_PLUGIN_TARGET} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wno-missing-field-initializers>)
  install(TARGETS ${ZFCORE_PLUGIN_TARGET} LIBRARY DESTINATION ${ZF_PLUGIN_DIR_NAME})
  set_property(GLOBAL APPEND PROPERTY ZF_PLUGIN_TARGETS ${ZFCORE_PLUGIN_TARGET})
  set(ZFCORE_PLUGIN_TARGET ${ZFCORE_PLUGIN_TARGET} PARENT_SCOPE)
endfunction()
