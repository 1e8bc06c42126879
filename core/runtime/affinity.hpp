// affinity.hpp: which cores this process may run on.
#pragma once

#include <vector>

namespace zf {

std::vector<int> allowed_cores();  // from the process's affinity mask, ascending

}  // namespace zf
