# cldl_raw_literal(<content> <out-var>): <content> as adjacent C++ raw string literals of at most 8000
# characters each (compilers limit the length of one literal); "" for empty content. Used by the
# scripts that embed kernels/*.cl and tuning/*.json into the library.
function(cldl_raw_literal content out)
  string(LENGTH "${content}" len)
  set(pieces "")
  set(pos 0)
  while(pos LESS len)
    string(SUBSTRING "${content}" ${pos} 8000 chunk)
    string(APPEND pieces "R\"CLDL(${chunk})CLDL\"\n")
    math(EXPR pos "${pos} + 8000")
  endwhile()
  if(pieces STREQUAL "")
    set(pieces "\"\"")
  endif()
  set(${out} "${pieces}" PARENT_SCOPE)
endfunction()
